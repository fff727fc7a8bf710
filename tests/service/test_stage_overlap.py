"""Staging overlaps a chunk's insert with the next chunk's work (``launch.stage.Stager``, a worker
thread inserts while the launcher composes and builds), on the real MongoDB, and keeps the rule
of a launch staged chunk by chunk: a point that fails in chunk n+1 while chunk n is still being
inserted stages nothing, and an insert that fails is reported by the next chunk (or ``finish``)
with nothing staged either. The insert is held in flight by a BSON type encoder that waits
(pymongo calls it while it encodes the chunk, in the worker thread)."""

from __future__ import annotations

import threading

import pymongo
import pytest
from bson.codec_options import CodecOptions, TypeEncoder, TypeRegistry
from bson.errors import InvalidDocument
from conftest import MONGO_URL
from pymongo import monitoring

from seml_hydra.launch.stage import Stager

COLLECTION = "overlap"


class Gate:
    """A value whose encoding waits (see :class:`GateEncoder`)."""


class GateEncoder(TypeEncoder):
    """Encodes a :class:`Gate` once ``released`` is set (or after ``patience_s``: the fixed
    Stager waits for the insert before it deletes, so no delete comes to release it)."""

    python_type = Gate

    def __init__(self, patience_s: float = 3.0) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()
        self.patience_s = patience_s

    def transform_python(self, value):
        self.entered.set()
        self.released.wait(self.patience_s)
        return "gate"


class ReleaseOnDelete(monitoring.CommandListener):
    """Releases the gate once a ``delete`` has been answered: a Stager that deleted the
    launch's documents while their insert was still under way would see them land after."""

    def __init__(self, gate: GateEncoder) -> None:
        self.gate = gate

    def started(self, event):
        pass

    def succeeded(self, event):
        if event.command_name == "delete":
            self.gate.released.set()

    def failed(self, event):
        pass


@pytest.fixture
def gated(db_url, test_db):
    """``(database whose encoding of a Gate waits, the GateEncoder)``, on the test database."""
    gate = GateEncoder()
    client = pymongo.MongoClient(MONGO_URL, event_listeners=[ReleaseOnDelete(gate)])
    options = CodecOptions(type_registry=TypeRegistry([gate]))
    try:
        yield client.get_database(test_db.name, codec_options=options), gate
    finally:
        client.close()


def document(gate_at: int | None = None):
    def make(offset: int, exp_id: int) -> dict:
        doc = {"_id": exp_id, "status": "STAGED", "config_hash": f"h{exp_id}"}
        if offset == gate_at:
            doc["held"] = Gate()
        return doc

    return make


def no_refresh(offset: int) -> dict:
    return {}


def test_a_failure_in_the_next_chunk_while_a_chunk_is_inserted_stages_nothing(gated, test_db):
    db, gate = gated
    stager = Stager(db, COLLECTION, batch_id=1, force=False)
    assert stager.add_chunk(["a", "b"], document(gate_at=1), no_refresh) == [1, 2]
    assert gate.entered.wait(30)  # chunk 1's insert is under way, held by its second document

    def bad_point(offset: int, exp_id: int) -> dict:
        raise ValueError("the point cannot be built")

    with pytest.raises(ValueError, match="cannot be built"):
        try:
            stager.add_chunk(["c", "d"], bad_point, no_refresh)
        except BaseException:  # what the launcher does (pipeline._Launch._stage_leased)
            stager.undo()
            raise
    assert test_db[COLLECTION].count_documents({}) == 0


def test_an_insert_that_fails_is_raised_by_the_next_chunk_and_stages_nothing(db_url, test_db):
    stager = Stager(test_db, COLLECTION, batch_id=1, force=False)

    def unencodable(offset: int, exp_id: int) -> dict:
        return {"_id": exp_id, "status": "STAGED", "config_hash": "x", "bad": object()}

    stager.add_chunk(["a", "b"], document(), no_refresh)
    stager.add_chunk(["c"], unencodable, no_refresh)  # inserted in the worker: fails there
    with pytest.raises(InvalidDocument):
        try:
            stager.add_chunk(["d"], document(), no_refresh)
        except BaseException:
            stager.undo()
            raise
    assert test_db[COLLECTION].count_documents({}) == 0
    assert stager.new_ids == []


def test_finish_waits_for_the_last_insert(gated, test_db):
    db, gate = gated
    stager = Stager(db, COLLECTION, batch_id=1, force=False)
    stager.add_chunk(["a"], document(), no_refresh)
    stager.add_chunk(["b", "c"], document(gate_at=0), no_refresh)
    assert gate.entered.wait(30)
    gate.released.set()
    result = stager.finish()
    assert result.new_ids == [1, 2, 3] and result.ids == [1, 2, 3]
    assert [d["_id"] for d in test_db[COLLECTION].find().sort("$natural", 1)] == [1, 2, 3]


@pytest.mark.parametrize("overlap", [True, False])
def test_an_insert_that_hits_another_launchs_id_leaves_that_experiment(db_url, test_db, overlap):
    # SEML 0.5's `seml add` numbers its experiments max(_id) + 1: between our reservation of ids
    # (the counter) and our insert, it may take one of them. Our insert is refused that id
    # (duplicate key), and only what we inserted is removed: SEML's STAGED experiment stays.
    from pymongo.errors import BulkWriteError

    from seml_hydra.store.db.collections import COUNTERS_COLLECTION

    test_db[COUNTERS_COLLECTION].insert_one({"_id": f"{COLLECTION}._id", "value": 0})
    theirs = {"_id": 2, "status": "STAGED", "config_hash": "theirs", "batch_id": 1}
    test_db[COLLECTION].insert_one(dict(theirs))
    stager = Stager(test_db, COLLECTION, batch_id=1, force=False, overlap=overlap)
    with pytest.raises(BulkWriteError):
        try:
            stager.add_chunk(["a", "b", "c"], document(), no_refresh)
            stager.finish()
        except BaseException:
            stager.undo()
            raise
    assert list(test_db[COLLECTION].find()) == [theirs]
