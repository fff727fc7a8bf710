"""Batches that wait for each other on the testbed: ``hydra.launcher.after``
submits the arrays with a Slurm dependency on an earlier batch's arrays; batch 2 starts only
after batch 1 completed; a batch 1 that failed leaves batch 2 ``DependencyNeverSatisfied``,
which ``seml status`` and ``seml queue`` report; an unknown or failed batch is refused before
staging."""

from __future__ import annotations

import subprocess

import pytest
from support.mongo import statuses
from support.paths import GATE_APP
from support.run import launch_gate, run_app
from support.run import seml_ok as seml
from support.slurm import squeue_tasks
from support.wait import wait_until

pytestmark = pytest.mark.slurm


@pytest.fixture(autouse=True)
def wide_cli(tmp_path, monkeypatch):
    """The CLI's own cache in the test's folder; tables wide enough not to wrap a dependency."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "250")


def launch(tmp_path, *overrides: str, ok: bool = True):
    """One batch of the gate app (``x=...`` and the gate given in ``overrides``), not waiting."""
    return launch_gate(tmp_path, "hydra.launcher.poll_interval_s=0.3", *overrides, check=ok)


def batch(coll, batch_id: int) -> list[dict]:
    return list(coll.find({"batch_id": batch_id}))


@pytest.fixture
def arrays():
    """Array ids to cancel at the end (a batch whose dependency failed stays pending)."""
    ids: list[str] = []
    yield ids
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True)


def test_batch_2_starts_only_after_batch_1_completed(slurm, test_db, tmp_path, arrays):
    coll = test_db["gate"]
    gate = tmp_path / "go"
    launch(tmp_path, f"gate={gate}", "x=1")
    (first,) = batch(coll, 1)
    array1 = str(first["slurm"][0]["array_id"])
    arrays.append(array1)
    wait_until("batch 1 runs", lambda: statuses(coll)[first["_id"]] == "RUNNING")

    launch(tmp_path, "gate=", "x=2", "hydra.launcher.after=1")
    (second,) = batch(coll, 2)
    array2 = str(second["slurm"][0]["array_id"])
    arrays.append(array2)
    assert second["slurm"][0]["sbatch_options"]["dependency"] == f"afterok:{array1}"
    wait_until(
        "batch 2 waits for its dependency",
        lambda: {r for _, r in squeue_tasks(array2).values()} == {"Dependency"},
    )
    queue = seml("queue")
    row = next(line for line in queue.splitlines() if array2 in line)
    assert f"Dependency (afterok:{array1}" in row and "(unfulfilled))" in row
    assert statuses(coll)[second["_id"]] == "PENDING"  # batch 1 still runs: batch 2 waits

    gate.touch()
    wait_until("both batches completed", lambda: set(statuses(coll).values()) == {"COMPLETED"})
    done = {d["batch_id"]: d for d in coll.find()}
    assert done[2]["start_time"] >= done[1]["stop_time"]
    assert done[2]["result"] == 20


def test_batch_2_after_a_failed_batch_1_is_reported(slurm, test_db, tmp_path, arrays):
    coll = test_db["gate"]
    gate = tmp_path / "go"
    launch(tmp_path, f"gate={gate}", "x=null")  # None * 10 fails once the gate opens
    (first,) = batch(coll, 1)
    arrays.append(str(first["slurm"][0]["array_id"]))
    wait_until("batch 1 runs", lambda: statuses(coll)[first["_id"]] == "RUNNING")
    launch(tmp_path, "gate=", "x=2", "hydra.launcher.after=1")
    (second,) = batch(coll, 2)
    array2 = str(second["slurm"][0]["array_id"])
    arrays.append(array2)

    gate.touch()
    wait_until("batch 1 failed", lambda: statuses(coll)[first["_id"]] == "FAILED")
    wait_until(
        "Slurm gives up batch 2's dependency",
        lambda: {r for _, r in squeue_tasks(array2).values()} == {"DependencyNeverSatisfied"},
    )
    status = " ".join(seml("gate", "status").split())
    assert f"Slurm will not start job {array2}" in status
    assert "(DependencyNeverSatisfied): its dependency can never be satisfied" in status
    row = next(line for line in seml("queue").splitlines() if array2 in line)
    assert "DependencyNeverSatisfied" in row and "(failed)" in row

    # a third batch after the failed one is refused before staging
    proc = launch(tmp_path, "gate=", "x=3", "hydra.launcher.after=1", ok=False)
    assert proc.returncode == 1
    assert "batch 1 of gate has FAILED experiments" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert batch(coll, 3) == [] and coll.count_documents({}) == 2


@pytest.mark.parametrize(
    "launcher, after, message",
    [
        ("seml", "5", "there is no batch 5 of gate"),
        ("seml", '"other:1"', "there is no batch 1 of other"),
        ("seml_local", "1", "hydra.launcher.after is a Slurm dependency"),
    ],
)
def test_an_impossible_dependency_is_refused_before_staging(
    test_db, tmp_path, launcher, after, message
):
    proc = run_app(
        GATE_APP,
        "-m",
        f"hydra/launcher={launcher}",
        f"hydra.launcher.after={after}",
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert test_db["gate"].count_documents({}) == 0
