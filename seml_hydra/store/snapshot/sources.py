"""Code snapshots, the login-node side: jobs run the code as it was at launch (SEML 0.5's source
files, in GridFS).

At staging, the project's own files - every Python file under its project root that git tracks
or would track (untracked but not ignored; outside git, every ``.py`` file under the root), the
modules the app imported from there, not site-packages and not a virtualenv, and its Hydra
config directory - are stored in GridFS once per content hash and collection
(:func:`project_python_files`, :func:`select_sources`, :func:`upload_sources`), as SEML's
``stash_all_py_files`` does: a module the task imports only when it runs is in it too.

The file list ``[[relative path, file id], ...]`` is stored once per launch, as the
*manifest* (:func:`put_manifest`): a GridFS file of no content whose ``metadata`` holds the
list and the project root, with the ``collection_name`` and ``batch_id`` of the snapshot's
files, so SEML 0.5.7's ``delete`` removes it with them. Each document names it
(``seml.source_manifest``) instead of carrying the list, so documents do not grow with the
snapshot. Documents of earlier versions carry the list itself (``seml.source_files``, SEML's
field); every reader accepts both (``store.snapshot.node.load_snapshot``). A launch holds a lease on
the files and the manifest until its documents name them, so that a concurrent
``delete``/``drop`` (:func:`delete_unused_files`) leaves them alone. On the node,
:mod:`seml_hydra.store.snapshot.node` writes the snapshot out and runs from it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seml_hydra.core.processes import run_captured
from seml_hydra.store.snapshot.gitinfo import git_toplevel

if TYPE_CHECKING:
    from seml_hydra.core.schema import Database

#: files larger than this are not snapshotted (and reported), in KB
DEFAULT_MAX_FILE_KB = 1024
#: config files taken from the Hydra config directory
CONFIG_SUFFIXES = (".yaml", ".yml")
_PACKAGE_DIRS = ("site-packages", "dist-packages")
#: at most this many Python files of a project outside git are looked at (a project root that
#: is a home directory would otherwise be walked whole)
MAX_WALKED_FILES = 10000
#: ... and at most this many files and folders are walked through (data folders beside the code)
MAX_WALKED_ENTRIES = 200000
#: ``metadata.type`` of a launch's manifest, the list of its snapshot's files
MANIFEST_TYPE = "source_manifest"


@dataclass(frozen=True)
class SourceFile:
    """One file of a snapshot: ``rel_path`` (POSIX, relative to the project root), its absolute
    ``path`` and ``size`` in bytes."""

    rel_path: str
    path: Path
    size: int


def project_root(app_dir: str | Path, override: str | None = None) -> Path:
    """The project root: ``override`` when given, else the git root of ``app_dir``, else
    ``app_dir`` itself."""
    if override:
        return Path(override).expanduser().resolve()
    top = git_toplevel(app_dir)
    return Path(top).resolve() if top else Path(app_dir).resolve()


def config_dirs_of(hydra: Mapping[str, Any]) -> list[str]:
    """The app's own Hydra config directories of a Hydra node (``runtime.config_sources`` of
    the ``main`` provider, ``file`` schema): those whose YAML files a snapshot takes. Pure."""
    return [
        source["path"]
        for source in (hydra.get("runtime") or {}).get("config_sources", [])
        if source.get("provider") == "main" and source.get("schema") == "file"
    ]


def _inside_venv(path: Path, root: Path, venvs: dict[Path, bool] | None = None) -> bool:
    """True when a directory between ``root`` and ``path`` is a virtualenv (has pyvenv.cfg).
    ``venvs``: answers already found per directory, filled in (one look per directory for a
    whole project's files)."""
    venvs = {} if venvs is None else venvs
    for parent in path.parents:
        if parent == root:
            return False
        if parent not in venvs:
            venvs[parent] = (parent / "pyvenv.cfg").exists()
        if venvs[parent]:
            return True
    return False


def is_project_file(
    path: str | Path, root: Path, *, resolved: bool = False, venvs: dict[Path, bool] | None = None
) -> bool:
    """``path`` is under ``root`` and not part of an installed package or a virtualenv.
    ``resolved``: ``path`` is already resolved (no symbolic link in it); ``venvs``: the cache of
    :func:`_inside_venv`."""
    p = Path(path) if resolved else Path(path).resolve()
    if root not in p.parents:
        return False
    rel_parts = p.relative_to(root).parts
    if any(part in _PACKAGE_DIRS for part in rel_parts):
        return False
    return not _inside_venv(p, root, venvs)


def project_python_files(root: Path) -> tuple[list[str], str | None]:
    """The project's Python files under ``root`` (absolute paths), as SEML's
    ``stash_all_py_files`` takes them, and what was left out of the search (or None).

    In a git work tree: the ``.py`` files git tracks or would track under ``root`` (``git
    ls-files --cached --others --exclude-standard``: untracked files that ``.gitignore`` does
    not ignore); git-ignored files (a virtualenv, data, outputs) are left out. Outside git:
    every ``.py`` file under ``root``, hidden directories, ``__pycache__`` and virtualenvs left
    out, at most :data:`MAX_WALKED_FILES` of them found among at most
    :data:`MAX_WALKED_ENTRIES` files and folders (then the second value says so). Files of
    installed packages and virtualenvs are dropped later (:func:`is_project_file`).
    """
    root = Path(root)
    try:
        out = run_captured(
            [
                "git",
                "-C",
                str(root),
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
                "--",
                "*.py",
            ],
            timeout_s=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        out = None
    if out is not None and out.returncode == 0:
        names = [n for n in out.stdout.split("\0") if n]
        return [str(root / n) for n in dict.fromkeys(names)], "git-ignored files"
    found: list[str] = []
    seen = 0
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".")
            and d != "__pycache__"
            and d not in _PACKAGE_DIRS
            and not os.path.exists(os.path.join(directory, d, "pyvenv.cfg"))
        )
        found += [os.path.join(directory, f) for f in sorted(files) if f.endswith(".py")]
        seen += len(files) + len(dirs)
        if len(found) >= MAX_WALKED_FILES or seen >= MAX_WALKED_ENTRIES:
            return found[:MAX_WALKED_FILES], (
                f"what is past the first {min(seen, MAX_WALKED_ENTRIES)} entries or "
                f"{MAX_WALKED_FILES} Python files of {root} (not a git work tree: set "
                "hydra.launcher.project_root to the project's folder)"
            )
    return found, "hidden folders and virtualenvs"


