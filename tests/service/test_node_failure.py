"""A node lost mid-run: its slurmd and every process of the job on it die at once (as when a
machine loses power). Slurm notices after SlurmdTimeout and ends the job with NODE_FAIL; with
the cluster default (JobRequeue=1) it requeues the job, without (``--no-requeue``) the
experiment must end KILLED. And a slurmd crash: only slurmd dies, the task lives on while Slurm
requeues the job elsewhere; the experiment must still run once.

Real Slurm and MongoDB, on the testbed's fault cluster (``fault_slurm``: node3 and node4, a
SlurmdTimeout of 10 s and a requeue delay of 20 s, tools/testbed/up.sh), which these tests
have to themselves while the other tests run on the shared cluster; node4 is brought back at
the end of each."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
from support.run import start_app
from support.slurm import LOST_NODE, OTHER_NODE, run_up_sh
from support.wait import wait_running, wait_until

from seml_hydra.track.jobs import task_of

#: one xdist worker runs the fault cluster's tests one after another (conftest adds it too, from
#: the fixture: written here as well, as xdist reads it at collection)
pytestmark = pytest.mark.xdist_group("fault-cluster")

LOST = LOST_NODE
#: the job runs on the node that is lost; the launcher checks Slurm twice a second
ON_LOST_NODE = [f"hydra.launcher.exclude={OTHER_NODE}", "hydra.launcher.poll_interval_s=0.5"]


def raw_job_id(job: str) -> str:
    """Slurm's own id of an array task (``<array>_<task>`` -> ``JobId``)."""
    out = subprocess.run(
        ["scontrol", "show", "job", job], capture_output=True, text=True, check=True
    ).stdout
    return re.search(r"\bJobId=(\d+)", out).group(1)


def job_pids(job_id: str, uts: str | None = None) -> list[int]:
    """The processes of Slurm job ``job_id`` on this machine: its slurmstepd daemons and every
    process whose environment holds ``SLURM_JOB_ID=<job_id>``; with ``uts``, only those in that
    UTS namespace (one virtual node's, see :func:`uts_namespace`)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
            namespace = os.readlink(entry / "ns" / "uts")
        except OSError:
            continue
        if uts is not None and namespace != uts:
            continue
        if cmdline.startswith(f"slurmstepd: [{job_id}.".encode()) or (
            f"SLURM_JOB_ID={job_id}\0".encode() in environ
        ):
            pids.append(int(entry.name))
    return pids


def uts_namespace(pid: int) -> str:
    """Process ``pid``'s UTS namespace (``uts:[N]``): each virtual node's slurmd and its jobs
    run in their own (tools/testbed/up.sh), so it tells the nodes' processes apart."""
    return os.readlink(f"/proc/{pid}/ns/uts")


def slurmd_pid(node: str) -> int:
    return int(Path(f"/run/slurmd-{node}.pid").read_text())


def bring_back(node: str) -> None:
    """Restart ``node``'s slurmd (tools/testbed/up.sh starts what is not running) and wait until
    Slurm has it back in service."""
    run_up_sh()
    wait_until(
        f"{node} to be back in service",
        lambda: node_state(node) in ("idle", "mixed", "allocated"),
        120,
    )


