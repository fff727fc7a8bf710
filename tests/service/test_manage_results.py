"""seml_hydra.store.results.get_results on the real MongoDB."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import warnings
from datetime import datetime

import pytest
from support.mongo import snapshot_files
from support.paths import ROOT

from seml_hydra.store.results import StoredObjectWarning, get_results


@pytest.fixture
def filled(test_db):
    test_db["r"].insert_many(
        [
            {"_id": 2, "batch_id": 1, "status": "COMPLETED", "config": {"lr": 0.1}, "result": 0.8},
            {"_id": 1, "batch_id": 1, "status": "COMPLETED", "config": {"lr": 0.2}, "result": 0.7},
            {"_id": 3, "batch_id": 2, "status": "FAILED", "config": {"lr": 0.3}},
            # Sacred's serializer stores tuples like this; get_results restores them
            {
                "_id": 4,
                "batch_id": 2,
                "status": "COMPLETED",
                "config": {"lr": 0.4},
                "result": {"py/tuple": [1, 2]},
            },
        ]
    )
    return test_db


def test_get_results_returns_completed_experiments_sorted_with_restored_results(filled):
    rows = get_results("r", db=filled)
    assert [r["_id"] for r in rows] == [1, 2, 4]
    assert rows[0] == {
        "_id": 1,
        "batch_id": 1,
        "status": "COMPLETED",
        "config": {"lr": 0.2},
        "result": 0.7,
    }
    assert rows[2]["result"] == (1, 2)


def test_get_results_takes_a_filter_and_fields(filled):
    rows = get_results("r", filter={"batch_id": 2}, fields=["config.lr", "status"], db=filled)
    assert rows == [
        {"config": {"lr": 0.3}, "status": "FAILED"},
        {"config": {"lr": 0.4}, "status": "COMPLETED"},
    ]


def test_get_results_resolves_the_database_like_the_cli(filled):
    assert [r["_id"] for r in get_results("r", filter={})] == [1, 2, 3, 4]


def test_get_results_data_frame_or_a_clear_import_error(filled):
    if importlib.util.find_spec("pandas") is None:
        with pytest.raises(ImportError, match="pip install 'seml-hydra\\[pandas\\]'"):
            get_results("r", to_data_frame=True, db=filled)
        return
    df = get_results("r", fields=["config.lr", "result"], to_data_frame=True, db=filled)
    assert list(df.columns) == ["config.lr", "result"]  # only the fields asked for
    assert df["config.lr"].tolist() == [0.2, 0.1, 0.4]


# ------------------------------------------------------------ reading results runs no code


def forged_results(marker) -> dict:
    """Stored results that Sacred's serializer (jsonpickle) would turn into code execution:
    each creates a file next to ``marker`` when decoded by ``sacred.serializer.restore``."""
    return {
        # py/reduce of a py/function: os.system("touch ...")
        "reduce": {"py/reduce": [{"py/function": "os.system"}, {"py/tuple": [f"touch {marker}"]}]},
        # py/reduce of a py/type: subprocess.Popen(["touch", ...])
        "popen": {
            "py/reduce": [{"py/type": "subprocess.Popen"}, {"py/tuple": [["touch", f"{marker}2"]]}]
        },
        # a function object, nested in plain data
        "nested": [1, {"fn": {"py/function": "os.system"}}],
    }


def test_get_results_restores_forged_objects_as_plain_dicts_and_runs_no_code(test_db, tmp_path):
    marker = tmp_path / "MARKER"
    forged = forged_results(marker)
    test_db["forged"].insert_many(
        [
            {"_id": 1, "status": "COMPLETED", "result": forged},
            {"_id": 2, "status": "COMPLETED", "result": {"acc": 0.5, "t": {"py/tuple": [1, 2]}}},
        ]
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = get_results("forged", fields=["_id", "result"], db=test_db)
    assert not marker.exists() and not (tmp_path / "MARKER2").exists()
    assert rows[0]["result"] == forged  # as stored, plain dicts
    assert rows[1]["result"] == {"acc": 0.5, "t": (1, 2)}  # plain data still restored
    # one warning per read, naming the experiment and each key
    (warning,) = [w for w in caught if issubclass(w.category, StoredObjectWarning)]
    text = str(warning.message)
    assert "'forged'" in text
    assert "experiment 1: result.reduce: py/reduce" in text
    assert "experiment 1: result.popen: py/reduce" in text
    assert "experiment 1: result.nested[1].fn: py/function" in text
    assert "experiment 2" not in text


def test_launcher_job_return_restores_forged_objects_as_plain_dicts_and_runs_no_code(tmp_path):
    from seml_hydra.launch.wait import job_return_from_document

    marker = tmp_path / "MARKER"
    forged = forged_results(marker)
    doc = {"_id": 7, "status": "COMPLETED", "config": {}, "hydra": {}, "result": forged}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ret = job_return_from_document(doc, {"job": {}})
    assert not marker.exists() and not (tmp_path / "MARKER2").exists()
    assert ret.return_value == forged
    (warning,) = [w for w in caught if issubclass(w.category, StoredObjectWarning)]
    assert "experiment 7: result.reduce: py/reduce" in str(warning.message)
    plain = {**doc, "result": {"a": [1, {"py/tuple": [2, 3]}]}}
    assert job_return_from_document(plain, {"job": {}}).return_value == {"a": [1, (2, 3)]}


def run_data_app(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests/apps/data_app.py"),
            "-m",
            "hydra/launcher=seml_local",
            "hydra.launcher.poll_interval_s=0.3",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
            *args,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_forged_stored_result_returned_by_a_later_launch_runs_no_code(test_db, tmp_path):
    """A launch of a sweep point already COMPLETED returns its stored result through the
    launcher's JobReturn path: a forged ``py/reduce`` there runs nothing in the launcher."""
    first = run_data_app(tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    marker = tmp_path / "MARKER"
    test_db["data_app"].update_one({"_id": 1}, {"$set": {"result": forged_results(marker)}})
    again = run_data_app(tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert not marker.exists() and not (tmp_path / "MARKER2").exists()
    assert "experiment 1: result.reduce: py/reduce" in again.stderr


# ------------------------------------------------------------------ results are stored as data


def test_numpy_and_other_values_are_stored_as_queryable_data_by_a_real_launch(test_db, tmp_path):
    proc = run_data_app(tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = test_db["data_app"]
    (doc,) = list(runs.find())
    assert doc["status"] == "COMPLETED"
    assert runs.count_documents({"result.acc": {"$gt": 0.9}}) == 1
    assert runs.count_documents({"result.n": 3}) == 1
    assert runs.count_documents({"result.flag": True}) == 1
    assert runs.count_documents({"result.arr": [0, 1, 2]}) == 1
    assert runs.count_documents({"result.when": datetime(2026, 1, 2, 3, 4, 5)}) == 1  # BSON date
    assert runs.count_documents({"result.path": "/data/run"}) == 1
    assert runs.count_documents({"result.pair": [1, 0.5]}) == 1
    assert runs.count_documents({"result.color": "red"}) == 1
    assert runs.count_documents({"result.nested.m": [[1.0, 0.0], [0.0, 1.0]]}) == 1
    assert runs.count_documents({"result.nested.k": [1]}) == 1
    assert "py/" not in repr(doc["result"])
    # numpy values logged as metrics are stored as numbers too
    (score,) = list(test_db["seml_hydra_metrics.data_app"].find())
    assert score["steps"] == [0, 1] and score["values"] == [7, 0.5]
    # and read back as the same plain data, without a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", StoredObjectWarning)
        (row,) = get_results("data_app", db=test_db)
    assert row["result"] == doc["result"]


# ------------------------------------------------------------------ metrics per collection


def run_metrics_app(tmp_path, collection: str, lrs: str) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests/seml_fixtures/metrics_app.py"),
            "-m",
            "hydra/launcher=seml_local",
            "hydra.launcher.poll_interval_s=0.3",
            f"hydra.launcher.collection={collection}",
            f"hydra.sweep.dir={tmp_path / collection}",
            f"lr={lrs}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def losses(lr: float) -> list:
    return pytest.approx([lr / (step + 1) for step in range(3)])


def test_each_collection_keeps_its_own_metrics_and_delete_and_drop_remove_them(test_db, tmp_path):
    from seml_hydra.manage.inspection import list_collections
    from seml_hydra.manage.lifecycle import delete, drop
    from seml_hydra.store.results import get_metrics

    run_metrics_app(tmp_path, "ma", "0.1,0.2")  # runs 1 and 2
    run_metrics_app(tmp_path, "mb", "0.5")  # run 1 too
    assert test_db["metrics"].count_documents({}) == 0  # nothing in the shared collection
    own_a, own_b = test_db["seml_hydra_metrics.ma"], test_db["seml_hydra_metrics.mb"]
    assert sorted(m["run_id"] for m in own_a.find()) == [1, 2]
    ((metric_b),) = list(own_b.find())
    assert metric_b["run_id"] == 1 and metric_b["values"] == losses(0.5)
    info_b = test_db["mb"].find_one({"_id": 1})["info"]["metrics"]
    assert info_b == [{"name": "loss", "id": str(metric_b["_id"])}]

    by_lr = {d["_id"]: d["config"]["lr"] for d in test_db["ma"].find()}
    metrics_a = get_metrics("ma", db=test_db)
    assert {i: m["loss"]["values"] for i, m in metrics_a.items()} == {
        i: losses(lr) for i, lr in by_lr.items()
    }
    assert metrics_a[1]["loss"]["steps"] == [0, 1, 2]
    (row,) = get_results("mb", fields=["config.lr"], metrics=True, db=test_db)
    assert row["config"] == {"lr": 0.5} and row["metrics"]["loss"]["values"] == losses(0.5)
    assert "_id" not in row
    assert [c.name for c in list_collections(test_db)] == ["ma", "mb"]

    delete(test_db["ma"], {"_id": 1}, cancel_first=False)
    assert [m["run_id"] for m in own_a.find()] == [2]  # only run 1's metrics went
    assert own_b.count_documents({}) == 1  # the other collection's run 1 keeps its metrics

    drop(test_db, ["mb"])
    assert "seml_hydra_metrics.mb" not in test_db.list_collection_names()
    assert [m["run_id"] for m in own_a.find()] == [2]


def test_metrics_in_the_shared_collection_stay_readable_by_their_info_ids(test_db):
    """Runs from before per-collection metrics (and SEML's) wrote to ``metrics``; they are read
    by the ids in ``info.metrics``, never by the ambiguous ``run_id``."""
    from bson import ObjectId

    from seml_hydra.manage.lifecycle import delete
    from seml_hydra.store.results import get_metrics

    mine, other = ObjectId(), ObjectId()
    test_db["metrics"].insert_many(
        [
            {"_id": mine, "run_id": 1, "name": "loss", "steps": [0], "values": [0.3]},
            {"_id": other, "run_id": 1, "name": "loss", "steps": [0], "values": [9.0]},
        ]
    )
    test_db["old"].insert_one(
        {"_id": 1, "status": "COMPLETED", "info": {"metrics": [{"name": "loss", "id": str(mine)}]}}
    )
    loss = get_metrics("old", db=test_db)[1]["loss"]
    assert loss == {"steps": [0], "values": [0.3], "timestamps": []}
    delete(test_db["old"], {}, cancel_first=False)
    assert [m["_id"] for m in test_db["metrics"].find()] == [other]


def run_flaky_app(tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests/apps/flaky_metrics_app.py"),
            "-m",
            "hydra/launcher=seml_local",
            "hydra.launcher.poll_interval_s=0.3",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
            f"+marker={tmp_path / 'failed_once'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


ONLY_SECOND_ATTEMPT = {"loss": {"steps": [0, 1, 2], "values": [1.0, 1.0, 1.0]}}


def _loss(metrics: dict) -> dict:
    return {k: {"steps": v["steps"], "values": v["values"]} for k, v in metrics.items()}


def test_a_relaunch_of_a_failed_point_keeps_only_the_new_attempts_metrics(test_db, tmp_path):
    from seml_hydra.store.results import get_metrics

    assert run_flaky_app(tmp_path).returncode != 0
    assert test_db["flaky_metrics_app"].find_one({"_id": 1})["status"] == "FAILED"
    assert _loss(get_metrics("flaky_metrics_app", db=test_db)[1])["loss"]["values"] == [100.0] * 2
    second = run_flaky_app(tmp_path)  # the launcher resets the FAILED point and runs it again
    assert second.returncode == 0, second.stderr[-3000:]
    assert _loss(get_metrics("flaky_metrics_app", db=test_db)[1]) == ONLY_SECOND_ATTEMPT


def test_a_relaunched_point_joins_the_batch_whose_source_files_it_names(test_db, tmp_path):
    """SEML 0.5.7's delete removes a batch's files (``metadata.batch_id``) with its last
    document: a re-run naming the new launch's files must belong to that batch."""
    run_flaky_app(tmp_path)
    assert run_flaky_app(tmp_path).returncode == 0
    rerun = test_db["flaky_metrics_app"].find_one({"_id": 1})
    assert rerun["status"] == "COMPLETED" and rerun["batch_id"] == 2
    file_ids = [file_id for _, file_id in snapshot_files(test_db, rerun)]
    assert file_ids
    for f in test_db["fs.files"].find({"_id": {"$in": file_ids}}):
        assert f["metadata"]["batch_id"] == 2


def test_reset_and_start_keep_only_the_new_attempts_metrics(test_db, tmp_path):
    from support.wait import wait_until
    from typer.testing import CliRunner

    from seml_hydra.cli import app
    from seml_hydra.store.results import get_metrics

    assert run_flaky_app(tmp_path).returncode != 0
    coll = test_db["flaky_metrics_app"]
    runner = CliRunner()
    for args in (["reset", "-y"], ["start"]):
        result = runner.invoke(app, ["flaky_metrics_app", *args], prog_name="seml")
        assert result.exit_code == 0, result.output
    wait_until("the re-run completes", lambda: coll.find_one({"_id": 1})["status"] == "COMPLETED")
    assert _loss(get_metrics("flaky_metrics_app", db=test_db)[1]) == ONLY_SECOND_ATTEMPT


def test_reading_a_collection_that_does_not_exist_is_an_error_not_an_empty_result(filled):
    """A misspelt name (here ``rr`` for ``r``) must not read as a collection without results."""
    from seml_hydra import CollectionNotFound, get_metrics, get_results
    from seml_hydra.manage.selection import get_collection

    message = f"There is no collection 'rr' in database {filled.name!r}. `seml list` shows"
    # the `seml <collection>` commands say it the same way, with the same error
    with pytest.raises(CollectionNotFound, match=message):
        get_collection(filled, "rr")
    for read in (get_results, get_metrics):
        with pytest.raises(CollectionNotFound, match=message) as error:
            read("rr")  # the database resolved like the CLI's
        assert error.value.collection == "rr" and "\n" not in str(error.value)
        with pytest.raises(CollectionNotFound):
            read("rr", db=filled)
    assert "rr" not in filled.list_collection_names()  # reading created nothing
    filled.create_collection("empty")  # one that exists but holds nothing: empty, no error
    assert get_results("empty", db=filled) == [] and get_metrics("empty", db=filled) == {}
