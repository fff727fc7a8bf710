"""Faults: timeouts and preemption (opt-in requeue), killed jobs, a hand-started duplicate task.
Real Slurm and MongoDB."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

TIMEOUT = [
    "hydra.launcher.timeout_min=1",
    "hydra.launcher.signal_delay_s=50",  # Slurm signals ~10 s into the job
    "hydra.launcher.poll_interval_s=0.5",
]


def run_resume_app(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests/apps/resume_app.py"),
            "-m",
            "hydra/launcher=seml",
            *TIMEOUT,
            *args,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_timeout_with_checkpoint_is_rescheduled_requeued_and_completed_by_the_same_task(
    slurm, test_db, tmp_path
):
    proc = run_resume_app(cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (doc,) = list(test_db["resume_app"].find())
    assert doc["status"] == "COMPLETED"
    assert doc["result"] == {"runs": 2, "requeues": 1}  # resumed from the saved state
    assert doc["requeues"] == 1
    array_id = doc["slurm"][0]["array_id"]
    assert doc["execution"]["array_id"] == array_id and doc["execution"]["task_id"] == 0
    states = subprocess.run(
        ["sacct", "-n", "-P", "-X", "-D", "-j", str(array_id), "-o", "State"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert states == ["REQUEUED", "COMPLETED"]


def test_timeout_without_opt_in_ends_failed_with_the_reason_not_running(slurm, test_db, tmp_path):
    proc = run_resume_app("opt_in=false", cwd=tmp_path)
    assert proc.returncode != 0
    (doc,) = list(test_db["resume_app"].find())
    assert doc["status"] == "FAILED"
    assert "did not opt in to requeueing" in "".join(doc["fail_trace"])
    assert not doc.get("requeues")


def test_requeue_limit_ends_failed_with_a_clear_reason(slurm, test_db, tmp_path):
    proc = run_resume_app("hydra.launcher.max_requeues=0", cwd=tmp_path)
    assert proc.returncode != 0
    (doc,) = list(test_db["resume_app"].find())
    assert doc["status"] == "FAILED"
    assert "max_requeues=0 reached" in "".join(doc["fail_trace"])
