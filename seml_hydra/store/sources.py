"""Code snapshots: jobs run the code as it was at launch (SEML 0.5's source files, in GridFS).

At staging, the app's own files - the Python modules it imported from under its project root
(not site-packages, not a virtualenv) and its Hydra config directory - are stored in GridFS once
per content hash and collection, and listed in each document as ``seml.source_files`` =
``[[relative path, file id], ...]`` (SEML's field, so ``seml <col> download-sources`` of SEML
0.5.7 reads them). On the node, each job writes the snapshot once per node into a directory it
creates inside this user's private runtime directory (mode 0700, checked with ``lstat``: nobody
else can plant a module there), puts it (and its ``src/``) first on ``sys.path``, runs from it,
and removes only that directory (and what killed jobs of this user left). (It imports from the
snapshot; its working directory stays Hydra's.)
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from seml_hydra.core.errors import UserError

#: files larger than this are not snapshotted (and reported), in KB
DEFAULT_MAX_FILE_KB = 1024
#: config files taken from the Hydra config directory
CONFIG_SUFFIXES = (".yaml", ".yml")
_PACKAGE_DIRS = ("site-packages", "dist-packages")


class SourceSnapshotError(UserError, RuntimeError):
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
    from seml_hydra.launch.gitinfo import git_toplevel

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
    db: Any,
    collection_name: str,
    batch_id: int,
    files: Sequence[SourceFile],
    lease: Mapping[str, Any] | None = None,
) -> list[list[Any]]:
    """Store ``files`` in GridFS, reusing a file of this collection and batch with the same path
    and content hash; returns ``seml.source_files`` (``[[relative path, ObjectId], ...]``).

    Metadata follows SEML 0.5 (``collection_name``, ``batch_id``, ``type: source_file``) plus
    ``content_hash`` (MD5 of the bytes) for the deduplication. A file is never reused across
    batches: SEML 0.5.7's ``delete`` removes a batch's files by ``metadata.batch_id`` once no
    document of that batch remains (``delete_orphaned_sources``), so every batch owns the files
    its documents name, as SEML's own do. With ``lease`` (from
    :func:`new_lease`) every file used, reused or new, carries it in ``metadata.leases`` until
    :func:`release_lease`: a concurrent ``delete``/``drop`` (:func:`delete_unused_files`) then
    leaves it alone although no document names it yet. A file a deleter has marked is never
    reused (a new copy is stored instead).
    """
    import gridfs

    fs = gridfs.GridFS(db)
    out = []
    for f in files:
        data = f.path.read_bytes()
        digest = hashlib.md5(data).hexdigest()
        query = {
            "filename": f.rel_path,
            "metadata.collection_name": collection_name,
            "metadata.batch_id": batch_id,
            "metadata.content_hash": digest,
            **_not_being_deleted(),
        }
        if lease is None:
            existing = db["fs.files"].find_one(query, {"_id": 1})
        else:  # atomic with a deleter's mark (see delete_unused_files)
            existing = db["fs.files"].find_one_and_update(
                query, {"$push": {"metadata.leases": dict(lease)}}, {"_id": 1}
            )
        if existing is not None:
            out.append([f.rel_path, existing["_id"]])
            continue
        metadata = {
            "collection_name": collection_name,
            "batch_id": batch_id,
            "type": "source_file",
            "content_hash": digest,
        }
        if lease is not None:
            metadata["leases"] = [dict(lease)]
        out.append([f.rel_path, fs.put(data, filename=f.rel_path, metadata=metadata)])
    return out


# ------------------------------------------------------------------ GridFS files in use

#: a launch's lease on a GridFS file (a payload or snapshot file its documents will name)
#: protects it from ``delete``/``drop`` this long, in seconds, unless released earlier: a
#: launch that dies between upload and insert leaves a lease that expires
LEASE_S = 3600.0


def new_lease() -> dict[str, Any]:
    """A fresh lease ``{"id": random hex, "time": now (UTC)}`` for ``metadata.leases``."""
    import uuid
    from datetime import datetime, timezone

    return {"id": uuid.uuid4().hex, "time": datetime.now(timezone.utc)}


def release_lease(db: Any, lease_id: str) -> None:
    """Remove lease ``lease_id`` from every GridFS file (once the documents naming the files are
    stored, or the launch gave up)."""
    db["fs.files"].update_many(
        {"metadata.leases.id": lease_id}, {"$pull": {"metadata.leases": {"id": lease_id}}}
    )


def _stale_before() -> Any:
    from datetime import datetime, timedelta, timezone

    return datetime.now(timezone.utc) - timedelta(seconds=LEASE_S)


def _not_being_deleted() -> dict[str, Any]:
    """``fs.files`` filter: no deleter's mark, or only a stale one (a deleter that died)."""
    return {
        "$or": [
            {"metadata.deleting": {"$exists": False}},
            {"metadata.deleting.time": {"$lt": _stale_before()}},
        ]
    }


