"""OmegaConf's interpolation parse trees remembered, for the calling thread only and only inside
:func:`cached_interpolation_parse`.

OmegaConf parses an interpolation string with its ANTLR grammar every time it resolves it
(``omegaconf.base.parse``, ~1 ms); the points of a sweep resolve the same few strings thousands
of times. OmegaConf offers no hook for this, so while at least one thread is inside the block,
``omegaconf.base.parse`` is a wrapper that serves the parse trees of the threads inside from their
cache (the trees are read-only for OmegaConf's visitor) and calls the original for every other
thread; when the last thread leaves, the original is back. Nothing is patched between two chunks
of a launch (the pipeline stages a chunk while the composition waits).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

_lock = threading.Lock()
#: threads inside the block now
_inside = 0
#: ``omegaconf.base.parse`` as found when the first thread entered
_original: Any = None
#: the calling thread's cache (unset: the thread is outside the block)
_local = threading.local()


def _cached_parse(value: Any, *args: Any, **kwargs: Any) -> Any:
    cache: dict[str, Any] | None = getattr(_local, "cache", None)
    if cache is None or args or kwargs or not isinstance(value, str):
        return _original(value, *args, **kwargs)
    tree = cache.get(value)
    if tree is None:
        tree = cache[value] = _original(value)
    return tree


@contextlib.contextmanager
def cached_interpolation_parse(cache: dict[str, Any]) -> Iterator[None]:
    """Within this block, OmegaConf's interpolation parses in the calling thread are read from
    and kept in ``cache`` (interpolation string -> parse tree; pass the same dict again to keep
    the trees across blocks). Other threads parse as before. Re-entrant: an inner block uses its
    own ``cache``, the outer block's again after it. ``omegaconf.base.parse`` is the original
    again once no thread is inside. Raises what the block raises."""
    import omegaconf.base

    global _inside, _original
    with _lock:
        if _inside == 0:
            _original = omegaconf.base.parse
            omegaconf.base.parse = _cached_parse
        _inside += 1
    outer = getattr(_local, "cache", None)
    _local.cache = cache
    try:
        yield
    finally:
        _local.cache = outer
        with _lock:
            _inside -= 1
            if _inside == 0:
                # _original stays: a thread that read the wrapper just before still calls it
                omegaconf.base.parse = _original
