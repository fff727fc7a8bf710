"""Slurm in the tests: accounting and queue queries, the testbed's fault cluster, a Slurm
client that waits at a gate the test opens."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support.paths import ROOT

#: squeue states of a task that is still there
ALIVE = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED")

#: the testbed's fault cluster (tools/testbed/up.sh): a Slurm cluster of its own, for the tests
#: that crash a slurmd, drain a node or stop slurmctld, beside every other test
FAULT_CLUSTER = "semlfault"
FAULT_CONF = Path("/etc/slurm-fault/slurm.conf")
#: its nodes: a job runs on LOST_NODE when OTHER_NODE is drained or excluded
OTHER_NODE, LOST_NODE = FAULT_NODES = ("node3", "node4")
#: where a test that holds a cluster says so (up.sh then leaves that cluster alone)
HOLD_DIR = Path("/run/seml-testbed-hold")


def sacct(job, fields: str, *flags: str, check: bool = True) -> str:
    """Slurm accounting of ``job`` (an array or job id): ``sacct -n -P -X *flags -j job -o
    fields`` (no header, ``|``-separated, allocations only), its stdout; ``check``: fail when
    sacct does."""
    return subprocess.run(
        ["sacct", "-n", "-P", "-X", *flags, "-j", str(job), "-o", fields],
        capture_output=True,
        text=True,
        check=check,
    ).stdout


def squeue_tasks(array_id, alive_only: bool = True) -> dict[str, tuple[str, str]]:
    """``{"<array>_<task>": (state, reason)}`` of an array's tasks as squeue lists them; with
    ``alive_only`` only those in an :data:`ALIVE` state."""
    out = subprocess.run(
        ["squeue", "-h", "-r", "-j", str(array_id), "-o", "%i|%T|%r"],
        capture_output=True,
        text=True,
    ).stdout
    rows = {}
    for line in out.split():
        job, state, reason = line.split("|")
        if state in ALIVE or not alive_only:
            rows[job] = (state, reason)
    return rows


def run_up_sh() -> None:
    """Bring the fault cluster back (fixture ``fault_slurm``): run tools/testbed/up.sh, which
    starts what is not running (a slurmd or slurmctld a test killed) and waits for its nodes,
    for the fault cluster only (``MAIN_CLUSTER=0 WITH_MONGO=0``: the shared cluster's nodes,
    busy with the other tests' jobs, are neither touched nor waited for) and without its srun
    smoke test. Fails the test with up.sh's last 40 lines of output (its ``ERROR:`` line and,
    for nodes that did not come back, ``sinfo -N -l``) when it fails."""
    done = subprocess.run(
        ["bash", str(ROOT / "tools/testbed/up.sh")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "SMOKE_TEST": "0", "MAIN_CLUSTER": "0", "WITH_MONGO": "0"},
    )
    if done.returncode != 0:
        tail = "\n".join(done.stdout.splitlines()[-40:])
        pytest.fail(f"tools/testbed/up.sh exited with {done.returncode}:\n{tail}")


class Blocker:
    """A Slurm client (``sbatch``, ``scancel``...) that, put first on a PATH (:attr:`bin`),
    touches :attr:`called` and waits while :attr:`closed` exists, then runs the real client. The
    first ``skip`` calls go straight to the real client (to block a later call of the same one).
    Its files live in ``directory``."""

    def __init__(self, client: str, directory: Path, skip: int = 0) -> None:
        real = shutil.which(client)
        assert real, f"no {client} on PATH"
        self.bin = directory / f"blocking_{client}"
        self.bin.mkdir()
        self.called = directory / f"{client}.called"
        self.closed = directory / f"{client}.closed"
        self.closed.touch()
        calls = directory / f"{client}.calls"
        script = self.bin / client
        script.write_text(
            "#!/bin/sh\n"
            f"echo >> '{calls}'\n"
            f"if [ $(wc -l < '{calls}') -le {int(skip)} ]; then exec '{real}' \"$@\"; fi\n"
            f"touch '{self.called}'\n"
            f"while [ -e '{self.closed}' ]; do sleep 0.1; done\n"
            f"exec '{real}' \"$@\"\n"
        )
        script.chmod(0o755)

    def open(self) -> None:
        """Let the waiting client (and any later call) through to the real one."""
        self.closed.unlink(missing_ok=True)


def release_and_wait(array_id) -> None:
    """Release a held array (``scontrol release``) and wait until squeue lists none of its
    tasks."""
    from support.wait import wait_until

    subprocess.run(["scontrol", "release", str(array_id)], check=True)
    wait_until("the job ends", lambda: squeue_tasks(array_id) == {})


def dead_array(tasks: int) -> int:
    """The id of a held array of ``tasks`` tasks cancelled before it started and gone from the
    queue (what Slurm shows of tasks it lost)."""
    from support.wait import wait_until

    out = subprocess.run(
        ["sbatch", "--parsable", "-p", "debug", "-t", "5", "--hold", f"--array=0-{tasks - 1}"]
        + ["--wrap", "true"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    array = int(out.strip().split(";")[0])
    subprocess.run(["scancel", str(array)], check=True)
    wait_until("the array leaves the queue", lambda: not squeue_tasks(array), timeout=60)
    return array