def left_out_line(
    skipped: Sequence[tuple[str, str]], not_searched: str | None, max_file_kb: int
) -> str:
    """The one line a launch prints about what its code snapshot left out and why (pure):
    the files above the size cap (``skipped`` of :func:`select_sources`, by name, the first
    three), what the search of the project left out (``not_searched`` of
    :func:`project_python_files`), and that only Python files and the Hydra config's YAML
    files are taken."""
    parts = []
    if skipped:
        names = ", ".join(os.path.basename(path) for path, _ in skipped[:3])
        more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
        parts.append(f"{len(skipped)} file(s) above {max_file_kb} KB ({names}{more})")
    if not_searched:
        parts.append(not_searched)
    parts.append("files other than .py and the Hydra config's YAML")
    return "Not in the code snapshot: " + "; ".join(parts) + "."


def select_sources(
    module_files: Iterable[str],
    config_dirs: Iterable[str | Path],
    root: Path,
    max_file_kb: int = DEFAULT_MAX_FILE_KB,
    project_files: Iterable[str] = (),
) -> tuple[list[SourceFile], list[tuple[str, str]]]:
    """Choose the files of a snapshot.

    Args:
        module_files: ``__file__`` of the imported modules (``sys.modules``).
        config_dirs: the app's Hydra config directories; their YAML files are taken.
        root: the project root.
        max_file_kb: size cap per file in KB.
        project_files: the project's Python files (:func:`project_python_files`).

    Returns ``(files, skipped)``: files sorted by relative path, and ``(path, reason)`` of what
    was left out for its size. Only Python modules (``.py``) and config files are considered,
    so data, checkpoints and binaries in the project are never swept in; a listed file that is
    not there (deleted since git knew it) is passed over.
    """
    candidates: set[Path] = set()
    venvs: dict[Path, bool] = {}
    for name in dict.fromkeys([*module_files, *project_files]):
        if not name or not name.endswith(".py"):
            continue
        path = Path(os.path.realpath(name))
        if is_project_file(path, root, resolved=True, venvs=venvs) and path.is_file():
            candidates.add(path)
    for directory in config_dirs:
        d = Path(directory).resolve()
        if d.is_dir() and is_project_file(d / "x", root):
            candidates.update(
                p.resolve() for p in d.rglob("*") if p.suffix in CONFIG_SUFFIXES and p.is_file()
            )
    files, skipped = [], []
    for path in sorted(candidates):
        size = path.stat().st_size
        if size > max_file_kb * 1024:
            skipped.append((str(path), f"{size // 1024} KB is above the {max_file_kb} KB cap"))
            continue
        files.append(SourceFile(path.relative_to(root).as_posix(), path, size))
    return files, skipped


