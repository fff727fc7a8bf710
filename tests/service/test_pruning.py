"""Early stopping on Slurm arrays (``seml_hydra.report`` + ``hydra.launcher.pruner``), on the
testbed: bad learning curves are stopped and end COMPLETED with ``pruned`` and their last loss
as result, good ones run to the end; every rank of a multi-task experiment gets the same
answers; a bad pruner is refused before staging. App: ``tests/apps/curve_app.py`` (loss at
step s = x + 1/s, 9 steps)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, seml_ok

from seml_hydra.core.ranges import format_ids

FAST = ["hydra.launcher.poll_interval_s=0.3", "hydra.launcher.snapshot=false"]
ASHA = "hydra.launcher.pruner={rule: asha, metric: loss, mode: min, max_step: 9}"


def run_curves(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "tests/apps/curve_app.py"), "-m", *args, *FAST],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def by_x(collection) -> dict[float, dict]:
    return {d["config"]["x"]: d for d in collection.find()}


@pytest.mark.slurm
def test_asha_stops_bad_curves_completed_with_pruned_and_runs_good_ones_to_the_end(
    slurm, test_db, tmp_path
):
    # one task at a time (array_parallelism=1): experiment i reaches a rung after 1..i-1;
    # rung 0 is step 1 (loss x + 1), rung 1 step 3; fewer than 3 at a rung: the best goes on
    proc = run_curves(
        "hydra/launcher=seml",
        "hydra.launcher.collection=asha",
        "hydra.launcher.array_parallelism=1",
        ASHA,
        "x=1,5,6,0,7,8",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    docs = by_x(test_db["asha"])
    assert {x: d["status"] for x, d in docs.items()} == dict.fromkeys(docs, "COMPLETED")
    for x in (5, 6, 7, 8):  # worse than the best at rung 0
        assert docs[x]["pruned"] == {"step": 1, "value": x + 1.0, "rule": "asha"}
        assert docs[x]["result"] == x + 1.0  # the task's return value
        assert list(docs[x]["pruning"]["values"]) == ["1"]
    for x in (1, 0):  # the best at every rung so far: all 9 steps
        assert "pruned" not in docs[x]
        assert docs[x]["result"] == pytest.approx(x + 1 / 9)
        assert len(docs[x]["pruning"]["values"]) == 9
        assert set(docs[x]["pruning"]["rungs"]) == {"0", "1"}  # 9 = max_step: no rung
    # the metric is logged as log_scalar logs it
    metrics = test_db["seml_hydra_metrics.asha"].find_one({"run_id": docs[5]["_id"]})
    assert (metrics["name"], metrics["steps"], metrics["values"]) == ("loss", [1], [6.0])
    # the launcher's last line counts the stopped ones apart
    assert "pruned: 4" in proc.stdout + proc.stderr, proc.stdout
    # status and results count them apart too
    ids = sorted(docs[x]["_id"] for x in (5, 6, 7, 8))
    status = seml_ok("asha", "status")
    assert re.search(r"of which pruned\s*│\s*4\s*│\s*" + format_ids(ids), status), status
    rows = json.loads(seml_ok("asha", "results", "--format", "json"))
    assert {r["_id"]: r["pruned.step"] for r in rows} == {
        d["_id"]: (1 if x >= 5 else None) for x, d in docs.items()
    }


@pytest.mark.slurm
def test_every_rank_of_a_multi_task_experiment_gets_the_primarys_answers(slurm, test_db, tmp_path):
    proc = run_curves(
        "hydra/launcher=seml",
        "hydra.launcher.collection=ranks",
        "hydra.launcher.array_parallelism=1",
        "hydra.launcher.tasks_per_node=2",
        ASHA,
        "x=0,3",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    docs = by_x(test_db["ranks"])
    assert docs[3]["pruned"]["step"] == 1 and "pruned" not in docs[0]
    for doc in docs.values():
        out = Path(doc["hydra"]["output_dir"])
        rank0 = json.loads((out / "answers_rank0.json").read_text())
        rank1 = json.loads((out / "answers_rank1.json").read_text())
        assert rank0 == rank1
        assert rank0[-1] == ([1, True] if doc["config"]["x"] == 3 else [9, False])


def test_report_outside_a_job_logs_nothing_and_says_go_on():
    import seml_hydra

    assert seml_hydra.report("loss", 1.0, 1) is False


@pytest.mark.parametrize(
    ("pruner", "message"),
    [
        ("{rule: asha}", "hydra.launcher.pruner has no metric"),
        ("{rule: hyperband, metric: loss}", "rule='hyperband': unknown rule"),
    ],
)
def test_a_bad_pruner_is_refused_before_staging_in_one_line(test_db, tmp_path, pruner, message):
    proc = run_curves(
        "hydra/launcher=seml_local",
        "hydra.launcher.collection=bad",
        f"hydra.launcher.pruner={pruner}",
        "x=1,2",
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if message in line]
    assert len(lines) == 1, proc.stderr
    assert "bad" not in test_db.list_collection_names()


def test_a_metric_the_task_never_reports_is_named_once_in_the_job_log(test_db, tmp_path):
    """The pruner watches ``val_loss``; the app reports ``loss`` only: nothing is stopped, and
    each experiment's job log says why, once."""
    proc = run_curves(
        "hydra/launcher=seml_local",
        "hydra.launcher.collection=unreported",
        "hydra.launcher.pruner={rule: median, metric: val_loss, min_experiments: 1}",
        "x=1,2",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    docs = list(test_db["unreported"].find())
    assert [d["status"] for d in docs] == ["COMPLETED", "COMPLETED"]
    assert not any("pruned" in d for d in docs)
    said = (
        "hydra.launcher.pruner watches the metric 'val_loss', which the task never reported "
        "with seml_hydra.report (it reported 'loss'), so nothing was stopped early"
    )
    logs = {
        path: path.read_text()
        for path in tmp_path.rglob("*_log.*")
        if path.suffix in (".out", ".err")
    }
    counts = {
        exp_id: sum(text.count(f"Experiment {exp_id}: {said}") for text in logs.values())
        for exp_id in (d["_id"] for d in docs)
    }
    assert counts == {d["_id"]: 1 for d in docs}, logs


def test_a_reported_metric_is_not_named_as_unreported(test_db, tmp_path):
    proc = run_curves(
        "hydra/launcher=seml_local",
        "hydra.launcher.collection=reported",
        "hydra.launcher.pruner={rule: median, metric: loss}",
        "x=1",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    logs = "".join(p.read_text() for p in tmp_path.rglob("*_log.*"))
    assert "successful completion" in logs and "never reported" not in logs, logs


def test_reset_clears_what_early_stopping_recorded(test_db):
    # else the next run would compare with its old rungs and stop at its first report
    test_db["c"].insert_one(
        {
            "_id": 1,
            "batch_id": 1,
            "status": "COMPLETED",
            "config": {"x": 1},
            "result": 2.0,
            "pruned": {"step": 1, "value": 2.0, "rule": "asha"},
            "pruning": {"values": {"1": 2.0}, "rungs": {"0": 2.0}},
        }
    )
    seml_ok("c", "reset", "-s", "COMPLETED", "-y")
    assert not {"pruned", "pruning", "result"} & set(test_db["c"].find_one({"_id": 1}))
