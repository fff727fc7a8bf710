"""Compact id lists: for messages and tables (``[1, 2, 3, 7]`` -> ``"1-3, 7"``, :func:`format_ids`)
and for MongoDB (:func:`id_filter`: the same ids as ``_id`` ranges, so a command on 100,000
experiments does not carry, nor make the server search, a list of 100,000 ids)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def format_ids(ids: Iterable[Any]) -> str:
    """Format integer ids as sorted, comma-separated ranges (``"1-3, 7"``); ``""`` when empty.
    Ids that are not integers (the ``_id`` of a forged or foreign document: a string, an
    ObjectId, even a dict) follow as their ``repr``, sorted, with ``[`` escaped for rich, so a
    message never fails on them nor carries a terminal escape sequence or rich markup."""
    runs, others = id_runs(ids)
    parts = [str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in runs]
    # repr: escapes control characters (no terminal escape sequence gets through)
    return ", ".join([*parts, *sorted({_markup_safe(repr(value)) for value in others})])


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def id_runs(ids: Iterable[Any]) -> tuple[list[tuple[int, int]], list[Any]]:
    """``(runs, others)`` of ``ids`` (pure): the distinct integer ids as sorted runs of
    consecutive integers ``(first, last)`` (``[1, 2, 3, 7]`` -> ``[(1, 3), (7, 7)]``), and the
    ids that are not integers (a bool is not one), in their order, as they are."""
    ids = ids if isinstance(ids, (list, tuple, range)) else list(ids)
    if set(map(type, ids)) <= {int}:  # the usual case, in C (100,000 ids: a few ms)
        return _runs(sorted(set(ids))), []
    values = sorted({value for value in ids if _is_int(value)})
    others = [value for value in ids if not _is_int(value)]
    return _runs(values), others


#: at most this many ``_id`` ranges in one :func:`id_filter` (more ``$or`` branches cost the
#: server's planner more than the ``$in`` they replace); the shorter runs go to the ``$in``
MAX_ID_RANGES = 64

#: a run of consecutive ids shorter than this goes to the ``$in`` of :func:`id_filter`
MIN_RANGE_LENGTH = 3


def id_filter(ids: Iterable[Any], field: str = "_id") -> dict[str, Any]:
    """A MongoDB filter matching exactly the documents whose ``_id`` is one of ``ids`` (pure),
    compact: each run of at least :data:`MIN_RANGE_LENGTH` consecutive integer ids (the
    longest :data:`MAX_ID_RANGES` of them) as one ``_id`` range, the other ids in one ``$in``.

    ``{"_id": {"$in": ids}}`` with 100,000 ids is a 0.8 MB command that the server turns into
    100,000 index seeks (``delete`` of 100,000 experiments spent more time on that
    than on deleting); the ranges of one ``seml`` selection are a few. A range requires an
    integer ``_id`` (``$type`` int or long): MongoDB compares numbers by value, so without it
    a forged document with ``_id: 2.5`` would match ``1-3``. Ids an experiment collection
    gives are integers (``store.db.collections.next_ids``); other ids (strings, ObjectIds) go to
    the ``$in`` as they are. No ids: a filter matching nothing (``{"_id": {"$in": []}}``).
    ``field``: another field holding experiment ids instead of ``_id`` (a metric's ``run_id``).
    """
    runs, others = id_runs(ids)
    ranged = sorted(
        (r for r in runs if r[1] - r[0] + 1 >= MIN_RANGE_LENGTH),
        key=lambda r: r[0] - r[1],  # longest first
    )[:MAX_ID_RANGES]
    kept = set(ranged)
    singles = [v for lo, hi in runs if (lo, hi) not in kept for v in range(lo, hi + 1)]
    parts: list[dict[str, Any]] = [
        {field: {"$gte": lo, "$lte": hi, "$type": ["int", "long"]}} for lo, hi in sorted(ranged)
    ]
    if singles or others or not parts:
        parts.append({field: {"$in": [*singles, *others]}})
    return parts[0] if len(parts) == 1 else {"$or": parts}


def id_slices(ids: Sequence[Any], parts: int) -> list[Sequence[Any]]:
    """``ids`` cut into at most ``parts`` consecutive slices of about equal length, none empty
    (pure; a ``range`` gives ranges): the id ranges of writes sent at once."""
    parts = max(1, min(parts, len(ids)))
    bounds = [len(ids) * k // parts for k in range(parts + 1)]
    return [ids[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


def _runs(values: list[int]) -> list[tuple[int, int]]:
    """``(first, last)`` of each run of consecutive integers of sorted, distinct ``values``
    (pure): ``values[i] - i`` does not decrease, and is constant along a run, so each run's
    end is found by bisection (a run of 100,000 ids costs ~17 steps, not 100,000)."""
    from bisect import bisect_right

    runs: list[tuple[int, int]] = []
    i = 0
    while i < len(values):
        j = bisect_right(range(len(values)), values[i] - i, lo=i, key=lambda k: values[k] - k)
        runs.append((values[i], values[j - 1]))
        i = j
    return runs


def id_sort_key(value: Any) -> tuple[int, Any]:
    """The sort key of an experiment id: integers first, in order, then the others by ``str``."""
    return (0, value) if isinstance(value, int) else (1, str(value))


def _markup_safe(text: str) -> str:
    """``text`` with every ``[`` escaped as rich's markup escape (``\\[``), so printing it with
    markup shows it as it is."""
    return text.replace("[", "\\[")