def script_in_snapshot(
    executable: str, root: Path, source_files: Sequence[Sequence[Any]]
) -> str | None:
    """The app's script ``executable`` (an absolute path) as its path in the snapshot
    (relative to the project root ``root``, POSIX; what a document keeps as
    ``seml.main_file``), or None when the snapshot ``source_files`` does not hold it (pure
    but for resolving symbolic links in the two paths)."""
    if not executable:
        return None
    try:
        rel = Path(executable).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:  # not under the project root
        return None
    return rel if rel in {str(r) for r, _ in source_files} else None


def imported_module_files(modules: Mapping[str, Any] | None = None) -> list[str]:
    """``__file__`` of every loaded module (default: ``sys.modules``)."""
    modules = sys.modules if modules is None else modules
    out = []
    for module in list(modules.values()):
        name = getattr(module, "__file__", None)
        if isinstance(name, str):
            out.append(os.path.abspath(name))
    return out


def upload_sources(
    db: Database,
    collection_name: str,
    batch_id: int,
    files: Sequence[SourceFile],
    lease: Mapping[str, Any] | None = None,
) -> list[list[Any]]:
    """Store ``files`` in GridFS, reusing a file of this collection and batch with the same path
    and content hash; returns the snapshot's file list (``[[relative path, ObjectId], ...]``).

    Metadata follows SEML 0.5 (``collection_name``, ``batch_id``, ``type: source_file``) plus
    ``content_hash`` (MD5 of the bytes) for the deduplication. A file is never reused across
    batches: SEML 0.5.7's ``delete`` removes a batch's files by ``metadata.batch_id`` once no
    document of that batch remains (``delete_orphaned_sources``), so every batch owns the files
    its documents name, as SEML's own do. With ``lease`` (from
    :func:`new_lease`) every file used, reused or new, carries it in ``metadata.leases`` until
    :func:`release_lease`: a concurrent ``delete``/``drop`` (:func:`delete_unused_files`) then
    leaves it alone although no document names it yet. A file a deleter has marked is never
    reused (a new copy is stored instead).

    A few round trips whatever the number of files (a whole project's modules): one update
    leasing the reusable files (atomic per file with a deleter's mark), one query for them,
    then the new files written as GridFS writes them (:func:`_put_files`).
    """
    data = [f.path.read_bytes() for f in files]
    digests = [hashlib.md5(d).hexdigest() for d in data]
    query: dict[str, Any] = {
        "filename": {"$in": sorted({f.rel_path for f in files})},
        "metadata.collection_name": collection_name,
        "metadata.batch_id": batch_id,
        "metadata.content_hash": {"$in": sorted(set(digests))},
        "metadata.type": "source_file",
        **_not_being_deleted(),
    }
    fs_files = db["fs.files"]
    if lease is not None:  # atomic with a deleter's mark (see delete_unused_files)
        fs_files.update_many(query, {"$push": {"metadata.leases": dict(lease)}})
        query = {**query, "metadata.leases.id": lease["id"]}
    existing: dict[tuple[str, str], Any] = {}
    for stored in fs_files.find(query, {"filename": 1, "metadata.content_hash": 1}):
        key = (stored["filename"], stored["metadata"]["content_hash"])
        existing.setdefault(key, stored["_id"])
    new = []
    out = []
    for f, content, digest in zip(files, data, digests):
        file_id = existing.get((f.rel_path, digest))
        if file_id is None:
            metadata = {
                "collection_name": collection_name,
                "batch_id": batch_id,
                "type": "source_file",
                "content_hash": digest,
            }
            if lease is not None:
                metadata["leases"] = [dict(lease)]
            file_id = _new_id()
            existing[(f.rel_path, digest)] = file_id
            new.append((file_id, f.rel_path, content, metadata))
        out.append([f.rel_path, file_id])
    _put_files(db, new)
    return out


