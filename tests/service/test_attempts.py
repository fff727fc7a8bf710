"""The attempt history on the real MongoDB (and a failed run reset and started again on the
Slurm testbed): ``reset``, a new launch of the same config and a requeue keep the earlier run
in ``attempts`` with its metrics apart; ``get_metrics(attempt=...)`` and ``print-attempts``
read them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from support.paths import ROOT
from support.run import run_python
from support.wait import wait_until
from typer.testing import CliRunner

from seml_hydra.cli import app
from seml_hydra.core import states
from seml_hydra.job.claim import claim
from seml_hydra.store.db.collections import metrics_collection_name
from seml_hydra.store.results import get_metrics

runner = CliRunner()
T0 = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)
TRACE = [f"  line {i}\n" for i in range(30)] + ["RuntimeError: the first run fails\n"]


def seml(*args: str, columns: int = 250):
    return runner.invoke(app, list(args), prog_name="seml", env={"COLUMNS": str(columns)})


def ran(exp_id: int, status: str = "FAILED", array_id: int = 17, **extra) -> dict:
    """A document as a run on Slurm leaves it (Sacred's fields and ours)."""
    return {
        "_id": exp_id,
        "batch_id": 1,
        "status": status,
        "config": {"x": exp_id},
        "slurm": [{"array_id": array_id, "task_id": exp_id, "sbatch_options": {"mem": "1G"}}],
        "execution": {
            "cluster": "semltest",
            "array_id": array_id,
            "task_id": exp_id,
            "restart": 0,
            "slurm_output_file": f"/sweep/.submitit/{array_id}_{exp_id}_0_log.out",
        },
        "host": {"hostname": "node2", "os": ["Linux"]},
        "start_time": T0,
        "stop_time": T0 + timedelta(minutes=5),
        "heartbeat": T0 + timedelta(minutes=5),
        "fail_trace": TRACE,
        "captured_out": "epoch 1\n",
        **extra,
    }


def log_metric(db, collection: str, run_id: int, values: list[float]) -> None:
    """What Sacred's MongoObserver.log_metrics writes: an upsert by ``run_id`` and name."""
    db[metrics_collection_name(collection)].update_one(
        {"run_id": run_id, "name": "loss"},
        {"$push": {"steps": {"$each": list(range(len(values)))}, "values": {"$each": values}}},
        upsert=True,
    )


def loss(metrics: dict, exp_id: int = 1) -> list[float]:
    return metrics[exp_id]["loss"]["values"]


def test_reset_moves_the_run_into_attempts_and_keeps_its_metrics_apart(test_db):
    coll = test_db["c"]
    coll.insert_many([ran(1), {"_id": 2, "batch_id": 1, "status": "STAGED", "config": {}}])
    log_metric(test_db, "c", 1, [100.0, 90.0])
    result = seml("c", "reset", "-s", "FAILED", "-s", "STAGED")
    assert result.exit_code == 0, result.output
    assert "Reset 2 experiment(s) to STAGED: 1-2" in result.output
    assert "Moved 1 attempt(s) into the history (see print-attempts): 1" in result.output
    doc = coll.find_one({"_id": 1})
    assert doc["status"] == "STAGED" and "fail_trace" not in doc and "execution" not in doc
    (entry,) = doc["attempts"]
    assert isinstance(entry.pop("moved_time"), datetime)
    assert entry == {
        "attempt": 1,
        "status": "FAILED",
        "start_time": T0.replace(tzinfo=None),
        "stop_time": (T0 + timedelta(minutes=5)).replace(tzinfo=None),
        "heartbeat": (T0 + timedelta(minutes=5)).replace(tzinfo=None),
        "host": "node2",
        "cluster": "semltest",
        "array_id": 17,
        "task_id": 1,
        "restart": 0,
        "output_file": "/sweep/.submitit/17_1_0_log.out",
        "fail_trace_tail": TRACE[-20:],
        "moved_by": "reset",
    }
    assert "attempts" not in coll.find_one({"_id": 2})  # it never ran: nothing to keep

    # the next run logs the same metric: Sacred's upsert starts a new document
    log_metric(test_db, "c", 1, [1.0])
    assert loss(get_metrics("c", db=test_db)) == [1.0]
    assert loss(get_metrics("c", db=test_db, attempt=1)) == [100.0, 90.0]
    assert loss(get_metrics("c", db=test_db, attempt=-2)) == [100.0, 90.0]
    assert loss(get_metrics("c", db=test_db, attempt=2)) == [1.0]
    # no third run (yet) of any experiment read: said, not an empty answer
    message = "attempt=3: no experiment read of collection 'c' has it; they have attempts 1 to 2"
    with pytest.raises(LookupError, match=message):
        get_metrics("c", db=test_db, attempt=3)
    assert get_metrics("c", ids=[2], db=test_db, attempt=-1) == {}  # it has one: no metrics
    with pytest.raises(LookupError, match="they have attempt 1 "):
        get_metrics("c", ids=[2], db=test_db, attempt=2)
    with pytest.raises(ValueError, match="give an attempt number"):
        get_metrics("c", db=test_db, attempt=0)

    # delete takes the earlier attempts' metrics too
    assert seml("c", "delete", "-id", "1", "-y").exit_code == 0
    assert test_db[metrics_collection_name("c")].count_documents({}) == 0


def test_semls_metrics_in_the_shared_collection_are_kept_by_attempt_and_dropped(test_db):
    """A run SEML made lists its metrics in ``info.metrics``, in the shared ``metrics``
    collection (whose ``run_id`` other collections share)."""
    from bson import ObjectId

    shared = test_db["metrics"]
    mine, other = ObjectId(), ObjectId()
    shared.insert_many(
        [
            {"_id": mine, "run_id": 1, "name": "loss", "steps": [0], "values": [5.0]},
            {"_id": other, "run_id": 1, "name": "loss", "steps": [0], "values": [7.0]},
        ]
    )
    test_db["c"].insert_one(ran(1, info={"metrics": [{"name": "loss", "id": str(mine)}]}))
    assert seml("c", "reset", "-y").exit_code == 0
    assert shared.find_one({"_id": mine}, {"_id": 0, "steps": 0, "values": 0}) == {
        "name": "loss",
        "attempt_of": 1,
        "attempt": 1,
        "collection": "c",
    }
    assert shared.find_one({"_id": other})["run_id"] == 1  # another collection's run 1
    assert loss(get_metrics("c", db=test_db, attempt=1)) == [5.0]
    assert get_metrics("c", db=test_db) == {}
    assert seml("drop", "c", "-y").exit_code == 0
    assert [m["_id"] for m in shared.find()] == [other]


def test_a_killed_runs_entry_keeps_how_its_job_ended(test_db):
    killed = ["Slurm: job 17_1 ended TIMEOUT\n", "Last lines of out.log:\n", "epoch 9\n"]
    test_db["c"].insert_one(ran(1, status="KILLED", fail_trace=killed))
    assert seml("c", "reset", "-y").exit_code == 0
    (entry,) = test_db["c"].find_one({"_id": 1})["attempts"]
    assert entry["reason"] == killed[0] and entry["fail_trace_tail"] == killed
    shown = seml("c", "print-attempts")
    assert "Slurm: job 17_1 ended TIMEOUT" in shown.output, shown.output


def test_the_history_keeps_the_last_20_attempts_and_drops_the_older_ones_metrics(test_db):
    coll = test_db["c"]
    coll.insert_one(ran(1))
    for run in range(1, 23):  # 22 runs, each failing after logging its number
        log_metric(test_db, "c", 1, [float(run)])
        assert seml("c", "reset", "-y").exit_code == 0
        coll.update_one({"_id": 1}, {"$set": {"status": "FAILED", "start_time": T0}})
    doc = coll.find_one({"_id": 1})
    assert [e["attempt"] for e in doc["attempts"]] == list(range(3, 23))
    assert get_metrics("c", db=test_db, attempt=2) == {}  # fell out of the history
    assert loss(get_metrics("c", db=test_db, attempt=3)) == [3.0]
    assert loss(get_metrics("c", db=test_db, attempt=-2)) == [22.0]
    assert test_db[metrics_collection_name("c")].count_documents({}) == 20


def test_print_attempts_shows_each_run_then_the_current_one(test_db):
    coll = test_db["c"]
    coll.insert_one(ran(1))
    assert seml("c", "reset", "-y").exit_code == 0
    coll.update_one(
        {"_id": 1},
        {"$set": {"status": "RUNNING", "start_time": T0 + timedelta(hours=1)}},
    )
    coll.update_one({"_id": 1}, {"$set": {"execution": {"array_id": 18, "task_id": 0}}})
    result = seml("c", "print-attempts", "-id", "1")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    (first,) = [line for line in lines if " FAILED " in line and ": " not in line]
    # the stop time of a run that stopped the day it started: its time of day
    for cell in ("1", "2026-12-01 10:00:00", " 10:05:00 ", "node2", "17_1", "reset"):
        assert cell in first, result.output
    assert "RuntimeError: the first run fails" in result.output
    assert "/sweep/.submitit/17_1_0_log.out" in result.output
    (now,) = [line for line in lines if "RUNNING" in line]
    assert "(now)" in now and "18_0" in now and "2026-12-01 11:00:00" in now
    assert seml("c", "print-attempts", "-id", "9").exit_code == 1


def test_a_requeue_keeps_the_earlier_run_and_a_second_rank_adds_nothing(test_db):
    coll = test_db["c"]
    execution = {"cluster": "semltest", "array_id": 17, "task_id": 1}
    coll.insert_one(ran(1, status=states.RESCHEDULED, fail_trace=None))
    doc, why = claim(coll, 1, {**execution, "restart": 1})
    assert why is None and doc["status"] == states.RUNNING
    (entry,) = doc["attempts"]
    assert entry["status"] == states.RESCHEDULED and entry["moved_by"] == "requeue"
    assert (
        entry["restart"] == 0
        and entry["host"] == "node2"
        and entry["start_time"] == T0.replace(tzinfo=None)
    )
    assert doc["execution"]["restart"] == 1
    doc, _ = claim(coll, 1, {**execution, "restart": 1}, record_execution=False)  # rank 1
    assert len(doc["attempts"]) == 1
    # a PENDING experiment's first claim is its first run: nothing to keep
    coll.insert_one({"_id": 2, "status": states.PENDING, "config": {}})
    doc, _ = claim(coll, 2, {**execution, "task_id": 2})
    assert doc["status"] == states.RUNNING and "attempts" not in doc


def flaky(tmp_path: Path, launcher: str, *extra: str):
    return run_python(
        str(ROOT / "tests/apps/flaky_metrics_app.py"),
        "-m",
        f"hydra/launcher={launcher}",
        "hydra.launcher.poll_interval_s=0.3",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"+marker={tmp_path / 'failed_once'}",
        *extra,
        cwd=tmp_path,
        timeout=300,
    )


@pytest.mark.slurm
def test_a_failed_run_reset_and_started_again_on_slurm_stays_readable(slurm, test_db, tmp_path):
    first = flaky(tmp_path, "seml")
    assert first.returncode != 0
    coll = test_db["flaky_metrics_app"]
    failed = coll.find_one({"_id": 1})
    assert failed["status"] == "FAILED"
    reset = seml("flaky_metrics_app", "reset", "-y")
    assert "Moved 1 attempt(s) into the history" in reset.output, reset.output
    started = seml("flaky_metrics_app", "start")
    assert started.exit_code == 0, started.output
    done = wait_until(
        "the re-run ends",
        lambda: coll.find_one({"_id": 1, "status": {"$in": ["COMPLETED", "FAILED", "KILLED"]}}),
        timeout=240,
    )
    assert done["status"] == "COMPLETED", done.get("fail_trace")
    (entry,) = done["attempts"]
    assert entry["status"] == "FAILED" and entry["attempt"] == 1
    assert entry["fail_trace_tail"][-1].strip() == "RuntimeError: first attempt fails"
    assert entry["start_time"] == failed["start_time"] and entry["stop_time"] == failed["stop_time"]
    assert entry["host"] == failed["host"]["hostname"]
    earlier = failed["execution"]
    assert (entry["array_id"], entry["task_id"]) == (earlier["array_id"], earlier["task_id"])
    assert done["execution"]["array_id"] != entry["array_id"]  # the new run's job is another
    assert Path(entry["output_file"]).is_file()
    assert loss(get_metrics("flaky_metrics_app", db=test_db)) == [1.0, 1.0, 1.0]
    assert loss(get_metrics("flaky_metrics_app", db=test_db, attempt=1)) == [100.0, 100.0]
    shown = seml("flaky_metrics_app", "print-attempts", "-id", "1")
    assert shown.exit_code == 0, shown.output
    assert "RuntimeError: first attempt fails" in shown.output, shown.output
    assert f"{earlier['array_id']}_{earlier['task_id']}" in shown.output
    assert "COMPLETED (now)" in shown.output


def test_a_new_launch_of_a_failed_point_keeps_the_failed_run(test_db, tmp_path):
    assert flaky(tmp_path, "seml_local").returncode != 0
    second = flaky(tmp_path, "seml_local")  # the launcher resets the FAILED point, runs it
    assert second.returncode == 0, second.stderr[-3000:]
    done = test_db["flaky_metrics_app"].find_one({"_id": 1})
    (entry,) = done["attempts"]
    assert entry["status"] == "FAILED" and entry["moved_by"] == "launch"
    assert "RuntimeError: first attempt fails" in entry["fail_trace_tail"][-1]
    assert loss(get_metrics("flaky_metrics_app", db=test_db)) == [1.0, 1.0, 1.0]
    assert loss(get_metrics("flaky_metrics_app", db=test_db, attempt=-2)) == [100.0, 100.0]


def test_print_attempts_fits_an_80_column_terminal(test_db):
    """A long host name, a requeued job and a long fail-trace line: the table folds its long
    cells and the reason is wrapped under it; only an output path (copied whole) may be
    longer."""
    long = (
        "RuntimeError: the data loader could not open "
        "/data/a/very/long/path/shard-000123-of-004096.tfrecord after 3 retries"
    )
    coll = test_db["c"]
    coll.insert_one(
        ran(1, fail_trace=["Traceback (most recent call last):\n", long + "\n"])
        | {"host": {"hostname": "node2.cluster.example.org"}}
    )
    coll.update_one({"_id": 1}, {"$set": {"execution.array_id": 1234567, "execution.restart": 2}})
    assert seml("c", "reset", "-y").exit_code == 0
    coll.update_one({"_id": 1}, {"$set": {"status": "RUNNING", "start_time": T0}})
    result = seml("c", "print-attempts", "-id", "1", columns=80)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    too_long = [line for line in lines if len(line) > 80 and " output: " not in line]
    assert too_long == [], result.output
    # nothing cut off: the row's cells, and the reason read back whole from its lines
    assert "2026-12-01 10:00:00" in result.output and "RUNNING (now)" in result.output
    text = " ".join(line.strip() for line in lines)
    assert "#1 FAILED: " + long in text, result.output
    assert "  #1 output: /sweep/.submitit/17_1_0_log.out" in lines
