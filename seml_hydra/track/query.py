"""The small MongoDB query helpers the trackers and the ``seml`` commands share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


def select(collection: Any, query: Mapping[str, Any], projection: Any = None) -> list[dict]:
    """Documents matching ``query``, sorted by ``_id``."""
    return list(collection.find(dict(query), projection or PROJECTION).sort("_id", 1))