def node_state(node: str) -> str:
    return subprocess.run(
        ["sinfo", "-h", "-n", node, "-o", "%T"], capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def lose_node(fault_slurm):
    """``lose(job)``: SIGKILL the lost node's slurmd, then every process of ``job`` (slurmd
    first, so it cannot report the job's end). The node is restarted afterwards and the test
    waits until Slurm has it back in service."""

    def lose(job: str) -> None:
        job_id = raw_job_id(job)
        os.kill(slurmd_pid(LOST), signal.SIGKILL)
        pids = job_pids(job_id)
        assert pids, f"no process of job {job_id} found"
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    yield lose
    bring_back(LOST)


@pytest.fixture
def crash_slurmd(fault_slurm):
    """``crash(job)``: SIGKILL only the lost node's slurmd; the processes of ``job`` on it live
    on. Afterwards whatever is left of the job on that node is killed, the node restarted and
    awaited in service."""
    crashed: list[tuple[str, str]] = []

    def crash(job: str) -> None:
        slurmd = slurmd_pid(LOST)
        crashed.append((raw_job_id(job), uts_namespace(slurmd)))
        os.kill(slurmd, signal.SIGKILL)

    yield crash
    for job_id, uts in crashed:
        for pid in job_pids(job_id, uts):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    bring_back(LOST)


def earlier_run(starts: Path) -> str:
    """The starts recorded in ``starts`` (``pid host`` lines) and whether the first one's
    process is still alive (the nodes share this machine's process namespace)."""
    lines = starts.read_text().splitlines()
    pid = int(lines[0].split()[0])
    return f"starts {lines}; the earlier run (pid {pid}) is {'alive' if Path(f'/proc/{pid}').exists() else 'gone'}"


def sacct_states(job: str) -> list[str]:
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-D", "-j", job, "-o", "State"],
        capture_output=True,
        text=True,
    ).stdout
    return out.split()


def test_a_lost_node_without_requeue_ends_the_experiment_killed_with_the_reason(
    lose_node, test_db, tmp_path
):
    coll = test_db["gate"]
    proc = start_app(
        "tests/apps/gate.py",
        "-m",
        "hydra/launcher=seml",
        *ON_LOST_NODE,
        "+hydra.launcher.additional_parameters.no-requeue=true",
        f"gate={tmp_path / 'never'}",
        cwd=tmp_path,
    )
    try:
        wait_running(coll, proc, timeout=600)
        doc = wait_until("the run to start", lambda: coll.find_one({"host": {"$exists": True}}))
        assert doc["host"]["hostname"] == LOST
        job = task_of(doc)[1]
        lose_node(job)
        out, err = proc.communicate(timeout=240)  # Slurm gives up on the node after ~30-60 s
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert "is KILLED" in err, err
    doc = coll.find_one()
    assert doc["status"] == "KILLED"
    assert "NODE_FAIL" in doc["fail_trace"][0]
    assert sacct_states(job) == ["NODE_FAIL"]


def cancel_jobs_in(directory: Path) -> None:
    """scancel this test's Slurm jobs (those started in ``directory``), e.g. after the launcher
    was killed: left queued they would start later on the shared cluster."""
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i %Z"], capture_output=True, text=True, check=False
    ).stdout
    jobs = [line.split()[0] for line in out.splitlines() if line.endswith(f" {directory}")]
    if jobs:
        subprocess.run(["scancel", *jobs], capture_output=True, check=False)


def set_node_state(node: str, state: str) -> None:
    subprocess.run(
        ["scontrol", "update", f"nodename={node}", f"state={state}", "reason=seml-hydra test"],
        capture_output=True,
        check=False,  # resuming a node that is not drained is refused, and harmless
    )


def test_a_lost_node_with_slurms_requeue_runs_the_experiment_again_and_completes(
    lose_node, test_db, tmp_path
):
    """The job may run anywhere (a requeued job keeps its ``--exclude``), so node3 is drained
    while the first run starts on node4, and resumed once node4 is lost."""
    coll = test_db["gate"]
    gate = tmp_path / "open"
    set_node_state(OTHER_NODE, "drain")
    proc = None
    try:
        proc = start_app(
            "tests/apps/gate.py",
            "-m",
            "hydra/launcher=seml",
            "hydra.launcher.poll_interval_s=0.5",
            f"gate={gate}",
            cwd=tmp_path,
        )
        wait_running(coll, proc, timeout=600)
        doc = wait_until("the run to start", lambda: coll.find_one({"host": {"$exists": True}}))
        assert doc["host"]["hostname"] == LOST
        execution = doc["execution"]
        job = task_of(doc)[1]
        lose_node(job)
        set_node_state(OTHER_NODE, "resume")
        gate.touch()  # the run after the requeue returns at once
        out, err = proc.communicate(timeout=420)  # node timeout + Slurm's requeue delay
    finally:
        set_node_state(OTHER_NODE, "resume")
        if proc is not None and proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    doc = coll.find_one()
    assert doc["status"] == "COMPLETED"
    assert doc["result"] == 0
    # the same array task ran it again, on the node that is left
    assert {k: doc["execution"][k] for k in ("array_id", "task_id")} == {
        k: execution[k] for k in ("array_id", "task_id")
    }
    assert doc["host"]["hostname"] == OTHER_NODE
    assert coll.count_documents({}) == 1
    wait_until(
        "sacct to record the node failure and the completed rerun",
        lambda: sacct_states(job) == ["NODE_FAIL", "COMPLETED"],
        60,
    )


