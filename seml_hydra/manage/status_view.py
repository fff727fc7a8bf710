"""What ``seml <collection> status`` shows besides the detection of killed jobs: the table of
states (:func:`status_table`: from the census index alone when it can, ``track.census``), the
Slurm arrays of its PENDING experiments and why their jobs do not start (:func:`stuck_messages`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from seml_hydra.core import states
from seml_hydra.job.failfast import FIELD as FAIL_FAST
from seml_hydra.manage.describe import status_groups
from seml_hydra.slurm import client as slurm
from seml_hydra.track import census
from seml_hydra.track.jobs import STUCK_REASONS, stuck_message
from seml_hydra.track.query import and_


def pending_arrays(docs: Iterable[Mapping[str, Any]]) -> list[str]:
    """The Slurm arrays (``slurm[0].array_id``, whole numbers) of the PENDING documents among
    ``docs``, sorted (pure; ``launch.wait.pending_reasons`` asks squeue about the same)."""
    arrays = set()
    for doc in docs:
        entries = doc.get("slurm")
        if doc.get("status") != states.PENDING or not isinstance(entries, list) or not entries:
            continue
        first = entries[0] if isinstance(entries[0], Mapping) else {}
        array = str(first.get("array_id", ""))
        if array.isdigit():
            arrays.add(array)
    return sorted(arrays)


def status_table(
    collection: Any, query: Mapping[str, Any], keys: Sequence[str] = ()
) -> tuple[Sequence[tuple[dict[str, Any], Sequence[Any]]], list[str]]:
    """What ``status`` shows: ``(groups, arrays)``, the groups of ``manage.describe.status_groups``
    and the :func:`pending_arrays` among them. Without a filter nor ``keys`` they come from the
    census index alone (``track.census.state_groups``: no document read), else, or when the
    census cannot answer, from one aggregate over the documents. Raises pymongo errors."""
    groups: Sequence[tuple[dict[str, Any], Sequence[Any]]] | None = None
    if not query and not keys:
        try:
            groups = census.state_groups(collection)
        except census.Unplain:
            pass
    if groups is None:
        groups = status_groups(collection, query, keys)
    return groups, pending_arrays(doc for doc, _ in groups)


def fail_fast_stops(collection: Any, query: Mapping[str, Any]) -> list[tuple[str, list[Any]]]:
    """``(reason, ids)`` of the matching INTERRUPTED experiments a fail-fast stop ended
    (``job.failfast``: ``fail_fast.reason``), one entry per reason, sorted by their first id:
    one aggregate. Raises pymongo errors."""
    match = and_(query, {"status": states.INTERRUPTED, f"{FAIL_FAST}.reason": {"$type": "string"}})
    rows = collection.aggregate(
        [
            {"$match": match},
            {"$group": {"_id": f"${FAIL_FAST}.reason", "ids": {"$push": "$_id"}}},
        ]
    )
    stops = [(str(row["_id"]), sorted(row["ids"], key=str)) for row in rows]
    return sorted(stops, key=lambda stop: str(stop[1][0]))


def pruned_ids(collection: Any, query: Mapping[str, Any]) -> list[Any]:
    """The ids of the COMPLETED experiments matching ``query`` that were stopped early (a
    ``pruned`` field: ``seml_hydra.report``), by ``_id``; one query on the sparse index of
    ``pruned.step`` (``store.db.collections.JOB_INDEXES``). Raises pymongo errors."""
    found = and_(query, {"pruned.step": {"$exists": True}, "status": states.COMPLETED})
    return [d["_id"] for d in collection.find(found, {"_id": 1}).sort("_id", 1)]


def stuck_messages(arrays: Sequence[str], name: str) -> list[str]:
    """Why the Slurm jobs of ``arrays`` (:func:`pending_arrays`) of collection ``name`` will not
    start by themselves (a held job, a dependency that can never be satisfied...:
    ``track.jobs.STUCK_REASONS``), one message per pending job, sorted; none when squeue
    fails (``status`` still shows the counts)."""
    if not arrays:
        return []
    try:
        rows = slurm.squeue_jobs(job_ids=list(arrays), all_users=True)
    except slurm.SlurmError:
        return []
    stuck = sorted(
        (r.job_id, r.reason)
        for r in rows
        if r.state == "PENDING" and r.reason and r.reason in STUCK_REASONS
    )
    return [f"{stuck_message(job, reason, name)}." for job, reason in stuck]
