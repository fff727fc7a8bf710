"""Fail-fast (``hydra.launcher.max_failures``, ``seml <collection> start --max-failures``) on
the Slurm testbed: once that many experiments of one launch ended FAILED, the launch's other
experiments end INTERRUPTED with the reason, whether the launcher waits or not.

The app (``tests/apps/gate.py``) raises for the points ``x < fail_below`` and keeps the others
RUNNING until their gate file exists (here: never, at most ``max_wait_s``: without fail-fast
they end COMPLETED then).
"""

from __future__ import annotations

import subprocess

import pytest
from conftest import (
    GATE_APP,
    launch_gate,
    run_app,
    squeue_tasks,
    start_app,
    statuses,
    wait_running,
    wait_until,
)
from conftest import seml_ok as seml

pytestmark = pytest.mark.slurm

REASON = "fail-fast: 2 experiments failed: ids 1, 2"
ONE_REASON = "fail-fast: 1 experiment failed: id 1"


def started_points(marker) -> set[int]:
    """The ``x`` of every task start the app recorded (``+marker``)."""
    if not marker.exists():
        return set()
    return {int(line.split()[2]) for line in marker.read_text().splitlines()}


def assert_stopped(coll, stopped: range, reason: str = REASON) -> None:
    """Experiments 1 and 2 FAILED, every one of ``stopped`` INTERRUPTED with ``reason``."""
    docs = {d["_id"]: d for d in coll.find()}
    assert {i: d["status"] for i, d in docs.items()} == {
        1: "FAILED",
        2: "FAILED",
        **dict.fromkeys(stopped, "INTERRUPTED"),
    }
    for i in stopped:
        assert docs[i]["fail_fast"]["reason"] == reason
        assert docs[i]["fail_trace"] == [reason + "\n"]


def arrays_of(coll) -> set:
    return {d["slurm"][0]["array_id"] for d in coll.find({}, {"slurm": 1})}


def test_a_sweep_whose_first_points_raise_stops_at_max_failures(slurm, test_db, tmp_path):
    marker = tmp_path / "starts"
    proc = run_app(
        GATE_APP,
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.max_failures=2",
        "hydra.launcher.array_parallelism=4",
        "+fail_below=2",
        f"gate={tmp_path / 'never'}",
        "max_wait_s=60",
        f"+marker={marker}",
        "x=0,1,2,3,4,5,6,7",
        cwd=tmp_path,
    )
    # the launcher exits non-zero, naming the failures and how many it stopped
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{REASON} (max_failures=2); stopped 6 other experiment(s)" in proc.stderr
    coll = test_db["gate"]
    assert_stopped(coll, range(3, 9))
    # at most one more point started than the 4 array tasks: none of the last ones ran
    assert started_points(marker) <= {0, 1, 2, 3, 4, 5}, started_points(marker)
    # no task of the launch is left in Slurm
    for array in arrays_of(coll):
        wait_until(f"array {array} is gone", lambda a=array: squeue_tasks(a) == {}, 60)
    out = seml("gate", "status")
    assert f"3-8 stopped by {REASON}" in out, out


def test_without_the_launcher_the_jobs_stop_the_launch(slurm, test_db, tmp_path):
    """wait=false: no launcher process is left; the job that records the second failure stops
    the rest, and the pending ones never start."""
    marker = tmp_path / "starts"
    launch_gate(
        tmp_path,
        "hydra.launcher.max_failures=2",
        "hydra.launcher.array_parallelism=2",
        "+fail_below=2",
        f"gate={tmp_path / 'never'}",
        "max_wait_s=20",
        f"+marker={marker}",
        "x=0,1,2,3,4,5,6,7",
    )
    coll = test_db["gate"]
    wait_until(
        "every experiment ended",
        lambda: set(statuses(coll).values()) <= {"COMPLETED", "FAILED", "INTERRUPTED"},
        timeout=240,
    )
    assert_stopped(coll, range(3, 9))
    # two tasks at a time: one task may have started one point before the second failure
    assert started_points(marker) <= {0, 1, 2, 3}, started_points(marker)


def test_the_failing_job_cancels_the_running_ones(slurm, test_db, tmp_path):
    """Both experiments run (no task left to claim one, no launcher waits) when the first one
    raises: its job stops the other and cancels its task."""
    fail_gate = tmp_path / "fail now"
    launch_gate(
        tmp_path,
        "hydra.launcher.max_failures=1",
        "+fail_below=1",
        f"+fail_gate={fail_gate}",
        f"gate={tmp_path / 'never'}",
        "max_wait_s=60",
        "x=0,1",
    )
    coll = test_db["gate"]
    array = next(iter(arrays_of(coll)))
    try:
        wait_until("both run", lambda: set(statuses(coll).values()) == {"RUNNING"})
        fail_gate.touch()
        wait_until(
            "both ended",
            lambda: set(statuses(coll).values()) <= {"COMPLETED", "FAILED", "INTERRUPTED"},
            timeout=120,
        )
        assert statuses(coll) == {1: "FAILED", 2: "INTERRUPTED"}
        assert coll.find_one({"_id": 2})["fail_fast"]["reason"] == ONE_REASON
        wait_until("the cancelled task is gone", lambda: squeue_tasks(array) == {}, 60)
    finally:
        subprocess.run(["scancel", str(array)], check=False)


