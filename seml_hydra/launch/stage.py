"""Staging: sweep points -> documents in MongoDB, with SEML's duplicate rule.

A point whose ``config_hash`` is already in the collection is not staged again (SEML 0.5's
``remove_duplicates``): STAGED experiments are submitted with this launch, PENDING/RUNNING/
RESCHEDULED/COMPLETED ones are awaited or returned, FAILED/KILLED/INTERRUPTED ones are reset to
STAGED and run again (their metrics deleted). ``force`` stages a new copy anyway. ``_id`` and ``batch_id`` come from atomic
counters (``collections.next_ids``), never from ``max + 1``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from seml_hydra.core import states
from seml_hydra.store.collections import next_ids

#: run fields Sacred and the run step write; cleared when a finished experiment is reset
RUN_FIELDS = (
    "execution",
    "start_time",
    "stop_time",
    "heartbeat",
    "captured_out",
    "result",
    "fail_trace",
    "rank_failures",
    "rank_ends",
    "requeues",
    "host",
    "experiment",
    "meta",
    "info",
    "resources",
    "artifacts",
    "command",
    "format",
    "stats",
)


#: documents built and inserted at a time by :func:`stage`
INSERT_CHUNK = 1000


@dataclass
class StagePlan:
    """What to do with each point (pure result of :func:`plan_staging`).

    Attributes:
        new: indices of points to insert as new documents.
        existing: point index -> the existing document (``_id``, ``status``) it maps to.
        rerun: indices (subset of ``existing``) whose experiment is reset and run again.
        resubmit: indices (subset of ``existing``) that are STAGED and get submitted now.
    """

    new: list[int] = field(default_factory=list)
    existing: dict[int, Mapping[str, Any]] = field(default_factory=dict)
    rerun: list[int] = field(default_factory=list)
    resubmit: list[int] = field(default_factory=list)


def plan_staging(
    hashes: Sequence[str], found: Sequence[Mapping[str, Any]], force: bool
) -> StagePlan:
    """Decide per point: new, awaited, re-run or re-submitted (pure).

    Args:
        hashes: ``config_hash`` per point, in input order.
        found: existing documents (``_id``, ``status``, ``config_hash``) with any of those hashes.
        force: stage every point as new (``hydra.launcher.force=true``).

    Two points of one sweep with the same hash map to the same experiment. When several
    documents share a hash, the newest (highest ``_id``) wins.
    """
    plan = StagePlan()
    by_hash: dict[str, Mapping[str, Any]] = {}
    for doc in sorted(found, key=lambda d: d["_id"]):
        by_hash[doc["config_hash"]] = doc
    first_new: dict[str, int] = {}
    for index, h in enumerate(hashes):
        doc = None if force else by_hash.get(h)
        if doc is None:
            if not force and h in first_new:  # duplicate inside this sweep: one experiment
                plan.existing[index] = {"_id": None, "same_as": first_new[h]}
                continue
            first_new.setdefault(h, index)
            plan.new.append(index)
            continue
        plan.existing[index] = doc
        status = states.ALIASES.get(doc["status"], doc["status"])
        if status in states.RERUNNABLE:
            plan.rerun.append(index)
        elif status == states.STAGED:
            plan.resubmit.append(index)
    return plan


@dataclass
class StageResult:
    """Outcome of :func:`stage`: the experiment id of every point (input order), and which ids
    this launch must submit."""

    ids: list[int]
    batch_id: int
    new_ids: list[int]
    rerun_ids: list[int]
    resubmit_ids: list[int]
    awaited: dict[str, list[int]]  # status -> ids of existing experiments we only wait for

    @property
    def to_submit(self) -> list[int]:
        """ids to submit now, ascending."""
        return sorted({*self.new_ids, *self.rerun_ids, *self.resubmit_ids})


def _max_of(collection: Any, field_name: str) -> Callable[[], int]:
    """``floor`` for ``next_ids``: the largest integer ``field_name`` in the collection (ids SEML
    wrote as ``max + 1`` stay below ours)."""

    def largest() -> int:
        doc = collection.find_one({}, {field_name: 1}, sort=[(field_name, -1)])
        value = (doc or {}).get(field_name)
        return value if isinstance(value, int) else 0

    return largest


def next_batch_id(db: Any, collection_name: str) -> int:
    """A new ``batch_id`` for a launch into ``collection_name`` (atomic counter)."""
    collection = db[collection_name]
    return next_ids(db, f"{collection_name}.batch_id", 1, floor=_max_of(collection, "batch_id"))[0]


def stage(
    db: Any,
    collection_name: str,
    hashes: Sequence[str],
    make_document: Callable[[int, int, int], dict[str, Any]],
    refresh_existing: Callable[[int], dict[str, Any]],
    force: bool,
    batch_id: int,
) -> StageResult:
    """Write the documents of a launch.

    Args:
        db: pymongo database.
        collection_name: the collection.
        hashes: ``config_hash`` per point.
        make_document: ``(point_index, exp_id, batch_id) -> document`` for new points.
        refresh_existing: ``point_index -> {field: value}`` set on re-run and re-submitted
            documents (this launch's ``hydra`` and ``seml`` blocks).
        force: see :func:`plan_staging`.
        batch_id: from :func:`next_batch_id`.

    New documents are written with ``insert_many``, :data:`INSERT_CHUNK` at a time; if one
    fails, the ones written are removed again, so no half-staged batch remains. Raises pymongo errors.
    """
    collection = db[collection_name]
    collection.create_index("config_hash")
    found = list(
        collection.find(
            {"config_hash": {"$in": list(set(hashes))}},
            {"_id": 1, "status": 1, "config_hash": 1, "info.metrics": 1},
        )
    )
    plan = plan_staging(hashes, found, force)

    ids: list[int | None] = [None] * len(hashes)
    new_ids: list[int] = []
    if plan.new:
        id_range = next_ids(
            db, f"{collection_name}._id", len(plan.new), floor=_max_of(collection, "_id")
        )
        new_ids = list(id_range)
        pairs = list(zip(plan.new, new_ids))
        try:
            # built and written INSERT_CHUNK documents at a time: all documents held at once
            # (and pymongo's encoded batch of them) would raise the launcher's peak memory
            for start in range(0, len(pairs), INSERT_CHUNK):
                chunk = pairs[start : start + INSERT_CHUNK]
                collection.insert_many(
                    [make_document(i, exp_id, batch_id) for i, exp_id in chunk], ordered=True
                )
        except BaseException:  # Ctrl-C included: no half-staged batch
            collection.delete_many({"_id": {"$in": new_ids}, "status": states.STAGED})
            raise
        for i, exp_id in zip(plan.new, new_ids):
            ids[i] = exp_id
    awaited: dict[str, list[int]] = {}
    rerun_ids, resubmit_ids = [], []
    handled: set[int] = set()
    for index, doc in plan.existing.items():
        if doc["_id"] is None:  # duplicate inside this sweep
            continue
        ids[index] = doc["_id"]
        if doc["_id"] in handled:  # two points of this sweep, one experiment
            continue
        handled.add(doc["_id"])
        if index in plan.rerun or index in plan.resubmit:
            result = collection.update_one(
                {"_id": doc["_id"], "status": doc["status"]},
                {
                    "$set": {"status": states.STAGED, **refresh_existing(index)},
                    "$unset": {name: "" for name in RUN_FIELDS},
                },
            )
            if result.modified_count:
                if index in plan.rerun:  # the failed attempt's metrics must not mix in
                    from seml_hydra.store.metrics import delete_metrics

                    delete_metrics(db, collection_name, [doc])
                (rerun_ids if index in plan.rerun else resubmit_ids).append(doc["_id"])
                continue
        awaited.setdefault(doc["status"], []).append(doc["_id"])
    for index, doc in plan.existing.items():
        if doc["_id"] is None:
            ids[index] = ids[doc["same_as"]]
    return StageResult([int(i) for i in ids], batch_id, new_ids, rerun_ids, resubmit_ids, awaited)
