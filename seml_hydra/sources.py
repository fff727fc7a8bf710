"""Code snapshots: jobs run the code as it was at launch (SEML 0.5's source files, in GridFS).

At staging, the app's own files - the Python modules it imported from under its project root
(not site-packages, not a virtualenv) and its Hydra config directory - are stored in GridFS once
per content hash and collection, and listed in each document as ``seml.source_files`` =
``[[relative path, file id], ...]`` (SEML's field, so ``seml <col> download-sources`` of SEML
0.5.7 reads them). On the node, each job writes the snapshot once per node into a temporary
directory it creates, puts it (and its ``src/``) first on ``sys.path``, runs from it, and removes
only that directory. (It imports from the snapshot; its working directory stays Hydra's.)
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: files larger than this are not snapshotted (and reported), in KB
DEFAULT_MAX_FILE_KB = 1024
#: config files taken from the Hydra config directory
CONFIG_SUFFIXES = (".yaml", ".yml")
_PACKAGE_DIRS = ("site-packages", "dist-packages")


class SourceSnapshotError(RuntimeError):
    """The snapshot cannot be stored or written; the message says where and why."""


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
    from .gitinfo import git_toplevel

    top = git_toplevel(app_dir)
    return Path(top).resolve() if top else Path(app_dir).resolve()


def _inside_venv(path: Path, root: Path) -> bool:
    """True when a directory between ``root`` and ``path`` is a virtualenv (has pyvenv.cfg)."""
    for parent in path.parents:
        if parent == root:
            return False
        if (parent / "pyvenv.cfg").exists():
            return True
    return False


def is_project_file(path: str | Path, root: Path) -> bool:
    """``path`` is under ``root`` and not part of an installed package or a virtualenv."""
    p = Path(path).resolve()
    if root not in p.parents:
        return False
    rel_parts = p.relative_to(root).parts
    if any(part in _PACKAGE_DIRS for part in rel_parts):
        return False
    return not _inside_venv(p, root)


def select_sources(
    module_files: Iterable[str],
    config_dirs: Iterable[str | Path],
    root: Path,
    max_file_kb: int = DEFAULT_MAX_FILE_KB,
) -> tuple[list[SourceFile], list[tuple[str, str]]]:
    """Choose the files of a snapshot.

    Args:
        module_files: ``__file__`` of the imported modules (``sys.modules``).
        config_dirs: the app's Hydra config directories; their YAML files are taken.
        root: the project root.
        max_file_kb: size cap per file in KB.

    Returns ``(files, skipped)``: files sorted by relative path, and ``(path, reason)`` of what
    was left out for its size. Only imported modules (``.py``) and config files are considered,
    so data, checkpoints and binaries in the project are never swept in.
    """
    candidates: set[Path] = set()
    for name in module_files:
        if name and name.endswith(".py") and is_project_file(name, root):
            candidates.add(Path(name).resolve())
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
    db: Any, collection_name: str, batch_id: int, files: Sequence[SourceFile]
) -> list[list[Any]]:
    """Store ``files`` in GridFS, reusing a file of this collection with the same path and
    content hash; returns ``seml.source_files`` (``[[relative path, ObjectId], ...]``).

    Metadata follows SEML 0.5 (``collection_name``, ``batch_id``, ``type: source_file``) plus
    ``content_hash`` (MD5 of the bytes) for the deduplication.
    """
    import gridfs

    fs = gridfs.GridFS(db)
    out = []
    for f in files:
        data = f.path.read_bytes()
        digest = hashlib.md5(data).hexdigest()
        existing = db["fs.files"].find_one(
            {
                "filename": f.rel_path,
                "metadata.collection_name": collection_name,
                "metadata.content_hash": digest,
            },
            {"_id": 1},
        )
        if existing is not None:
            out.append([f.rel_path, existing["_id"]])
            continue
        file_id = fs.put(
            data,
            filename=f.rel_path,
            metadata={
                "collection_name": collection_name,
                "batch_id": batch_id,
                "type": "source_file",
                "content_hash": digest,
            },
        )
        out.append([f.rel_path, file_id])
    return out


def read_sources(
    db: Any, source_files: Sequence[Sequence[Any]], target: Path
) -> list[tuple[Path, bytes]]:
    """The files of a snapshot (``seml.source_files``) as ``(path under target, content)``.

    Raises :class:`SourceSnapshotError` when a file is missing from GridFS or a path would
    leave ``target``.
    """
    target = Path(target).resolve()
    paths = []
    for rel_path, file_id in source_files:
        path = (target / rel_path).resolve()
        if target not in path.parents:
            raise SourceSnapshotError(f"source file path {rel_path!r} leaves {target}")
        paths.append((rel_path, file_id, path))
    contents = _gridfs_contents(db, [file_id for _, file_id, _ in paths])
    out = []
    for rel_path, file_id, path in paths:
        if file_id not in contents:
            raise SourceSnapshotError(f"source file {rel_path} ({file_id}) is not in GridFS")
        out.append((path, contents[file_id]))
    return out


def _gridfs_contents(db: Any, file_ids: Sequence[Any]) -> dict[Any, bytes]:
    """``{file id: content}`` of the complete GridFS files among ``file_ids``, in two queries
    whatever their number (``fs.files`` lengths, then ``fs.chunks`` in ``(files_id, n)`` order,
    the index GridFS keeps; the layout is the GridFS specification's). A file whose chunks do
    not add up to its length is left out, as one that does not exist."""
    ids = list(dict.fromkeys(file_ids))
    lengths = {f["_id"]: f["length"] for f in db["fs.files"].find({"_id": {"$in": ids}})}
    parts: dict[Any, list[bytes]] = {i: [] for i in lengths}
    chunks = (
        db["fs.chunks"].find({"files_id": {"$in": list(lengths)}}).sort([("files_id", 1), ("n", 1)])
    )
    for chunk in chunks:
        parts[chunk["files_id"]].append(bytes(chunk["data"]))
    contents = {i: b"".join(p) for i, p in parts.items()}
    return {i: data for i, data in contents.items() if len(data) == lengths[i]}


def write_sources(db: Any, source_files: Sequence[Sequence[Any]], target: Path) -> list[Path]:
    """Write a snapshot (``seml.source_files``) into ``target``; returns the paths written.

    Safe to run again: a file already there with the snapshot's content is left as it is, and
    each file is written under a temporary name and then renamed, so an interrupted write leaves
    no partial file and writing again writes only what is missing or different.

    Raises :class:`SourceSnapshotError` as :func:`read_sources`.
    """
    written = []
    for path, data in read_sources(db, source_files, target):
        if path.is_file() and path.read_bytes() == data:
            continue
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        written.append(path)
    return written


def foreign_files(db: Any, source_files: Sequence[Sequence[Any]], target: Path) -> list[Path]:
    """The files in ``target`` that are not the snapshot's: not in it, or with other content
    (what writing the snapshot there would mix with or overwrite). Raises as
    :func:`read_sources`."""
    target = Path(target)
    if not target.is_dir():
        return []
    snapshot = dict(read_sources(db, source_files, target))
    return sorted(
        path
        for path in target.rglob("*")
        if path.is_file() and snapshot.get(path.resolve()) != path.read_bytes()
    )


@contextlib.contextmanager
def materialized(db: Any, source_files: Sequence[Sequence[Any]], job_key: str) -> Iterator[Path]:
    """Run inside the snapshot: once per node per job, in a directory this job creates.

    The directory ``<tmp>/seml_hydra_src_<job_key>`` is created by the first rank of the job on
    this node (``job_key`` = ``<array>_<task>``) under a file lock; the other ranks of that node
    reuse it, and the last one to leave removes it (a reference count under the lock). It and
    its ``src/`` come first on ``sys.path``. The working directory stays what Hydra makes it
    (the launch directory, or the output directory with ``hydra.job.chdir=true``): SEML runs
    from its temporary copy, but a Hydra app's relative paths (data, caches) mean the launch
    directory, and those files are not in the snapshot anyway.

    Raises :class:`SourceSnapshotError` when the node cannot create or fill the directory.
    """
    import shutil

    from filelock import FileLock

    from .database import retrying

    base = Path(tempfile.gettempdir())
    directory = base / f"seml_hydra_src_{job_key}"
    lock = FileLock(str(base / f".seml_hydra_src_{job_key}.lock"))
    count_file = base / f".seml_hydra_src_{job_key}.users"
    try:
        with lock:
            users = int(count_file.read_text()) if count_file.exists() else 0
            if users == 0:
                if directory.exists():  # a crashed earlier attempt of this job: ours to redo
                    shutil.rmtree(directory)
                directory.mkdir(mode=0o700)
                # rewriting the files is harmless: retried while MongoDB is unreachable
                retrying(
                    lambda: write_sources(db, source_files, directory),
                    "writing the code snapshot",
                )
            count_file.write_text(str(users + 1))
    except OSError as error:
        raise SourceSnapshotError(
            f"cannot create the code snapshot directory {directory} on node "
            f"{os.uname().nodename}: {error}. Free space in {base} or set TMPDIR."
        ) from None
    added = [str(directory / "src"), str(directory)]
    sys.path[:0] = added
    try:
        yield directory
    finally:
        for entry in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(entry)
        with lock:
            users = int(count_file.read_text()) - 1 if count_file.exists() else 0
            if users <= 0:
                shutil.rmtree(directory, ignore_errors=True)
                count_file.unlink(missing_ok=True)
            else:
                count_file.write_text(str(users))