def _new_id() -> Any:
    from bson import ObjectId

    return ObjectId()


#: GridFS's default chunk size (pymongo's ``DEFAULT_CHUNK_SIZE``), in bytes
_CHUNK_SIZE = 255 * 1024


def _put_files(db: Database, files: Sequence[tuple[Any, str, bytes, Mapping[str, Any]]]) -> None:
    """Write ``(id, filename, content, metadata)`` files into GridFS as ``GridFS.put`` writes
    each (the GridFS specification's layout: chunks of :data:`_CHUNK_SIZE` bytes in
    ``fs.chunks``, then the file's document in ``fs.files``, so a reader never sees a file
    whose chunks are not all there), in two bulk inserts instead of several round trips per
    file. The indexes GridFS keeps are made first (idempotent)."""
    if not files:
        return
    from bson import Binary

    db["fs.chunks"].create_index([("files_id", 1), ("n", 1)], unique=True)
    db["fs.files"].create_index([("filename", 1), ("uploadDate", 1)])
    chunks = [
        {"files_id": file_id, "n": n, "data": Binary(content[start : start + _CHUNK_SIZE])}
        for file_id, _, content, _ in files
        for n, start in enumerate(range(0, len(content), _CHUNK_SIZE))
    ]
    if chunks:
        db["fs.chunks"].insert_many(chunks, ordered=False)
    now = datetime.now(timezone.utc)
    db["fs.files"].insert_many(
        [
            {
                "_id": file_id,
                "filename": name,
                "length": len(content),
                "chunkSize": _CHUNK_SIZE,
                "uploadDate": now,
                "metadata": dict(metadata),
            }
            for file_id, name, content, metadata in files
        ],
        ordered=False,
    )


def put_manifest(
    db: Database,
    collection_name: str,
    batch_id: int,
    root: Path,
    source_files: Sequence[Sequence[Any]],
    lease: Mapping[str, Any] | None = None,
) -> Any:
    """Store a launch's snapshot file list once, as its manifest; returns the manifest's id,
    which each document names as ``seml.source_manifest``.

    The manifest is a GridFS file of no content whose ``metadata`` holds ``type``
    (:data:`MANIFEST_TYPE`), ``collection_name`` and ``batch_id`` (those of its files: SEML
    0.5.7's ``delete`` removes it with them), ``root`` (the project root at launch, a string:
    the job maps this folder's entries of ``sys.path`` onto the snapshot) and ``files``
    (``[[relative path, file id], ...]``), carrying ``lease`` as the files do. Raises pymongo
    errors."""
    metadata: dict[str, Any] = {
        "collection_name": collection_name,
        "batch_id": batch_id,
        "type": MANIFEST_TYPE,
        "root": str(root),
        "files": [[str(rel), file_id] for rel, file_id in source_files],
    }
    if lease is not None:
        metadata["leases"] = [dict(lease)]
    manifest_id = _new_id()
    _put_files(db, [(manifest_id, "seml-source-manifest", b"", metadata)])
    return manifest_id


def read_manifest(db: Database, manifest_id: Any) -> dict[str, Any] | None:
    """``{"root": str or None, "files": [[relative path, file id], ...]}`` of the manifest
    ``manifest_id`` (:func:`put_manifest`), or None when there is none with that id (deleted,
    or a forged id: one that is not an ObjectId, such as a query operator, finds none).
    Raises pymongo errors."""
    from bson import ObjectId

    if not isinstance(manifest_id, ObjectId):
        return None
    found = db["fs.files"].find_one(
        {"_id": manifest_id, "metadata.type": MANIFEST_TYPE},
        {"metadata.root": 1, "metadata.files": 1},
    )
    if found is None:
        return None
    metadata = found.get("metadata") or {}
    files = metadata.get("files")
    root = metadata.get("root")
    return {
        "root": root if isinstance(root, str) else None,
        "files": [list(e) for e in files if isinstance(e, list) and len(e) == 2]
        if isinstance(files, list)
        else [],
    }


