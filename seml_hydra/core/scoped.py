"""Entries of a mapping set for the length of a block (``os.environ``, ``sys.modules``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any


@contextlib.contextmanager
def temporarily(mapping: MutableMapping[str, Any], values: Mapping[str, Any]) -> Iterator[None]:
    """``mapping`` with ``values`` set inside the block; afterwards each key has its old value
    again, or is absent when it was absent before (also when the block raises)."""
    missing = object()
    old = {key: mapping.get(key, missing) for key in values}
    mapping.update(values)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is missing:
                mapping.pop(key, None)
            else:
                mapping[key] = value
