"""A node's cache of the bytecode of code snapshot modules, by content (the node side of
``seml_hydra.store.snapshot.node``).

Every code snapshot is written into a fresh directory on the node, so Python compiles each of
its modules a job imports again, in every wave of tasks (~6 ms CPU per 1,000 lines, against
~0.3 ms to load compiled code: ``benchmarks/README.md``, "Job life"). Here the compiled code
outlives the directory: when the last task of a snapshot leaves it (:func:`store_bytecode`),
the bytecode Python wrote into its ``__pycache__`` is kept in this user's private runtime
directory under the SHA-1 of the module's source, as a *checked-hash* ``.pyc`` (PEP 552: the
import system uses it only when the source it sits next to hashes to the value it records);
when a later snapshot directory is written (:func:`restore_bytecode`), each of its modules whose
source is in the cache gets that ``.pyc`` in its ``__pycache__``, and its import loads it
instead of compiling. Modules whose source changed since are compiled as before, and nothing is
kept when Python writes no bytecode (``PYTHONDONTWRITEBYTECODE``). Entries unused for
:data:`KEEP_DAYS` days are removed when bytecode is stored.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import sys
import time
from pathlib import Path

#: entries of the cache not used for this many days are removed (:func:`store_bytecode`)
KEEP_DAYS = 14
#: the cache's directory under the snapshot base (``seml_hydra.store.snapshot.node.snapshot_base``)
CACHE_DIR = "bytecode"
_FLAGS_CHECKED_HASH = (0b11).to_bytes(4, "little")


def checked_hash_pyc(
    timestamp_pyc: bytes, source: bytes, source_stat: os.stat_result
) -> bytes | None:
    """The checked-hash ``.pyc`` of ``source`` made from the timestamp-based ``.pyc`` Python
    wrote for it, or None when that one is not valid for it (pure): another interpreter's
    magic number, not timestamp-based, or written for another modification time or size."""
    if len(timestamp_pyc) < 16 or timestamp_pyc[:4] != importlib.util.MAGIC_NUMBER:
        return None
    if int.from_bytes(timestamp_pyc[4:8], "little") != 0:  # already hash-based, or unknown
        return None
    mtime = int.from_bytes(timestamp_pyc[8:12], "little")
    size = int.from_bytes(timestamp_pyc[12:16], "little")
    if mtime != int(source_stat.st_mtime) & 0xFFFFFFFF or size != source_stat.st_size & 0xFFFFFFFF:
        return None
    header = importlib.util.MAGIC_NUMBER + _FLAGS_CHECKED_HASH + importlib.util.source_hash(source)
    return header + timestamp_pyc[16:]


def _entry(cache: Path, source: bytes) -> Path:
    """The cache entry of ``source``: by its SHA-1, the interpreter's cache tag and its
    optimization level (``-O``/``-OO``, ``PYTHONOPTIMIZE``: code compiled without asserts or
    docstrings is not given to an interpreter that runs them, as ``cache_from_source``'s
    ``.opt-N`` names keep them apart)."""
    tag = sys.implementation.cache_tag or "none"
    level = sys.flags.optimize
    opt = f".opt-{level}" if level else ""
    return cache / f"{hashlib.sha1(source).hexdigest()}.{tag}{opt}.pyc"


def _modules(directory: Path, *, compiled_only: bool = False) -> list[Path]:
    """The ``.py`` files under ``directory``, symbolic links left out; with ``compiled_only``
    only those of folders holding a ``__pycache__`` (where Python wrote the bytecode of the
    modules a job imported: a few folders, not every file of the snapshot)."""
    out = []
    for folder, dirs, names in os.walk(directory):
        compiled = "__pycache__" in dirs
        if compiled:
            dirs.remove("__pycache__")  # bytecode, no modules
        if compiled_only and not compiled:
            continue
        for name in names:
            path = Path(folder, name)
            if name.endswith(".py") and path.is_file() and not path.is_symlink():
                out.append(path)
    return out


def restore_bytecode(directory: Path, cache: Path) -> int:
    """Give each module under ``directory`` whose source is in ``cache`` its cached ``.pyc``
    (where the import system looks: ``importlib.util.cache_from_source``); returns how many.
    Nothing when the interpreter has no bytecode cache tag. Errors of a single file are
    skipped (the module is compiled on import, as without a cache)."""
    if sys.implementation.cache_tag is None or not cache.is_dir():
        return 0
    restored = 0
    for path in _modules(directory):
        with contextlib.suppress(OSError, ValueError):
            entry = _entry(cache, path.read_bytes())
            if not entry.is_file():
                continue
            target = Path(importlib.util.cache_from_source(str(path)))
            target.parent.mkdir(mode=0o700, exist_ok=True)
            target.write_bytes(entry.read_bytes())
            os.utime(entry)  # used: kept another KEEP_DAYS days
            restored += 1
    return restored


def store_bytecode(directory: Path, cache: Path, *, now: float | None = None) -> int:
    """Keep the bytecode Python wrote for the modules under ``directory`` in ``cache`` (mode
    0700), as checked-hash ``.pyc`` files named by the source's SHA-1 (:func:`checked_hash_pyc`);
    returns how many were added. Then remove the entries unused for :data:`KEEP_DAYS` days
    (``now``: the time to count from, ``time.time()`` when None). Errors of a single file are
    skipped."""
    if sys.implementation.cache_tag is None:
        return 0
    added = 0
    for path in _modules(directory, compiled_only=True):
        with contextlib.suppress(OSError, ValueError):
            written = Path(importlib.util.cache_from_source(str(path)))
            if not written.is_file():
                continue
            source = path.read_bytes()
            entry = _entry(cache, source)
            if entry.is_file():
                continue
            pyc = checked_hash_pyc(written.read_bytes(), source, path.stat())
            if pyc is None:
                continue
            cache.mkdir(mode=0o700, exist_ok=True)
            tmp = entry.with_name(f".{entry.name}.{os.getpid()}.tmp")
            tmp.write_bytes(pyc)
            os.replace(tmp, entry)
            added += 1
    oldest = (time.time() if now is None else now) - KEEP_DAYS * 86400
    with contextlib.suppress(OSError):
        for entry in cache.glob("*.pyc"):
            with contextlib.suppress(OSError):
                if entry.stat().st_mtime < oldest:
                    entry.unlink()
    return added
