"""The documents have every field Omniboard's server reads, checked with
Omniboard's own queries (vivekratnavel/omniboard, ``server/``) run with pymongo: the runs list
(``runs.response.js``, ``models/runs.js``), the metrics of a run (``models/metrics.js``, joined
on ``info.metrics`` ids) and the Source Files tab (``sourceFiles.response.js``)."""

from __future__ import annotations

from pathlib import Path

import gridfs
from bson import ObjectId
from conftest import ROOT, run_app, snapshot_files

from seml_hydra.job.observer import sacred_experiment_info
from seml_hydra.store.db.collections import metrics_collection_name

ZEN_APP = ROOT / "tests" / "apps" / "zen_app.py"

#: Omniboard's Source Files aggregation (sourceFiles.response.js, getSourceFilesResponse)
SOURCE_FILES_PIPELINE = [
    {"$project": {"_id": 1, "experiment": 1}},
    {"$unwind": {"path": "$experiment.sources", "preserveNullAndEmptyArrays": True}},
    {
        "$lookup": {
            "from": "fs.files",
            "let": {
                "source_file_id": {"$toObjectId": {"$arrayElemAt": ["$experiment.sources", 1]}}
            },
            "pipeline": [{"$match": {"$expr": {"$eq": ["$_id", "$$source_file_id"]}}}],
            "as": "files",
        }
    },
    {"$group": {"_id": "$_id", "files": {"$push": {"$arrayElemAt": ["$files", 0]}}}},
]


def test_sacred_experiment_info_names_the_script_and_the_snapshot():
    info = sacred_experiment_info(
        {"name": "app", "base_dir": "/site-packages/seml_hydra/job", "mainfile": None},
        {"executable": "/p/sub/app.py", "source_manifest": "m1"},
        [["sub/app.py", "id1"]],
    )
    assert info == {
        "name": "app",
        "base_dir": "/p/sub",
        "mainfile": "app.py",
        "sources": [["sub/app.py", "id1"]],
    }
    assert sacred_experiment_info({"mainfile": None}, {}) == {"mainfile": None, "sources": []}


def test_documents_have_every_field_omniboard_reads(slurm, test_db, tmp_path):
    run_app(
        ZEN_APP,
        "-m",
        "hydra/launcher=seml_local",
        "hydra.launcher.collection=board",
        f"hydra.sweep.dir={tmp_path}",
        "model.width=2,3",
        cwd=tmp_path,
        check=True,
    )
    runs = list(test_db["board"].find())
    assert len(runs) == 2
    for run in runs:
        # the runs list: RunsSchema's fields and what runs.response.js projects and computes
        assert isinstance(run["_id"], int)
        for field in ("heartbeat", "start_time", "stop_time", "status", "config", "host"):
            assert run.get(field) is not None, field
        assert run["status"] == "COMPLETED"
        assert isinstance(run["experiment"]["name"], str)
        assert run["result"] == {
            "width": run["config"]["model"]["width"],
            "built_by": "__main__",
        }
        assert isinstance(run["captured_out"], str)
        # as Sacred records a script's run
        assert run["experiment"]["mainfile"] == "zen_app.py"
        assert run["experiment"]["base_dir"] == str(ZEN_APP.parent)
        # Sacred's copies of the snapshot files of the modules loaded when the run started
        # (Sacred's own discovery: the app, not the whole project), which deleting the run
        # deletes (SEML's delete too), not the snapshot files the batch's other experiments run
        # from
        sources, snapshot = run["experiment"]["sources"], snapshot_files(test_db, run)
        assert "tests/apps/zen_app.py" in [name for name, _ in sources]
        assert len(sources) < len(snapshot) / 10
        assert not {i for _, i in sources} & {i for _, i in snapshot}
        fs = gridfs.GridFS(test_db)
        by_name = dict(snapshot)
        assert [fs.get(i).read() for _, i in sources] == [
            fs.get(by_name[name]).read() for name, _ in sources
        ]
        # the seed where Sacred keeps it (Omniboard's Config tab)
        assert run["config"]["seed"] == run["seed"]
        # metrics: info.metrics ids, documents {run_id, name, steps, values} in the
        # collection's own metrics collection
        (entry,) = run["info"]["metrics"]
        metric = test_db[metrics_collection_name("board")].find_one({"_id": ObjectId(entry["id"])})
        assert metric["run_id"] == run["_id"] and metric["name"] == entry["name"] == "width"
        assert metric["values"] == [run["config"]["model"]["width"]]
    files = {r["_id"]: r["files"] for r in test_db["board"].aggregate(SOURCE_FILES_PIPELINE)}
    for run in runs:
        names = sorted(f["filename"] for f in files[run["_id"]])
        assert names == sorted(rel for rel, _ in run["experiment"]["sources"])
        assert "tests/apps/zen_app.py" in names
    assert Path(ROOT / names[0]).exists()
    # deleting a run removes its Sacred copies, not the snapshot the other run still names
    from seml_hydra.manage.lifecycle import delete

    fs = gridfs.GridFS(test_db)
    delete(test_db["board"], {"_id": runs[0]["_id"]})
    assert all(fs.exists(i) for _, i in snapshot_files(test_db, runs[1]))
    delete(test_db["board"], {})
    assert test_db["fs.files"].count_documents({"metadata.kind": "sacred_source"}) == 0
    assert test_db["fs.files"].count_documents({"metadata.type": "source_file"}) == 0
    assert test_db["fs.files"].count_documents({"metadata.type": "source_manifest"}) == 0


def test_reset_and_delete_leave_a_metrics_view_alone(test_db):
    """The README's Omniboard recipe: a view named ``metrics`` over the collection's metrics.
    ``reset`` keeps the run's metrics as its attempt's and ``delete`` deletes them, in
    ``seml_hydra_metrics.<col>``, and neither writes to the view (a write to a view fails: the command used to end with MongoDB's
    error after doing its work)."""
    from typer.testing import CliRunner

    from seml_hydra.cli import app

    metrics = test_db[metrics_collection_name("c")]
    ids = [ObjectId(), ObjectId()]
    metrics.insert_many(
        [
            {"_id": m, "run_id": i, "name": "loss", "steps": [0], "values": [1.0]}
            for i, m in zip((1, 2), ids)
        ]
    )
    test_db.command("create", "metrics", viewOn=metrics.name, pipeline=[])
    test_db["c"].insert_many(
        [
            {"_id": i, "status": "FAILED", "batch_id": 1, "config": {}, "seml": {},
             "info": {"metrics": [{"id": str(m), "name": "loss"}]}}
            for i, m in zip((1, 2), ids)
        ]
    )  # fmt: skip
    for args in (["c", "reset", "-y", "-id", "1"], ["c", "delete", "-y", "-id", "2"]):
        result = CliRunner().invoke(app, args, prog_name="seml")
        assert result.exit_code == 0 and "Error" not in result.output, result.output
    assert test_db["c"].find_one({"_id": 1})["status"] == "STAGED"
    assert test_db["c"].find_one({"_id": 2}) is None
    # the reset run's metrics are kept as its attempt's, the deleted run's are gone
    assert [(m["attempt_of"], m["attempt"]) for m in metrics.find()] == [(1, 1)]