def manifest_files(db: Database, query: Mapping[str, Any]) -> dict[str, list[str]]:
    """``{manifest id: [file id, ...]}`` (ids as strings) of the manifests matching ``query``
    (an ``fs.files`` filter, restricted to :data:`MANIFEST_TYPE`): what they keep in use.
    One query. Raises pymongo errors."""
    found = db["fs.files"].find(
        {"$and": [dict(query), {"metadata.type": MANIFEST_TYPE}]}, {"metadata.files": 1}
    )
    out = {}
    for m in found:
        files = (m.get("metadata") or {}).get("files")
        entries = files if isinstance(files, list) else []
        out[str(m["_id"])] = [str(e[1]) for e in entries if isinstance(e, list) and len(e) == 2]
    return out


# ------------------------------------------------------------------ GridFS files in use

#: a launch's lease on a GridFS file (a payload or snapshot file its documents will name)
#: protects it from ``delete``/``drop`` this long, in seconds, unless released earlier: a
#: launch that dies between upload and insert leaves a lease that expires
LEASE_S = 3600.0


def new_lease() -> dict[str, Any]:
    """A fresh lease ``{"id": random hex, "time": now (UTC)}`` for ``metadata.leases``."""
    return {"id": uuid.uuid4().hex, "time": datetime.now(timezone.utc)}


def release_lease(db: Database, lease_id: str) -> None:
    """Remove lease ``lease_id`` from every GridFS file (once the documents naming the files are
    stored, or the launch gave up)."""
    db["fs.files"].update_many(
        {"metadata.leases.id": lease_id}, {"$pull": {"metadata.leases": {"id": lease_id}}}
    )


def _stale_before() -> Any:
    return datetime.now(timezone.utc) - timedelta(seconds=LEASE_S)


def _not_being_deleted() -> dict[str, Any]:
    """``fs.files`` filter: no deleter's mark, or only a stale one (a deleter that died)."""
    return {
        "$or": [
            {"metadata.deleting": {"$exists": False}},
            {"metadata.deleting.time": {"$lt": _stale_before()}},
        ]
    }


def _unleased() -> dict[str, Any]:
    """``fs.files`` filter: no live lease (a launch staging it)."""
    return {"metadata.leases": {"$not": {"$elemMatch": {"time": {"$gt": _stale_before()}}}}}


def unused_files(
    db: Database, candidates: Mapping[str, Any], used: Callable[[], Iterable[str]]
) -> list[Any]:
    """The ids of the GridFS files :func:`delete_unused_files` would delete now (read only):
    those matching ``candidates`` without a live lease whose id is not in ``used()``."""
    in_use = {str(i) for i in used()}
    found = db["fs.files"].find({"$and": [dict(candidates), _unleased()]}, {"_id": 1})
    return [f["_id"] for f in found if str(f["_id"]) not in in_use]


def has_live_lease(db: Database, candidates: Mapping[str, Any]) -> bool:
    """Whether a file matching ``candidates`` carries a live lease (a launch is staging it)."""
    live = {"metadata.leases": {"$elemMatch": {"time": {"$gt": _stale_before()}}}}
    return db["fs.files"].find_one({"$and": [dict(candidates), live]}, {"_id": 1}) is not None


