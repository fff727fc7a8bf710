"""The job's start-up: Python's cyclic garbage collector is off from the
runner's call to the first task, which starts with it on and the start-up's objects frozen
(``seml_hydra.job.collector``), and the experiment completes as before (run through
``hydra/launcher=seml_local``: the same ``JobRunner`` as a Slurm job, in a process of its own);
the Sacred run starts without reading the document back (``seml_hydra.job.observed``)."""

from __future__ import annotations

import pymongo
from pymongo import monitoring
from support.modules import import_fresh, module_project
from support.mongo import MONGO_URL
from support.run import run_app

from seml_hydra.job.claim import fence
from seml_hydra.job.observed import run_observed


def test_the_task_starts_with_the_collector_on_and_the_start_up_frozen(test_db, tmp_path):
    proc = run_app(
        "../tests/apps/gc_app.py", "-m", "hydra/launcher=seml_local", "x=1", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = test_db["gc_app"].find_one({"config.x": 1})
    assert doc["status"] == "COMPLETED", doc.get("fail_trace")
    # collector on, start-up frozen, and the task's own cyclic garbage is collected
    assert doc["result"] == [True, True, True]


class Commands(monitoring.CommandListener):
    """``(command name, collection)`` of each command a client sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, object]] = []

    def started(self, event) -> None:
        self.sent.append((event.command_name, event.command.get(event.command_name)))

    def succeeded(self, event) -> None:
        pass

    def failed(self, event) -> None:
        pass


def test_the_sacred_run_starts_without_reading_the_document_and_keeps_it_whole(test_db):
    """Sacred's ``overwrite=<id>`` reads the whole document first; the run's observer
    overwrites it without that read (one round trip less before the task), and the document
    is the same valid Sacred run: the fields Sacred owns written, the others untouched."""
    coll = test_db["startup"]
    doc = {
        "_id": 1,
        "status": "RUNNING",
        "config": {"x": 1},
        "seed": 3,
        "seml": {"name": "startup"},
        "slurm": [{"array_id": 7, "task_id": 0}],
        "execution": {"restart": 0},
    }
    coll.insert_one(doc)
    commands = Commands()
    client = pymongo.MongoClient(MONGO_URL, event_listeners=[commands])
    seen = {}

    def task() -> int:
        seen["before"] = list(commands.sent)
        return 7

    try:
        result = run_observed(client[test_db.name], "startup", doc, task, fence=fence(doc))
    finally:
        client.close()
    assert result == 7
    on_the_document = [name for name, target in seen["before"] if target == "startup"]
    assert on_the_document == ["update"]  # the run's start; no find
    final = coll.find_one({"_id": 1})
    assert final["status"] == "COMPLETED" and final["result"] == 7
    assert final["config"] == {"x": 1} and final["slurm"] == doc["slurm"]
    assert final["start_time"] and final["stop_time"] and final["heartbeat"]
    assert final["host"]["hostname"] and final["experiment"]["name"] == "startup"
    assert final["format"] == "MongoObserver-0.7.0" and final["captured_out"] == ""


def test_a_later_snapshot_directory_imports_the_modules_compiled_before(
    test_db, tmp_path, monkeypatch
):
    """The first directory of a snapshot compiles its modules (Python writes their bytecode);
    when its last user leaves, that bytecode is kept in the node's cache
    (``seml_hydra.store.snapshot.bytecode``), and the next directory of the same sources - the next wave
    of tasks on this node - imports them without compiling."""
    from seml_hydra.store.snapshot import node as snapshots
    from seml_hydra.store.snapshot import sources

    runtime = tmp_path / "runtime"
    monkeypatch.setenv("SEML_HYDRA_RUNTIME_DIR", str(runtime))
    root = module_project(tmp_path / "proj")
    modules = [str(root / "pkg" / "__init__.py"), str(root / "pkg" / "mod.py")]
    files, _ = sources.select_sources(modules, [], root)
    snapshot = sources.upload_sources(test_db, "col", 1, files)
    with snapshots.materialized(test_db, snapshot, "semltest_1") as first:
        value, compiled = import_fresh(first, "pkg.mod")
        assert value.startswith("41 ") and str(first / "pkg" / "mod.py") in compiled
    assert len(list((runtime / "bytecode").glob("*.pyc"))) >= 2
    with snapshots.materialized(test_db, snapshot, "semltest_2") as second:
        assert second != first
        value, compiled = import_fresh(second, "pkg.mod")
        assert value == f"41 {second / 'pkg' / 'mod.py'}" and compiled == []
