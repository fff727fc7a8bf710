"""``delete`` of many experiments on the real MongoDB (no Slurm: the experiments are finished):
what it sends. The selection is read once (the aggregate of what the experiments left gives
their ids when they are consecutive), the documents go in parts sent at once for a large
selection, the metrics by id ranges, and a snapshot's files with a few commands, not a few per
file. The commands are watched with pymongo's command monitoring on a client of its own."""

from __future__ import annotations

import gridfs
import pymongo
import pytest
from bson import ObjectId
from pymongo import monitoring
from support.mongo import MONGO_URL, TEST_DB


class Commands(monitoring.CommandListener):
    """Every command sent, as ``(name, the command)``."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict]] = []

    def started(self, event) -> None:
        self.sent.append((event.command_name, dict(event.command)))

    def succeeded(self, event) -> None:
        pass

    def failed(self, event) -> None:
        pass

    def on(self, name: str, collection: str) -> list[dict]:
        """The commands ``name`` sent for ``collection``."""
        return [c for n, c in self.sent if n == name and c.get(name) == collection]


@pytest.fixture
def watched(test_db):
    """``(the database through a monitored client, its Commands)``."""
    commands = Commands()
    client = pymongo.MongoClient(MONGO_URL, event_listeners=[commands])
    yield client[TEST_DB], commands
    client.close()


def finished(ids, **extra) -> list[dict]:
    return [{"_id": i, "status": "COMPLETED", **extra} for i in ids]


def id_lists(query) -> list[list]:
    """Every ``$in`` list of a filter (walked through its ``$and``/``$or`` lists)."""
    found = []
    if isinstance(query, dict):
        for key, value in query.items():
            if key == "$in" and isinstance(value, list):
                found.append(value)
            found += id_lists(value)
    elif isinstance(query, list):
        for item in query:
            found += id_lists(item)
    return found


def test_delete_of_consecutive_ids_reads_no_id_and_a_gap_reads_them_from_the_index(watched):
    from seml_hydra.manage.lifecycle import delete

    db, commands = watched
    db["bulk"].insert_many(finished(range(1, 21)))
    result = delete(db["bulk"], {"_id": {"$gte": 3}}, cancel_first=False)
    assert result.ids == list(range(3, 21))
    # the aggregate of what they left counted them and gave their span: no find of their ids
    assert commands.on("find", "bulk") == [], commands.on("find", "bulk")
    assert sorted(db["bulk"].distinct("_id")) == [1, 2]
    db["bulk"].insert_many(finished([5, 9]))
    commands.sent.clear()
    assert delete(db["bulk"], {}, cancel_first=False).ids == [1, 2, 5, 9]
    assert len(commands.on("find", "bulk")) == 1  # not consecutive: the ids are read
    assert db["bulk"].count_documents({}) == 0


def test_a_large_delete_goes_in_parts_of_consecutive_ids_sent_at_once(watched, monkeypatch):
    from seml_hydra.manage import lifecycle

    db, commands = watched
    monkeypatch.setattr(lifecycle, "DELETE_PART_MIN", 5)
    db["bulk"].insert_many(finished(range(1, 24)))
    db["other"].insert_many(finished(range(1, 24)))
    assert lifecycle.delete(db["bulk"], {"_id": {"$lte": 22}}, cancel_first=False).ids == list(
        range(1, 23)
    )
    deletes = [s["q"] for c in commands.on("delete", "bulk") for s in c["deletes"]]
    assert len(deletes) == lifecycle.DELETE_PARTS == 4, deletes
    spans = sorted((q["_id"]["$gte"], q["_id"]["$lte"]) for q in deletes)
    assert spans == [(1, 5), (6, 11), (12, 16), (17, 22)]
    assert db["bulk"].distinct("_id") == [23]
    assert db["other"].count_documents({}) == 23


def test_delete_removes_every_deleted_experiment_s_metrics_by_id_ranges(watched):
    from seml_hydra.manage.lifecycle import delete
    from seml_hydra.store.db.collections import metrics_collection_name

    db, commands = watched
    own = metrics_collection_name("bulk")
    db["bulk"].insert_many(finished(range(1, 41)))  # none says it has metrics (info.metrics)
    db[own].insert_many(
        [{"run_id": i, "name": "loss"} for i in (1, 20, 40, 41)]
        + [{"attempt_of": i, "attempt": 1, "name": "loss"} for i in (2, 41)]
    )
    db["metrics"].insert_many(
        [
            {"attempt_of": 3, "collection": "bulk", "name": "loss"},
            {"attempt_of": 3, "collection": "elsewhere", "name": "loss"},
        ]
    )
    assert delete(db["bulk"], {"_id": {"$lte": 40}}, cancel_first=False).ids == list(range(1, 41))
    assert sorted(d.get("run_id", d.get("attempt_of")) for d in db[own].find()) == [41, 41]
    assert [d["collection"] for d in db["metrics"].find()] == ["elsewhere"]
    queries = [
        s["q"]
        for name in (own, "metrics")
        for c in commands.on("delete", name)
        for s in c["deletes"]
    ]
    assert queries and [ids for q in queries for ids in id_lists(q) if len(ids) > 2] == [], queries


def test_a_snapshot_s_files_are_deleted_with_a_few_commands_not_a_few_per_file(watched):
    from seml_hydra.manage.lifecycle import delete_orphan_sources
    from seml_hydra.store.snapshot import sources

    db, commands = watched
    fs = gridfs.GridFS(db)
    kept = fs.put(b"kept", metadata={"collection_name": "bulk", "type": "source_file"})
    files = [
        fs.put(b"x" * 10, metadata={"collection_name": "bulk", "type": "source_file"})
        for _ in range(30)
    ]
    leased = fs.put(
        b"leased",
        metadata={
            "collection_name": "bulk",
            "type": "source_file",
            "leases": [sources.new_lease()],
        },
    )
    db["bulk"].insert_one(
        {"_id": 1, "status": "COMPLETED", "seml": {"source_files": [["a", kept]]}}
    )
    commands.sent.clear()
    gone = delete_orphan_sources(db, "bulk")
    assert sorted(gone) == sorted(files)
    assert {f["_id"] for f in db["fs.files"].find()} == {kept, leased}
    assert db["fs.chunks"].count_documents({"files_id": {"$in": files}}) == 0
    assert db["fs.files"].count_documents({"metadata.deleting": {"$exists": True}}) == 0
    on_files = [n for n, c in commands.sent if c.get(n) in ("fs.files", "fs.chunks")]
    assert len(on_files) <= 12, on_files  # was 3 per file deleted


def test_files_a_document_still_names_are_unmarked_and_kept(test_db):
    from seml_hydra.store.snapshot import sources

    fs = gridfs.GridFS(test_db)
    used, unused = (
        fs.put(b"x", metadata={"collection_name": "bulk", "type": "source_file"}) for _ in range(2)
    )
    deleted = sources.delete_unused_files(
        test_db, {"metadata.collection_name": "bulk"}, lambda: [str(used)]
    )
    assert deleted == [unused]
    doc = test_db["fs.files"].find_one({"_id": used})
    assert doc is not None and "deleting" not in doc["metadata"]
    assert test_db["fs.chunks"].count_documents({"files_id": used}) == 1
    assert isinstance(used, ObjectId)
