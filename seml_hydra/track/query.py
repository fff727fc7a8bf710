"""The small MongoDB query helpers the trackers and the ``seml`` commands share: ``select``
(documents), ``grouped`` (documents grouped by what a decision reads, one aggregate) and ``and_``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from seml_hydra.core.ranges import id_sort_key

if TYPE_CHECKING:
    from pymongo.collection import Collection

#: the fields the liveness and lifecycle decisions read of a document
PROJECTION = {
    "_id": 1,
    "status": 1,
    "batch_id": 1,
    "execution": 1,
    "slurm": 1,
    "seml": 1,
    "heartbeat": 1,
    "start_time": 1,
    "host.hostname": 1,  # where a run outside Slurm runs (track.jobs.local_process)
}


def and_(query: Mapping[str, Any], condition: Mapping[str, Any]) -> dict[str, Any]:
    """``query`` AND ``condition`` as a new filter (``query`` is not changed)."""
    out = dict(query)
    out["$and"] = [*out.get("$and", []), dict(condition)]
    return out


def select(
    collection: Collection[dict[str, Any]], query: Mapping[str, Any], projection: Any = None
) -> list[dict[str, Any]]:
    """Documents matching ``query``, sorted by ``_id``."""
    return list(collection.find(dict(query), projection or PROJECTION).sort("_id", 1))


def grouped_pipeline(query: Mapping[str, Any], fields: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The aggregation pipeline of :func:`grouped` (pure): match ``query``, project on
    ``fields`` (a find projection: paths to 1, or computed fields), sort by ``_id``, group by the
    projected top-level fields (``"ids"``: the ``_id`` s of each group, in order)."""
    top = dict.fromkeys(f.split(".")[0] for f in fields if f != "_id")
    return [
        {"$match": dict(query)},
        {"$project": {**fields, "_id": 1}},
        {"$sort": {"_id": 1}},
        {"$group": {"_id": {name: f"${name}" for name in top}, "ids": {"$push": "$_id"}}},
    ]


def grouped(
    collection: Collection[dict[str, Any]], query: Mapping[str, Any], fields: Mapping[str, Any]
) -> list[tuple[dict[str, Any], list[Any]]]:
    """The documents matching ``query`` grouped by their projection on ``fields``, in one
    aggregate: ``[(projected document without _id, [_id, ...]), ...]``, groups in the order of
    their first ``_id``, each group's ids in order. The projected document is what
    ``collection.find(query, fields)`` returns for every experiment of the group (a field
    absent there is absent here), so a pure function of it decides for the whole group.
    Raises pymongo errors."""
    rows = list(collection.aggregate(grouped_pipeline(query, fields), allowDiskUse=True))
    rows.sort(key=lambda row: id_sort_key(row["ids"][0]))
    return [(row["_id"], row["ids"]) for row in rows]