def delete_unused_files(
    db: Any, candidates: Mapping[str, Any], used: Callable[[], Iterable[str]]
) -> list[Any]:
    """Delete the GridFS files matching ``candidates`` (an ``fs.files`` filter) that no launch
    holds a live lease on and whose id is not in ``used()`` (the ids, as strings, documents
    still name). Returns the ids deleted.

    Closing the race with a launch reusing a file (:func:`upload_sources`): each candidate is
    first marked ``metadata.deleting`` in one atomic update that requires no live lease; only
    then is ``used()`` asked, and only a file still carrying this call's mark is deleted. A
    launch leases a file in one atomic update that requires no mark. So either the launch's
    lease came first (the file is not marked, so kept), or the mark did (the launch stores a new
    copy), and a document inserted before the lease is released is seen by ``used()``. Files
    marked but still used are unmarked.
    """
    files = db["fs.files"]
    token = new_lease()  # this call's mark: an id and a time, like a lease
    unleased = {"metadata.leases": {"$not": {"$elemMatch": {"time": {"$gt": _stale_before()}}}}}
    marked = []
    for f in list(files.find({"$and": [dict(candidates), unleased]}, {"_id": 1})):
        mark = files.update_one(
            {"_id": f["_id"], **unleased}, {"$set": {"metadata.deleting": token}}
        )
        if mark.modified_count:
            marked.append(f["_id"])
    if not marked:
        return []
    in_use = {str(i) for i in used()}
    deleted = []
    for file_id in marked:
        mine = {"_id": file_id, "metadata.deleting.id": token["id"]}
        if str(file_id) in in_use:
            files.update_one(mine, {"$unset": {"metadata.deleting": ""}})
        elif files.delete_one(mine).deleted_count:
            db["fs.chunks"].delete_many({"files_id": file_id})
            deleted.append(file_id)
    return deleted


def read_sources(
    db: Any, source_files: Sequence[Sequence[Any]], target: Path
) -> list[tuple[Path, bytes]]:
    """The files of a snapshot (``seml.source_files``) as ``(path under target, content)``.

    Each path is ``target`` (resolved) joined with the snapshot's relative path, without
    following any symbolic link under ``target`` (:func:`write_sources` refuses or replaces
    them).

    Raises :class:`SourceSnapshotError` when a file is missing from GridFS or a path would
    leave ``target`` (absolute, ``..``, empty).
    """
    target = Path(target).resolve()
    paths = []
    for rel_path, file_id in source_files:
        parts = [p for p in PurePosixPath(str(rel_path)).parts if p != "."]
        if (
            not parts
            or PurePosixPath(str(rel_path)).is_absolute()
            or ".." in parts
            or "\x00" in str(rel_path)
        ):
            raise SourceSnapshotError(f"source file path {rel_path!r} leaves {target}")
        paths.append((rel_path, file_id, target.joinpath(*parts)))
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

    Safe in a directory other users can write (:func:`_write_under`): nothing under ``target``
    is followed if it is a symbolic link. A file that is a link is replaced by the snapshot's
    file (the link itself, not what it points to); a directory that is a link is refused; the
    temporary file gets a random name and is created exclusively (``O_EXCL | O_NOFOLLOW``), so
    a link planted at a guessed name is never written through.

    Raises :class:`SourceSnapshotError` as :func:`read_sources`, and when a directory of a
    file under ``target`` is a symbolic link or not a directory, or a file cannot be written.
    """
    files = read_sources(db, source_files, target)
    root = Path(target).resolve()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    written = []
    for path, data in files:
        try:
            if _write_under(root, path.relative_to(root).parts, data):
                written.append(path)
        except OSError as error:
            raise SourceSnapshotError(f"cannot write {path}: {error.strerror or error}") from None
    return written


def _write_under(root: Path, parts: Sequence[str], data: bytes) -> bool:
    """Write ``data`` to ``root/<parts>`` unless it is already there; returns whether it wrote.

    Each directory below ``root`` is created (mode 0700) or opened with ``O_NOFOLLOW`` from its
    parent's descriptor, so a directory swapped for a symbolic link is never entered, even
    between a check and the write. The file is written to a new temporary file in the same
    directory (random name, ``O_CREAT | O_EXCL | O_NOFOLLOW``, mode 0666 less the umask, as a
    plain write) and renamed over the file name (``os.replace``: a link there is replaced).

    Raises :class:`SourceSnapshotError` for a directory that is a link or not a directory;
    ``OSError`` when writing fails.
    """
    import errno
    import secrets

    *dirs, leaf = parts
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(dirs):
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o700, dir_fd=fd)
            try:
                sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as error:
                if error.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                where = root.joinpath(*dirs[: i + 1])
                raise SourceSnapshotError(
                    f"{where} is a symbolic link or not a directory: refusing to write the "
                    "snapshot through it; remove it (or choose another target) and try again"
                ) from None
            os.close(fd)
            fd = sub
        if _same_content(fd, leaf, data):
            return False
        tmp = f".{leaf}.{secrets.token_hex(8)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        out = os.open(tmp, flags, 0o666, dir_fd=fd)
        try:
            with os.fdopen(out, "wb") as stream:
                stream.write(data)
            os.replace(tmp, leaf, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
            raise
        return True
    finally:
        os.close(fd)


def _same_content(dir_fd: int, name: str, data: bytes) -> bool:
    """Whether ``name`` in the directory ``dir_fd`` is a regular file (not a link) holding
    ``data``."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as stream:
        import stat

        if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
            return False
        return stream.read(len(data) + 1) == data