def test_a_crashed_slurmd_whose_task_lives_on_runs_the_experiment_once(
    crash_slurmd, test_db, tmp_path
):
    """Only node4's slurmd dies; its task keeps running. Slurm requeues the job on node3
    (SLURM_RESTART_COUNT=1), where the same array task finds the experiment RUNNING in the
    earlier run, whose heartbeat is fresh: it waits instead of starting it a second time. The
    earlier run then completes, and the requeued task exits without running it. node3 is
    drained while the first run starts on node4, as in the requeue test above.

    The earlier run must live on meanwhile: a slurmd restarted under it (an up.sh run by
    someone else, before the fault cluster was held by its tests) makes Slurm kill it, and then
    the requeued task rightly takes the experiment over once its heartbeat is stale, a second
    start. The assertion says whether the earlier run's process was still alive."""
    coll = test_db["gate"]
    gate, starts = tmp_path / "open", tmp_path / "starts"
    set_node_state(OTHER_NODE, "drain")
    proc = None
    try:
        proc = start_app(
            "tests/apps/gate.py",
            "-m",
            "hydra/launcher=seml",
            "hydra.launcher.poll_interval_s=0.5",
            f"gate={gate}",
            "max_wait_s=900",
            f"+marker={starts}",
            cwd=tmp_path,
        )
        wait_running(coll, proc, timeout=600)
        doc = wait_until(
            "the run to start", lambda: coll.find_one({"host": {"$exists": True}}), 600
        )
        assert doc["host"]["hostname"] == LOST
        job = task_of(doc)[1]
        crash_slurmd(job)
        set_node_state(OTHER_NODE, "resume")
        logs = [Path(doc["execution"][k]) for k in ("slurm_output_file", "slurm_error_file")]

        def job_logs() -> str:
            return "".join(p.read_text(errors="replace") for p in logs if p.exists())

        def requeued_task_waits_or_runs() -> bool:
            waits = "still runs in an earlier run of this array task" in job_logs()
            # the first run writes its start once its task begins: maybe not yet
            return waits or (starts.exists() and len(starts.read_text().splitlines()) > 1)

        # SlurmdTimeout, Slurm's delay before a requeued job may start (cred_expire)
        wait_until("the requeued task to wait (or to run)", requeued_task_waits_or_runs, 600)
        assert len(starts.read_text().splitlines()) == 1, (earlier_run(starts), job_logs())
        gate.touch()  # the earlier run, still alive on node4, completes
        out, err = proc.communicate(timeout=300)
    finally:
        set_node_state(OTHER_NODE, "resume")
        if proc is not None and proc.poll() is None:
            proc.kill()
            cancel_jobs_in(tmp_path)
    assert proc.returncode == 0, (err, job_logs())
    assert len(starts.read_text().splitlines()) == 1, (earlier_run(starts), job_logs())
    assert coll.count_documents({}) == 1
    doc = coll.find_one()
    assert doc["status"] == "COMPLETED"
    assert doc["result"] == 0
    assert doc["host"]["hostname"] == LOST  # recorded by the one run, the earlier one
    assert doc["execution"]["restart"] == 0
    # the requeued task sees it at its next look (every 5 s) and exits without running it
    skipped = f"Not running experiment {doc['_id']} of gate: it is COMPLETED, not PENDING"
    wait_until("the requeued task to skip the experiment", lambda: skipped in job_logs(), 60)