def delete_unused_files(
    db: Database, candidates: Mapping[str, Any], used: Callable[[], Iterable[str]]
) -> list[Any]:
    """Delete the GridFS files matching ``candidates`` (an ``fs.files`` filter) that no launch
    holds a live lease on and whose id is not in ``used()`` (the ids, as strings, documents
    still name). Returns the ids deleted.

    Closing the race with a launch reusing a file (:func:`upload_sources`): each candidate is
    first marked ``metadata.deleting`` by an update that requires no live lease (atomic per
    file); only then is ``used()`` asked, and only a file still carrying this call's mark is
    deleted. A launch leases a file in one atomic update that requires no mark. So either the
    launch's lease came first (the file is not marked, so kept), or the mark did (the launch
    stores a new copy), and a document inserted before the lease is released is seen by
    ``used()``. Files marked but still used are unmarked.

    Each step acts on every file at once (one ``update_many`` marks, one ``find`` reads the
    marks back, one ``delete_many`` each for the files and their chunks, one ``update_many``
    unmarks): a code snapshot of a few hundred files costs a handful of commands, not three per
    file (``delete`` of a launch's 325 snapshot files spent 0.36 s on them).
    """
    files = db["fs.files"]
    token = new_lease()  # this call's mark: an id and a time, like a lease
    unleased = _unleased()
    found = [f["_id"] for f in files.find({"$and": [dict(candidates), unleased]}, {"_id": 1})]
    if not found:
        return []
    listed = {"_id": {"$in": found}}
    files.update_many({"$and": [listed, unleased]}, {"$set": {"metadata.deleting": token}})
    mine = {"metadata.deleting.id": token["id"]}
    marked = [f["_id"] for f in files.find({**listed, **mine}, {"_id": 1})]
    if not marked:
        return []
    in_use = {str(i) for i in used()}
    kept = [f for f in marked if str(f) in in_use]
    gone = [f for f in marked if str(f) not in in_use]
    if kept:
        files.update_many({"_id": {"$in": kept}, **mine}, {"$unset": {"metadata.deleting": ""}})
    if not gone:
        return []
    if files.delete_many({"_id": {"$in": gone}, **mine}).deleted_count != len(gone):
        # (only a file whose mark another deleter replaced is left: that one deletes it)
        left = {f["_id"] for f in files.find({"_id": {"$in": gone}}, {"_id": 1})}
        gone = [f for f in gone if f not in left]
    if gone:
        db["fs.chunks"].delete_many({"files_id": {"$in": gone}})
    return gone


def chunks_abandoned(chunk_ids: Sequence[Any], before: datetime) -> bool:
    """Whether the chunks ``chunk_ids`` of a GridFS file that has no ``fs.files`` document
    were all written before ``before`` (an aware UTC datetime), so that no upload is still
    writing them (pure). GridFS writes a file's chunks first and its ``fs.files`` document
    last, so the chunks of an upload under way have no file yet; pymongo gives each chunk an
    ObjectId, whose time is when it was written. A chunk id that is not an ObjectId tells no
    time: kept (False)."""
    from bson import ObjectId

    if not chunk_ids or not all(isinstance(i, ObjectId) for i in chunk_ids):
        return False
    return bool(max(i.generation_time for i in chunk_ids) < before)


def orphan_chunks(db: Database, *, dry_run: bool, min_age_s: float = LEASE_S) -> dict[Any, int]:
    """The GridFS chunks whose file is gone (no ``fs.files`` document with their
    ``files_id``: a ``delete`` or ``clean-db`` killed between removing the file and its chunks)
    and that were all written more than ``min_age_s`` seconds ago (:func:`chunks_abandoned`;
    an upload under way, whose chunks precede its file document, writes a chunk at least every
    255 KB, so it is never that old; a launch's lease protects files as long, :data:`LEASE_S`).
    Removed unless ``dry_run``; the file is looked for again just before, and only chunks
    already seen are removed.

    Returns ``{files_id: number of chunks}`` found (and, unless ``dry_run``, removed). Reads
    the ``files_id`` index (``{files_id, n}``, which GridFS creates) and the orphans' chunk
    ids, not the chunks' data. Raises pymongo errors."""
    before = datetime.now(timezone.utc) - timedelta(seconds=min_age_s)
    files, chunks = db["fs.files"], db["fs.chunks"]
    pipeline: list[dict[str, Any]] = [
        {"$sort": {"files_id": 1}},
        {"$group": {"_id": "$files_id"}},
        {"$lookup": {"from": "fs.files", "localField": "_id", "foreignField": "_id", "as": "f"}},
        {"$match": {"f": {"$size": 0}}},
        {"$project": {"_id": 1}},
    ]
    found: dict[Any, int] = {}
    for orphan in list(chunks.aggregate(pipeline)):
        file_id = orphan["_id"]
        ids = [c["_id"] for c in chunks.find({"files_id": file_id}, {"_id": 1})]
        if not chunks_abandoned(ids, before):
            continue
        if not dry_run:
            if files.find_one({"_id": file_id}, {"_id": 1}) is not None:
                continue  # its upload finished meanwhile
            chunks.delete_many({"files_id": file_id, "_id": {"$in": ids}})
        found[file_id] = len(ids)
    return found
