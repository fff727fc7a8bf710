"""The batch payload's life in GridFS (``seml_hydra.store.payload``), on the real MongoDB:
pickled, put with its base Hydra node, loaded once per process, the base node of a document,
deleted, and removed once no experiment names it."""

from __future__ import annotations

import threading

import pytest

from seml_hydra.core.errors import UserError
from seml_hydra.store import payload as payloads
from seml_hydra.store.payload import (
    Payload,
    UnpicklableTaskError,
    delete_orphan_payloads,
    delete_payload,
    hydra_base,
    hydra_base_for,
    load_payload,
    payload_ids,
    pickled_payload,
    put_payload,
    restricted_to,
)
from seml_hydra.store.snapshot.sources import new_lease, release_lease


def task(cfg):
    return cfg


def put(db, collection: str = "exps", base: dict | None = None) -> str:
    """A payload of :func:`task` put for ``collection``, its lease released (as once the
    launch stored its documents)."""
    blob = pickled_payload(task, None, {"typed": True})
    lease = new_lease()
    payload_id = put_payload(db, collection, blob, base or {"job": {"name": collection}}, lease)
    release_lease(db, lease["id"])
    return payload_id


@pytest.mark.mongo
def test_a_put_payload_loads_once_per_process_with_its_base_node(test_db):
    import pickle

    payload_id = put(test_db, base={"job": {"name": "exps"}, "sweep": {"dir": "multirun"}})
    loaded, base = load_payload(test_db, payload_id)
    assert type(loaded) is Payload and loaded.task_function(3) == 3
    assert pickle.loads(loaded.typed_hydra_base) == {"typed": True}
    assert base == hydra_base(test_db, payload_id) == {"job": {"name": "exps"},
                                                      "sweep": {"dir": "multirun"}}  # fmt: skip
    delete_payload(test_db, payload_id)
    assert test_db["fs.files"].count_documents({}) == 0
    # the per-process cache: the jobs of a batch unpickle it once, even if it is gone since
    assert load_payload(test_db, payload_id)[0] is loaded
    with pytest.raises(AttributeError):
        hydra_base(test_db, payload_id)


def test_an_unpicklable_task_is_a_user_error_naming_the_cause():
    lock = threading.Lock()
    with pytest.raises(UnpicklableTaskError, match="cannot be pickled .*lock") as info:
        pickled_payload(lambda cfg: lock, None, None)
    assert isinstance(info.value, UserError)


@pytest.mark.mongo
def test_the_base_node_of_a_document_is_its_own_payloads_or_this_launchs(test_db):
    mine = {"job": {"name": "mine"}}
    earlier = put(test_db, base={"job": {"name": "earlier"}})
    this = put(test_db, base=mine)
    assert hydra_base_for(test_db, {"seml": {"payload_file": this}}, mine, this) is mine
    assert hydra_base_for(test_db, {"_id": 1}, mine, this) is mine
    stored = hydra_base_for(test_db, {"seml": {"payload_file": earlier}}, mine, this)
    assert stored == {"job": {"name": "earlier"}}
    delete_payload(test_db, earlier)
    assert hydra_base_for(test_db, {"seml": {"payload_file": earlier}}, mine, this) is mine


@pytest.mark.mongo
def test_orphan_payloads_go_named_ones_and_other_collections_stay(test_db):
    named, orphan, other = put(test_db), put(test_db), put(test_db, "other")
    test_db["exps"].insert_one({"_id": 1, "seml": {"payload_file": named}})
    assert delete_orphan_payloads(test_db, "exps", only={named}) == []
    assert [str(i) for i in delete_orphan_payloads(test_db, "exps")] == [orphan]
    left = {str(f["_id"]) for f in test_db["fs.files"].find()}
    assert left == {named, other}


@pytest.mark.mongo
def test_a_leased_payload_is_kept_until_its_lease_expires(test_db):
    """A launch still staging holds a lease on its payload: no document names it yet."""
    lease = new_lease()
    leased = put_payload(test_db, "exps", pickled_payload(task, None, None), {}, lease)
    assert delete_orphan_payloads(test_db, "exps") == []
    assert hydra_base(test_db, leased) == {}
    release_lease(test_db, lease["id"])
    assert [str(i) for i in delete_orphan_payloads(test_db, "exps")] == [leased]


@pytest.mark.parametrize(
    "only, ids",
    [(None, None), ({"6b0eae58da6292bc8b25be2b"}, "objectid"), ({"not-an-id"}, ["not-an-id"])],
)
def test_restricted_to_file_ids(only, ids):
    from bson import ObjectId

    candidates = {"metadata.kind": payloads.PAYLOAD_KIND}
    restricted = restricted_to(candidates, only)
    if only is None:
        assert restricted is candidates
        return
    expected = [ObjectId(next(iter(only)))] if ids == "objectid" else ids
    assert restricted == {**candidates, "_id": {"$in": expected}}


def test_payload_ids_of_documents():
    docs = [
        {"seml": {"payload_file": "a"}},
        {"seml": {}},
        {"_id": 3},
        {"seml": {"payload_file": "a"}},
    ]
    assert payload_ids(docs) == {"a"}
