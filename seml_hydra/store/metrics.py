"""Deleting the metric documents of runs (Sacred's ``log_scalar`` values, written by
``seml_hydra.job.metrics`` and read by ``seml_hydra.store.results.get_metrics``): on ``delete``,
``drop``; and keeping those of a run as its attempt's when the experiment runs again
(:func:`tag_metrics`: ``launch.stage``, ``manage``'s ``reset``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from seml_hydra.store.db.collections import metrics_collection_name

if TYPE_CHECKING:
    from seml_hydra.core.schema import Database


def delete_metrics(
    db: Database,
    name: str,
    docs: Sequence[Mapping[str, Any]],
    ids: Sequence[Any] | None = None,
) -> None:
    """Delete the metric documents of the runs ``docs`` (each with ``_id`` and, when it has
    any, ``info.metrics``) of collection ``name``: those of the collection's own metrics
    collection (``database.metrics_collection_name``) by ``run_id``, and the entries of
    ``info.metrics`` by their ids in the shared ``metrics`` collection (where runs before
    per-collection metrics, and SEML's, wrote; ``metrics.run_id`` alone is ambiguous across
    collections; a view named ``metrics``, :func:`is_view`, is left alone), and those of its
    earlier attempts (:func:`tag_metrics`). ``ids``: the experiments whose metrics by
    ``run_id`` / ``attempt_of`` go (default: those of ``docs``; ``delete`` passes every
    experiment it deleted, whose documents it did not read), sent as ``_id`` ranges
    (``core.ranges.id_filter``). Used by ``delete`` and ``drop``. Raises pymongo errors."""
    from seml_hydra.core.ranges import id_filter

    metrics = _listed_metric_ids(docs)
    ids = [d["_id"] for d in docs] if ids is None else ids
    if ids:
        own = db[metrics_collection_name(name)]
        own.delete_many(id_filter(ids, "run_id"))
        own.delete_many(id_filter(ids, "attempt_of"))  # earlier attempts' (tag_metrics)
    if is_view(db, "metrics"):  # Omniboard's recipe: writes to a view fail
        return
    if ids:
        db["metrics"].delete_many({**id_filter(ids, "attempt_of"), "collection": name})
    if metrics:
        db["metrics"].delete_many({"_id": {"$in": metrics}})


def tag_metrics(db: Database, name: str, docs: Sequence[Mapping[str, Any]]) -> None:
    """Keep the metric documents of the runs ``docs`` of collection ``name`` as their attempt's:
    each doc is ``{"_id", "attempt": <the number of the run being moved into the history>}``
    plus ``info.metrics`` when it has any. In the collection's own metrics collection
    (``run_id`` = the experiment's ``_id``) and in the shared ``metrics`` (by the ids of
    ``info.metrics``), ``run_id`` is renamed ``attempt_of`` and ``attempt`` is set (the shared
    one also gets ``collection``): the next run's metrics (Sacred upserts by ``run_id`` and
    name) start new documents and never append to these. Metrics of attempts that fell out of
    the history (``core.attempts.HISTORY_LIMIT``) are deleted. One ``update_many`` per distinct
    attempt number (a reset of a sweep: one or two). Raises pymongo errors."""
    from seml_hydra.core.attempts import HISTORY_LIMIT

    own, shared = db[metrics_collection_name(name)], db["metrics"]
    shared_writable = not is_view(db, "metrics")  # Omniboard's recipe: writes to a view fail
    by_number: dict[int, list[Mapping[str, Any]]] = {}
    for doc in docs:
        by_number.setdefault(int(doc["attempt"]), []).append(doc)
    for number, group in sorted(by_number.items()):
        ids = [d["_id"] for d in group]
        tag = {"$rename": {"run_id": "attempt_of"}, "$set": {"attempt": number}}
        own.update_many({"run_id": {"$in": ids}}, tag)
        legacy = _listed_metric_ids(group)
        if legacy and shared_writable:
            shared.update_many(
                {"_id": {"$in": legacy}, "run_id": {"$exists": True}},
                {**tag, "$set": {"attempt": number, "collection": name}},
            )
        if number > HISTORY_LIMIT:
            dropped = {"attempt_of": {"$in": ids}, "attempt": {"$lte": number - HISTORY_LIMIT}}
            own.delete_many(dropped)
            if shared_writable:
                shared.delete_many({**dropped, "collection": name})


def _listed_metric_ids(docs: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The ``ObjectId`` s ``info.metrics`` of ``docs`` lists (entries without a valid id are
    skipped)."""
    from bson import ObjectId
    from bson.errors import InvalidId

    found = []
    for doc in docs:
        info = doc.get("info")
        entries = info.get("metrics") if isinstance(info, Mapping) else None
        for entry in entries if isinstance(entries, list) else []:
            try:
                found.append(ObjectId(str(entry.get("id"))))
            except (InvalidId, TypeError, AttributeError):
                continue
    return found


def is_view(db: Database, name: str) -> bool:
    """Whether ``name`` in ``db`` is a MongoDB view (read-only: writes to it fail). Omniboard's
    recipe adds a view named ``metrics`` over ``seml_hydra_metrics.<collection>``, whose
    documents :func:`delete_metrics` deletes there, by ``run_id``. Raises pymongo errors."""
    return any(
        c.get("type") == "view"
        for c in db.list_collections(
            filter={"name": name}, nameOnly=True, authorizedCollections=True
        )
    )