def test_the_waiting_launcher_stops_the_launch_when_no_job_did(slurm, test_db, tmp_path):
    """A failure no job could act on (its job died right after recording it: here the test
    cancels the task and writes FAILED; no task is left to claim): the waiting launcher stops
    the rest and exits non-zero."""
    proc = start_app(
        "tests/apps/gate.py",
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.max_failures=1",
        f"gate={tmp_path / 'never'}",
        "max_wait_s=60",
        "x=0,1",
        cwd=tmp_path,
    )
    coll = test_db["gate"]
    try:
        wait_running(coll, proc, count=2, timeout=120)
        # experiment 1's job dies right after recording its failure (a live run's next
        # heartbeat would write RUNNING again)
        job = coll.find_one({"_id": 1})["slurm"][0]["job_id"]
        subprocess.run(["scancel", job], check=True)
        wait_until(f"task {job} is gone", lambda: job not in squeue_tasks(job.split("_")[0]), 60)
        coll.update_one({"_id": 1}, {"$set": {"status": "FAILED"}})
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        arrays = arrays_of(coll)
        subprocess.run(["scancel", *map(str, arrays)], check=False)  # the "dead" job's task
    assert proc.returncode == 1, out + err
    assert f"{ONE_REASON} (max_failures=1); stopped 1 other experiment(s)" in err, err
    doc = coll.find_one({"_id": 2})
    assert doc["status"] == "INTERRUPTED" and doc["fail_fast"]["reason"] == ONE_REASON


def test_a_task_that_claims_after_the_limit_does_not_run(slurm, test_db, tmp_path):
    """The failures are recorded by jobs that died before they could stop the launch (and no
    launcher waits): the tasks that start afterwards check the launch's failures when they
    claim, and run nothing."""
    marker = tmp_path / "starts"
    launch_gate(
        tmp_path,
        "hydra.launcher.max_failures=2",
        "+hydra.launcher.additional_parameters.hold=true",  # the tasks start once released
        f"+marker={marker}",
        "x=0,1,2,3",
    )
    coll = test_db["gate"]
    try:
        coll.update_many({"_id": {"$in": [3, 4]}}, {"$set": {"status": "FAILED"}})
        seml("gate", "release")
        reason = "fail-fast: 2 experiments failed: ids 3, 4"
        wait_until(
            "experiments 1 and 2 ended",
            lambda: (
                statuses(coll) == {1: "INTERRUPTED", 2: "INTERRUPTED", 3: "FAILED", 4: "FAILED"}
            ),
            timeout=120,
        )
        stopped = list(coll.find({"_id": {"$in": [1, 2]}}))
        assert all(doc["fail_fast"]["reason"] == reason for doc in stopped)
        # the first task to claim stopped both (the other one PENDING, then refused its claim)
        assert any("execution" in doc for doc in stopped)
        assert started_points(marker) == set()  # claimed, never run (and nothing is left to run)
    finally:  # the tasks of 3 and 4 stay held (release acts on PENDING experiments' only)
        subprocess.run(["scancel", *map(str, arrays_of(coll))], check=False)


def test_start_with_max_failures_stops_what_it_submits(slurm, test_db, tmp_path):
    """Experiments staged again (cancel, reset) and submitted by `seml start --max-failures 2`:
    a value below 1 is refused first, in one line, submitting nothing."""
    from typer.testing import CliRunner

    from seml_hydra.cli import app

    launch_gate(
        tmp_path,
        "+hydra.launcher.additional_parameters.hold=true",  # never runs before the cancel
        "+fail_below=2",
        f"gate={tmp_path / 'never'}",
        "max_wait_s=60",
        "x=0,1,2,3,4,5",
    )
    coll = test_db["gate"]
    seml("gate", "cancel")
    seml("gate", "reset")
    assert set(statuses(coll).values()) == {"STAGED"}

    for bad in ("0", "-1"):
        refused = CliRunner().invoke(app, ["gate", "start", "--max-failures", bad])
        assert refused.exit_code == 1, refused.output
        assert f"--max-failures={bad}: must be an integer >= 1" in refused.output
        assert "Traceback" not in refused.output
        assert len(refused.output.strip().splitlines()) == 1, refused.output
    assert set(statuses(coll).values()) == {"STAGED"}

    out = seml("gate", "start", "--max-failures", "2")
    assert "Started 6 experiment(s)" in out
    # it says the limit it applies
    assert (
        "Fail-fast: once 2 of the 6 experiment(s) started now ended FAILED, the others stop "
        "(--max-failures 2)."
    ) in out.replace("\n", " "), out
    marks = [d["fail_fast"] for d in coll.find()]
    assert {m["max_failures"] for m in marks} == {2} and len({m["group"] for m in marks}) == 1
    seml("gate", "release")  # the launch's hold=true holds the new array too
    wait_until(
        "every experiment ended",
        lambda: set(statuses(coll).values()) <= {"COMPLETED", "FAILED", "INTERRUPTED"},
        timeout=240,
    )
    assert_stopped(coll, range(3, 7))


@pytest.mark.parametrize(
    ("value", "shown"), [("0", "0"), ("1.5", "1.5"), ("abc", "'abc'"), ("true", "True")]
)
def test_max_failures_not_a_positive_integer_is_refused_before_staging_in_one_line(
    test_db, tmp_path, value, shown
):
    """Zero, a float, a word or a bool: the launcher's one line (not OmegaConf's conversion
    error of a typed field), and nothing staged."""
    proc = run_app(
        GATE_APP,
        "-m",
        "hydra/launcher=seml",
        f"hydra.launcher.max_failures={value}",
        "x=1,2",
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"Error: hydra.launcher.max_failures={shown}: must be an integer >= 1 (the number of "
        "FAILED experiments that stops the launch's other experiments), or null for no "
        "fail-fast; nothing was staged"
    ], proc.stderr
    assert test_db["gate"].count_documents({}) == 0
