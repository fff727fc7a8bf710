"""Deleting the metric documents of runs (Sacred's ``log_scalar`` values, written by
``seml_hydra.job.metrics`` and read by ``seml_hydra.store.results.get_metrics``): on ``delete``,
``drop`` and wherever an experiment is staged to run again (``launch.stage``, ``manage``'s
``reset``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from seml_hydra.store.collections import metrics_collection_name


def delete_metrics(db: Any, name: str, docs: Sequence[Mapping[str, Any]]) -> None:
    """Delete the metric documents of the runs ``docs`` (each with ``_id`` and, when it has
    any, ``info.metrics``) of collection ``name``: those of the collection's own metrics
    collection (``database.metrics_collection_name``) by ``run_id``, and the entries of
    ``info.metrics`` by their ids in the shared ``metrics`` collection (where runs before
    per-collection metrics, and SEML's, wrote; ``metrics.run_id`` alone is ambiguous across
    collections; a view named ``metrics``, :func:`is_view`, is left alone). Used by ``delete``
    and wherever an experiment is reset to run again (a re-run must not mix its metrics with
    the failed attempt's). Raises pymongo errors."""
    from bson import ObjectId
    from bson.errors import InvalidId

    metrics = []
    for doc in docs:
        info = doc.get("info")
        entries = info.get("metrics") if isinstance(info, Mapping) else None
        for entry in entries if isinstance(entries, list) else []:
            try:
                metrics.append(ObjectId(str(entry.get("id"))))
            except (InvalidId, TypeError, AttributeError):
                continue
    ids = [d["_id"] for d in docs]
    if ids:
        db[metrics_collection_name(name)].delete_many({"run_id": {"$in": ids}})
    if metrics and not is_view(db, "metrics"):
        db["metrics"].delete_many({"_id": {"$in": metrics}})


def is_view(db: Any, name: str) -> bool:
    """Whether ``name`` in ``db`` is a MongoDB view (read-only: writes to it fail). Omniboard's
    recipe adds a view named ``metrics`` over ``seml_hydra_metrics.<collection>``, whose
    documents :func:`delete_metrics` deletes there, by ``run_id``. Raises pymongo errors."""
    return any(
        c.get("type") == "view"
        for c in db.list_collections(
            filter={"name": name}, nameOnly=True, authorizedCollections=True
        )
    )
