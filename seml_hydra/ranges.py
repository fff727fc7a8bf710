"""Compact id lists for messages and tables: ``[1, 2, 3, 7]`` -> ``"1-3, 7"``."""

from __future__ import annotations

from collections.abc import Iterable


def format_ids(ids: Iterable[int]) -> str:
    """Format integer ids as sorted, comma-separated ranges (``"1-3, 7"``); ``""`` when empty."""
    values = sorted(set(ids))
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
    return ", ".join(parts)
