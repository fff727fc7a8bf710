"""The collection names shell completion offers (``seml <TAB>``), cached in a small JSON file:
written by ``seml list``, by each command on a collection and by the launcher after staging;
read by ``seml_hydra.cli.core.SemlGroup.shell_complete`` (which must not connect to MongoDB)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from seml_hydra.store.db.collections import is_reserved_collection


def is_listed_collection(name: str) -> bool:
    """Whether ``name`` is an experiment collection to show, drop or complete: not a reserved
    one (``store.db.collections.is_reserved_collection``: counters, the shared metrics, GridFS's,
    MongoDB's, the per-collection metrics). Pure."""
    return not is_reserved_collection(name)


def cache_path(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/seml-hydra/collections.json`` (``~/.cache/...`` by default)."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or str(Path.home()), ".cache")
    return Path(base) / "seml-hydra" / "collections.json"


def refresh_collection_cache(names: Iterable[str], *, replace: bool = True) -> None:
    """Write the collection names shell completion offers. ``replace=False`` adds ``names`` to
    the cached ones (the launcher calls ``refresh_collection_cache([name], replace=False)``
    after staging). Never raises: completion is a convenience."""
    try:
        path = cache_path()
        current = set() if replace else set(cached_collections())
        current.update(n for n in names if is_listed_collection(n))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"collections": sorted(current), "time": time.time()}))
        os.replace(tmp, path)
    except OSError:
        pass


def forget_cached_collections(names: Iterable[str]) -> None:
    """Remove ``names`` from the completion cache (after ``drop``). Never raises."""
    gone = set(names)
    refresh_collection_cache([n for n in cached_collections() if n not in gone])


def cached_collections() -> list[str]:
    """The cached collection names (``[]`` when there is no readable cache)."""
    try:
        data = json.loads(cache_path().read_text())
        return [str(n) for n in data.get("collections", [])]
    except (OSError, ValueError, AttributeError):
        return []
