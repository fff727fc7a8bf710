"""A node lost mid-run: its slurmd and every process of the job on it die at once (as when a
machine loses power). Slurm notices after SlurmdTimeout (30 s on the testbed) and ends the job
with NODE_FAIL; with the cluster default (JobRequeue=1) it requeues the job, without
(``--no-requeue``) the experiment must end KILLED. Real Slurm and MongoDB; node2 is brought
back at the end."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, start_app, wait_running, wait_until

from seml_hydra.manage import task_of

LOST = "node2"
#: the job runs on the node that is lost; the launcher checks Slurm twice a second
ON_LOST_NODE = ["hydra.launcher.exclude=node1", "hydra.launcher.poll_interval_s=0.5"]


def raw_job_id(job: str) -> str:
    """Slurm's own id of an array task (``<array>_<task>`` -> ``JobId``)."""
    out = subprocess.run(
        ["scontrol", "show", "job", job], capture_output=True, text=True, check=True
    ).stdout
    return re.search(r"\bJobId=(\d+)", out).group(1)


def job_pids(job_id: str) -> list[int]:
    """The processes of Slurm job ``job_id`` on this machine: its slurmstepd daemons and every
    process whose environment holds ``SLURM_JOB_ID=<job_id>``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if cmdline.startswith(f"slurmstepd: [{job_id}.".encode()) or (
            f"SLURM_JOB_ID={job_id}\0".encode() in environ
        ):
            pids.append(int(entry.name))
    return pids


def node_state(node: str) -> str:
    return subprocess.run(
        ["sinfo", "-h", "-n", node, "-o", "%T"], capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def lose_node(slurm):
    """``lose(job)``: SIGKILL the lost node's slurmd, then every process of ``job`` (slurmd
    first, so it cannot report the job's end). The node is restarted afterwards and the test
    waits until Slurm has it back in service."""

    def lose(job: str) -> None:
        job_id = raw_job_id(job)
        slurmd = int(Path(f"/run/slurmd-{LOST}.pid").read_text())
        os.kill(slurmd, signal.SIGKILL)
        pids = job_pids(job_id)
        assert pids, f"no process of job {job_id} found"
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    yield lose
    subprocess.run(["bash", str(ROOT / "tools/testbed/up.sh")], capture_output=True, check=True)
    wait_until(
        f"{LOST} to be back in service",
        lambda: node_state(LOST) in ("idle", "mixed", "allocated"),
        120,
    )


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
        wait_running(coll, proc)
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


def set_node_state(node: str, state: str) -> None:
    subprocess.run(
        ["scontrol", "update", f"nodename={node}", f"state={state}", "reason=seml-hydra test"],
        capture_output=True,
        check=False,  # resuming a node that is not drained is refused, and harmless
    )


def test_a_lost_node_with_slurms_requeue_runs_the_experiment_again_and_completes(
    lose_node, test_db, tmp_path
):
    """The job may run anywhere (a requeued job keeps its ``--exclude``), so node1 is drained
    while the first run starts on node2, and resumed once node2 is lost."""
    coll = test_db["gate"]
    gate = tmp_path / "open"
    set_node_state("node1", "drain")
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
        wait_running(coll, proc)
        doc = wait_until("the run to start", lambda: coll.find_one({"host": {"$exists": True}}))
        assert doc["host"]["hostname"] == LOST
        execution = doc["execution"]
        job = task_of(doc)[1]
        lose_node(job)
        set_node_state("node1", "resume")
        gate.touch()  # the run after the requeue returns at once
        out, err = proc.communicate(timeout=420)  # node timeout + Slurm's requeue delay
    finally:
        set_node_state("node1", "resume")
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
    assert doc["host"]["hostname"] == "node1"
    assert coll.count_documents({}) == 1
    wait_until(
        "sacct to record the node failure and the completed rerun",
        lambda: sacct_states(job) == ["NODE_FAIL", "COMPLETED"],
        60,
    )
