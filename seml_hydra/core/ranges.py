"""Compact id lists for messages and tables: ``[1, 2, 3, 7]`` -> ``"1-3, 7"``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def format_ids(ids: Iterable[Any]) -> str:
    """Format integer ids as sorted, comma-separated ranges (``"1-3, 7"``); ``""`` when empty.
    Ids that are not integers (the ``_id`` of a forged or foreign document: a string, an
    ObjectId, even a dict) follow as their ``repr``, sorted, with ``[`` escaped for rich, so a
    message never fails on them nor carries a terminal escape sequence or rich markup."""
    ids = ids if isinstance(ids, (list, tuple, range)) else list(ids)
    if set(map(type, ids)) <= {int}:  # the usual case, in C (100,000 ids: a few ms)
        return ", ".join(_runs(sorted(set(ids))))
    values: list[int] = []
    others: set[str] = set()
    for value in ids:
        if isinstance(value, int) and not isinstance(value, bool):
            values.append(value)
        else:  # repr: escapes control characters (no terminal escape sequence gets through)
            others.add(_markup_safe(repr(value)))
    values = sorted(set(values))
    parts: list[str] = []
    start = prev = None
    for value in values:
        if prev is not None and value == prev + 1:
            prev = value
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = value
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ", ".join([*parts, *sorted(others)])


def _runs(values: list[int]) -> list[str]:
    """``"a-b"`` / ``"a"`` of each run of consecutive integers of sorted, distinct ``values``
    (pure): ``values[i] - i`` does not decrease, and is constant along a run, so each run's
    end is found by bisection (a run of 100,000 ids costs ~17 steps, not 100,000)."""
    from bisect import bisect_right

    parts: list[str] = []
    i = 0
    while i < len(values):
        j = bisect_right(range(len(values)), values[i] - i, lo=i, key=lambda k: values[k] - k)
        start, end = values[i], values[j - 1]
        parts.append(str(start) if start == end else f"{start}-{end}")
        i = j
    return parts


def id_sort_key(value: Any) -> tuple[int, Any]:
    """The sort key of an experiment id: integers first, in order, then the others by ``str``."""
    return (0, value) if isinstance(value, int) else (1, str(value))


def _markup_safe(text: str) -> str:
    """``text`` with every ``[`` escaped as rich's markup escape (``\\[``), so printing it with
    markup shows it as it is."""
    return text.replace("[", "\\[")