def foreign_files(db: Any, source_files: Sequence[Sequence[Any]], target: Path) -> list[Path]:
    """The files in ``target`` that are not the snapshot's: not in it, with other content, or
    symbolic links (what writing the snapshot there would mix with or overwrite). Raises as
    :func:`read_sources`."""
    target = Path(target).resolve()
    if not target.is_dir():
        return []
    snapshot = dict(read_sources(db, source_files, target))
    return sorted(
        path
        for path in target.rglob("*")
        if path.is_symlink() or (path.is_file() and snapshot.get(path) != path.read_bytes())
    )


# ----------------------------------------------------------------------- on the node

#: seconds a rank waits for its node's snapshot lock before failing (the first rank of the
#: node holds it while it writes the snapshot from GridFS)
LOCK_TIMEOUT_S = 300.0
#: name prefix of the snapshot files in the private runtime directory
SNAPSHOT_PREFIX = "src-"


def _safe_name(text: str) -> str:
    """``text`` with every character outside ``[A-Za-z0-9._]`` replaced by ``_`` (a file name
    part without separators; ``-`` separates the parts of a snapshot name)."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "._") else "_" for c in text)


def process_alive(pid: int, start: str | None) -> bool:
    """True when process ``pid`` runs and, if ``start`` is given and ``/proc`` tells, is the
    process that had that start time (``seml_hydra.launch.submit.process_start``), not a later one
    with a wrapped pid."""
    from seml_hydra.launch.submit import process_start

    now = process_start(pid)
    if now is None:
        return False
    return start is None or now == "" or now == start


def live_users(users: Any) -> list[list[Any]]:
    """The entries ``[pid, start]`` of a snapshot registry whose process still runs
    (:func:`process_alive`); malformed entries are dropped."""
    out = []
    for entry in users if isinstance(users, list) else []:
        if (
            isinstance(entry, list)
            and len(entry) == 2
            and isinstance(entry[0], int)
            and isinstance(entry[1], (str, type(None)))
            and process_alive(entry[0], entry[1])
        ):
            out.append(entry)
    return out


def _read_registry(path: Path, stem: str) -> dict[str, Any] | None:
    """The registry ``{"dir": name, "users": [[pid, start], ...]}`` of a snapshot, or ``None``
    when absent or not well formed (a ``dir`` must be ``<stem>-<token>``, a plain name)."""
    import json

    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict):
        return None
    name = state.get("dir")
    if not isinstance(name, str) or "/" in name or not name.startswith(f"{stem}-"):
        return None
    return {"dir": name, "users": live_users(state.get("users"))}


def _write_registry(path: Path, directory: str, users: list[list[Any]]) -> None:
    import json

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"dir": directory, "users": users}))
    os.replace(tmp, path)


def _snapshot_dirs(base: Path, stem: str) -> list[Path]:
    return [p for p in base.glob(f"{stem}-*") if p.name.rsplit("-", 1)[0] == stem]


def _clean_stem(base: Path, stem: str, keep: str | None) -> None:
    """Under the lock of ``stem`` (held by the caller): remove its snapshot directories other
    than ``keep``; when ``keep`` is ``None`` its registry too."""
    import shutil

    for path in _snapshot_dirs(base, stem):
        if path.name != keep:
            shutil.rmtree(path, ignore_errors=True)
    if keep is None:
        (base / f"{stem}.json").unlink(missing_ok=True)


def remove_stale_snapshots(base: Path, host: str, *, skip: str = "") -> list[str]:
    """Remove what killed jobs left in ``base`` for this ``host``: for each snapshot name
    (``src-<job key>-<host>``) whose lock is free and whose registry lists no running process
    (:func:`live_users`), its directories, registry and lock file; for one still in use, its
    directories the registry does not name (a rank killed while writing one). ``skip`` is left
    alone (the caller's own). Names of other hosts are never touched (their processes cannot
    be checked from here). Returns the names cleaned."""
    from filelock import FileLock, Timeout

    suffix = f"-{_safe_name(host)}"
    stems = set()
    for path in base.glob(f"{SNAPSHOT_PREFIX}*"):
        name = path.name
        stem = name[: -len(".json")] if name.endswith(".json") else name
        stem = stem[: -len(".lock")] if stem.endswith(".lock") else stem
        if path.is_dir() and not path.is_symlink():
            stem = name.rsplit("-", 1)[0]
        if stem.endswith(suffix) and stem != skip:
            stems.add(stem)
    cleaned = []
    for stem in sorted(stems):
        lock_path = base / f"{stem}.lock"
        lock = FileLock(str(lock_path))
        try:
            lock.acquire(timeout=0)
        except (Timeout, OSError):  # a rank of that job is at work on it now
            continue
        try:
            state = _read_registry(base / f"{stem}.json", stem)
            alive = state is not None and bool(state["users"])
            _clean_stem(base, stem, state["dir"] if alive else None)  # type: ignore[index]
            if not alive:
                lock_path.unlink(missing_ok=True)
                cleaned.append(stem)
        finally:
            lock.release()
    return cleaned


def snapshot_base() -> Path:
    """The private directory the snapshots of this user live in: the per-user runtime
    directory (``seml_hydra.store.tunnel.runtime_dir``: mode 0700, checked with ``lstat`` to be a
    directory of this user that nobody else can write). When another user took the usual
    name first (``<tmp>/seml-hydra-<uid>``), that one warns and uses a directory under the
    home, else a fresh one of this process: nothing is imported from the taken one.

    Raises :class:`SourceSnapshotError` when no private directory can be made, or
    ``$SEML_HYDRA_RUNTIME_DIR`` names one that is not private (another user made it, it is
    open to others, or it is a symlink): nothing is imported from it.
    """
    from seml_hydra.store.tunnel import RuntimeDirError, runtime_dir

    try:
        return runtime_dir()
    except RuntimeDirError as error:
        raise SourceSnapshotError(
            f"no private place for the code snapshot on node {os.uname().nodename}: {error}"
        ) from None


@contextlib.contextmanager
def materialized(db: Any, source_files: Sequence[Sequence[Any]], job_key: str) -> Iterator[Path]:
    """Run inside the snapshot: once per node per job, in a private directory this job creates.

    Everything lives in this user's private runtime directory (:func:`snapshot_base`), named
    ``src-<job_key>-<host>`` (``job_key`` = ``<cluster>_<array>_<task>``): the lock
    (``.lock``), the registry of the ranks using the snapshot (``.json``: its directory and
    the ``[pid, start time]`` of each rank) and the snapshot directory
    ``src-<job_key>-<host>-<random token>`` (mode 0700). Under the lock (at most
    :data:`LOCK_TIMEOUT_S` seconds), the first rank of the job on this node - the first one
    that finds no running process in the registry - removes what an earlier, killed job of the
    same key left (a requeued task, or a local job whose process id wrapped) and writes a new
    directory; the other ranks reuse the directory the registry names; the last one to leave
    removes it. Creating a directory also removes the leftovers of this host's other killed
    jobs (:func:`remove_stale_snapshots`).

    Before anything is imported, the base and the snapshot directory are checked with
    ``lstat`` (this user's, not open to others, not symlinks); then the directory and its
    ``src/`` come first on ``sys.path``. The working directory stays what Hydra makes it (the
    launch directory, or the output directory with ``hydra.job.chdir=true``): SEML runs from
    its temporary copy, but a Hydra app's relative paths (data, caches) mean the launch
    directory, and those files are not in the snapshot anyway.

    Raises :class:`SourceSnapshotError` when the node has no private place for it, the lock is
    not free within :data:`LOCK_TIMEOUT_S`, or the directory cannot be created or filled.
    """
    import secrets
    import shutil
    import socket

    from filelock import FileLock, Timeout

    from seml_hydra.store.database import retrying
    from seml_hydra.store.tunnel import private_dir_problem

    base = snapshot_base()
    host = socket.gethostname()
    stem = f"{SNAPSHOT_PREFIX}{_safe_name(job_key)}-{_safe_name(host)}"
    registry = base / f"{stem}.json"
    lock = FileLock(str(base / f"{stem}.lock"), timeout=LOCK_TIMEOUT_S)
    from seml_hydra.launch.submit import process_start

    me = [os.getpid(), process_start(os.getpid())]
    created = False
    directory = base / stem
    try:
        with lock:
            state = _read_registry(registry, stem)
            if state is not None and state["users"] and (base / state["dir"]).is_dir():
                directory = base / state["dir"]
                users = [*state["users"], me]
            else:  # nobody runs from a snapshot of this key: whatever is there is stale
                # (or it was removed under its users, by a cleaner of old temporary files)
                _clean_stem(base, stem, None)
                directory = base / f"{stem}-{secrets.token_hex(8)}"
                directory.mkdir(mode=0o700)
                created = True
                try:
                    # rewriting the files is harmless: retried while MongoDB is unreachable
                    retrying(
                        lambda: write_sources(db, source_files, directory),
                        "writing the code snapshot",
                    )
                except BaseException:
                    shutil.rmtree(directory, ignore_errors=True)
                    raise
                users = [me]
            _write_registry(registry, directory.name, users)
    except Timeout:
        raise SourceSnapshotError(
            f"the code snapshot lock {lock.lock_file} on node {os.uname().nodename} stayed "
            f"held for {LOCK_TIMEOUT_S:.0f} s: another rank of this job is stuck writing the "
            "snapshot. Cancel the job and start it again."
        ) from None
    except OSError as error:
        raise SourceSnapshotError(
            f"cannot create the code snapshot directory {directory} on node "
            f"{os.uname().nodename}: {error}. Free space in {base} or set TMPDIR."
        ) from None
    if created:
        remove_stale_snapshots(base, host, skip=stem)
    problem = private_dir_problem(base) or private_dir_problem(directory)
    if problem:  # changed since it was checked: only root could have done that
        raise SourceSnapshotError(
            f"the code snapshot directory {directory} {problem}: not importing from it."
        )
    added = [str(directory / "src"), str(directory)]
    sys.path[:0] = added
    try:
        yield directory
    finally:
        for entry in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(entry)
        _leave(lock, registry, stem, directory, me)


def _leave(lock: Any, registry: Path, stem: str, directory: Path, me: list[Any]) -> None:
    """Take this rank out of the registry; the last rank removes the directory. A lock that
    stays held only leaves the directory behind (removed by a later job,
    :func:`remove_stale_snapshots`)."""
    import shutil

    from filelock import Timeout

    try:
        with lock:
            state = _read_registry(registry, stem)
            if state is None or state["dir"] != directory.name:  # no rank can be using it
                shutil.rmtree(directory, ignore_errors=True)
                return
            users = state["users"]
            if me in users:
                users.remove(me)
            if users:
                _write_registry(registry, directory.name, users)
            else:
                shutil.rmtree(directory, ignore_errors=True)
                registry.unlink(missing_ok=True)
    except (Timeout, OSError) as error:
        import logging

        logging.getLogger(__name__).warning(
            "Could not remove the code snapshot %s (%s); a later job removes it.",
            directory,
            error,
        )
