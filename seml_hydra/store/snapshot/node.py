"""Code snapshots, the node side: find a document's snapshot (its launch's manifest, or the
list older documents carry: :func:`load_snapshot`; stored by :mod:`seml_hydra.store.snapshot.sources`),
write it into a directory, and run a job inside it.

On the node, each job writes the snapshot once per node into a directory it creates inside this
user's private runtime directory (mode 0700, checked with ``lstat``: nobody else can plant a
module there), puts it (and its ``src/``) first on ``sys.path``, maps every other entry of
``sys.path`` inside the live project onto the snapshot and runs from it; the last task to
leave keeps it for :data:`KEEP_S` seconds for the next tasks of the same code, and a later job
removes it and what killed jobs of this user left (:func:`materialized`). (It imports from
the snapshot; its working directory stays Hydra's.) ``seml <col> restore-sources`` writes a
snapshot with :func:`write_sources`, which checks every path component (a target others can write);
a job writes into the directory it has just made with :func:`write_new_tree`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import secrets
import shutil
import socket
import stat
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from seml_hydra.core.errors import UserError
from seml_hydra.core.processes import process_alive, process_start
from seml_hydra.store.db.retry import retrying
from seml_hydra.store.server.tunnel import RuntimeDirError, private_dir_problem, runtime_dir
from seml_hydra.store.snapshot.bytecode import CACHE_DIR, restore_bytecode, store_bytecode
from seml_hydra.store.snapshot.sources import is_project_file, read_manifest

if TYPE_CHECKING:
    from seml_hydra.core.schema import Database

log = logging.getLogger(__name__)


class SourceSnapshotError(UserError, RuntimeError):
    """The snapshot cannot be stored or written; the message says where and why."""


@dataclass(frozen=True)
class Snapshot:
    """A document's code snapshot: ``files`` (``[[relative path, GridFS id], ...]``) and
    ``root``, the project root at launch (a string; None for documents older than manifests
    when it cannot be told)."""

    files: list[list[Any]]
    root: str | None


def load_snapshot(db: Database, seml: Mapping[str, Any]) -> Snapshot | None:
    """The code snapshot a document's ``seml`` block names: its launch's manifest
    (``seml.source_manifest``, ``store.snapshot.sources.read_manifest``), else the list documents of
    earlier versions carry (``seml.source_files``; the root then from ``seml.executable`` and
    ``seml.main_file``, when it has them). None when it names none (``snapshot=false``).

    Raises :class:`SourceSnapshotError` when the manifest it names is gone; pymongo errors."""
    manifest_id = seml.get("source_manifest")
    if manifest_id is not None:
        manifest = read_manifest(db, manifest_id)
        if manifest is None:
            raise SourceSnapshotError(
                f"the code snapshot's manifest {manifest_id} is not in GridFS (deleted, or the "
                "document was edited): stage the experiment again"
            )
        return Snapshot(manifest["files"], manifest["root"])
    files = seml.get("source_files")
    if not files:
        return None
    return Snapshot([list(e) for e in files], legacy_root(seml))


def legacy_root(seml: Mapping[str, Any]) -> str | None:
    """The project root of a document without a manifest (pure): ``seml.executable`` less its
    path in the snapshot, ``seml.main_file`` (``/p/sub/app.py`` less ``sub/app.py``), or None
    when they do not say it."""
    executable, main_file = seml.get("executable"), seml.get("main_file")
    if not isinstance(executable, str) or not isinstance(main_file, str):
        return None
    exe, rel = PurePosixPath(executable), PurePosixPath(main_file)
    if (
        rel.is_absolute()
        or len(exe.parts) <= len(rel.parts)
        or exe.parts[-len(rel.parts) :] != rel.parts
    ):
        return None
    return str(PurePosixPath(*exe.parts[: -len(rel.parts)]))


def snapshot_path(
    entries: Sequence[str],
    live_root: str | None,
    directory: Path,
    cwd: str,
    interpreter: Sequence[str] = (sys.prefix, sys.base_prefix),
) -> list[str]:
    """``sys.path`` ``entries`` with every entry inside the live project ``live_root`` (the
    root itself or a folder under it; ``""`` is ``cwd``) replaced by the same folder in the
    snapshot ``directory``: the launch folder, the script's folder, ``PYTHONPATH`` and the
    paths an editable install of the project adds all import the launch-time files, never the
    live tree. Kept as they are: entries elsewhere, those of installed packages and
    virtualenvs under the root (``store.snapshot.sources.is_project_file``) and those under the
    ``interpreter``'s prefixes (its standard library and environment, whatever root a forged
    manifest names); nothing is replaced without ``live_root``. Reads the file system only to
    tell virtualenvs."""
    if not live_root:
        return list(entries)
    root = Path(os.path.realpath(live_root))
    prefixes = [Path(os.path.realpath(p)) for p in interpreter]
    out = []
    for entry in entries:
        path = Path(os.path.realpath(os.path.join(cwd, entry) if entry else cwd))
        inside = path == root or is_project_file(path / "x", root)
        if inside and not any(p == path or p in path.parents for p in prefixes):
            out.append(str(directory.joinpath(*path.relative_to(root).parts)))
        else:
            out.append(entry)
    return out


def imported_files(
    files: Sequence[Sequence[Any]], directory: Path, module_files: Sequence[str]
) -> list[list[Any]]:
    """The entries of a snapshot's ``files`` (``[[relative path, GridFS id], ...]``) written
    into ``directory`` whose file is one of ``module_files`` (``__file__`` of the loaded
    modules), in the snapshot's order: what Sacred's default source discovery (``imported``)
    lists as a run's ``experiment.sources``, the source files of the modules loaded when the
    run starts (pure but for resolving links in the paths). Only module files under
    ``directory`` (as given or resolved) are resolved: the snapshot's modules are imported
    through the ``sys.path`` entries :func:`materialized` puts there, and resolving every
    loaded module's path (~700 in a Hydra job) cost ~28 ms of the task's CPU."""
    base = os.path.realpath(directory)
    inside = (os.path.join(str(directory), ""), os.path.join(base, ""))
    loaded = {os.path.realpath(name) for name in module_files if name and name.startswith(inside)}
    return [
        [str(rel), file_id]
        for rel, file_id in files
        if os.path.join(base, *PurePosixPath(str(rel)).parts) in loaded
    ]


def read_sources(
    db: Database, source_files: Sequence[Sequence[Any]], target: Path
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
    contents = gridfs_contents(db, [file_id for _, file_id, _ in paths])
    out = []
    for rel_path, file_id, path in paths:
        if file_id not in contents:
            raise SourceSnapshotError(f"source file {rel_path} ({file_id}) is not in GridFS")
        out.append((path, contents[file_id]))
    return out


def gridfs_contents(db: Database, file_ids: Sequence[Any]) -> dict[Any, bytes]:
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


def write_sources(db: Database, source_files: Sequence[Sequence[Any]], target: Path) -> list[Path]:
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


def write_new_tree(files: Sequence[tuple[Path, bytes]]) -> None:
    """Write ``files`` (:func:`read_sources`' ``(path, content)`` pairs) into the directory
    :func:`materialized` has just created for them (mode 0700 in the private runtime
    directory, so no other user can add anything under it): missing folders made (mode 0700),
    each file created exclusively (``O_CREAT | O_EXCL | O_NOFOLLOW``, mode 0666 less the umask)
    and written once. About 5 times cheaper than :func:`write_sources`' checked writes
    (7 vs 35 ms of CPU for a snapshot of 331 files), which a target other users can write
    needs. Raises ``OSError`` when a file cannot be written or is there already."""
    made: set[str] = set()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for path, data in files:
        _private_folders(os.path.dirname(path), made)
        with os.fdopen(os.open(path, flags, 0o666), "wb") as stream:
            stream.write(data)


def _private_folders(folder: str, made: set[str]) -> None:
    """Make ``folder`` and its missing parents, each with mode 0700 (``os.makedirs`` gives
    the parents the default mode); ``made``: the folders known to exist, added to."""
    if folder in made:
        return
    if not os.path.isdir(folder):
        _private_folders(os.path.dirname(folder), made)
        os.mkdir(folder, 0o700)
    made.add(folder)


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
        if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
            return False
        return stream.read(len(data) + 1) == data


def foreign_files(db: Database, source_files: Sequence[Sequence[Any]], target: Path) -> list[Path]:
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
#: seconds between a waiting rank's tries of that lock: the node's other tasks of a batch
#: start at once and wait while the first writes the snapshot (tens of ms); filelock's own
#: 0.05 s would keep each of them up to that long after the lock is free
LOCK_POLL_S = 0.005
#: seconds a node keeps a snapshot directory after its last task left it cleanly, for the
#: next tasks of the same code to run from without writing it again: the next wave of an
#: array, a requeued or restarted task of the same batch (equal files, equal key; a later
#: launch stores its own copies of the files: another key). Writing a snapshot again right
#: after deleting one cost ~0.3 s of CPU for ~330 files on an ext4 ``/tmp`` mounted with
#: ``discard`` (7 ms on tmpfs); removed by the next job on the node that comes after this
#: long (:func:`remove_stale_snapshots`)
KEEP_S = 600.0
#: name prefix of the snapshot files in the private runtime directory
SNAPSHOT_PREFIX = "src-"


def _safe_name(text: str) -> str:
    """``text`` with every character outside ``[A-Za-z0-9._]`` replaced by ``_`` (a file name
    part without separators; ``-`` separates the parts of a snapshot name)."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "._") else "_" for c in text)


def live_users(users: Any) -> list[list[Any]]:
    """The entries ``[pid, start]`` of a snapshot registry whose process still runs
    (:func:`seml_hydra.core.processes.process_alive`); malformed entries are dropped."""
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
    """The registry ``{"dir": name, "users": [[pid, start], ...], "left": time, "written":
    time}`` of a snapshot (``users``: those still running, :func:`live_users`; ``left``: when
    its last user left it cleanly; ``written``: when its files were all written; each a
    ``time.time()``, else None, as for one that is no number or too large for a float), or
    ``None`` when absent or not well formed (a ``dir`` must be ``<stem>-<token>``, a plain
    name)."""
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict):
        return None
    name = state.get("dir")
    if not isinstance(name, str) or "/" in name or not name.startswith(f"{stem}-"):
        return None
    left, written = (_time_field(state.get(key)) for key in ("left", "written"))
    return {"dir": name, "users": live_users(state.get("users")), "left": left, "written": written}


def _time_field(value: Any) -> float | None:
    """A registry's time field as a float, or None for one that is no number (a bool) or an
    integer too large for a float."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer no float holds
        return None


def _kept(state: dict[str, Any] | None, now: float) -> bool:
    """Whether a snapshot's directory (registry ``state``) is in use or was left cleanly less
    than :data:`KEEP_S` seconds before ``now`` (pure). A ``left`` after ``now`` (the clock
    stepped back, an infinite or garbage value) does not keep it: it would be kept forever."""
    if state is None:
        return False
    return bool(state["users"]) or (state["left"] is not None and 0 <= now - state["left"] < KEEP_S)


def _complete(
    directory: Path, source_files: Sequence[Sequence[Any]], written: float | None
) -> bool:
    """Whether every file of the snapshot ``source_files`` is a regular file (not a link) in
    ``directory`` and every folder on the way a folder (not a link: ``lstat`` of each, so
    nothing outside ``directory`` is looked at; a cleaner of old temporary files may have
    removed some of a kept directory), none modified after ``written`` (when the snapshot was
    written: a task that rewrote one of its own modules does not hand the edit to the next;
    None: unknown, not complete). Their content is not read again: the directory is this
    user's own (mode 0700), written from GridFS whose files never change."""
    if written is None:
        return False
    folders: set[Path] = set()
    for rel, _ in source_files:
        try:
            path = directory.joinpath(*PurePosixPath(str(rel)).parts)
            for folder in path.relative_to(directory).parents[:-1]:
                if folder not in folders:
                    if not stat.S_ISDIR(os.lstat(directory / folder).st_mode):
                        return False
                    folders.add(folder)
            info = os.lstat(path)
            if not stat.S_ISREG(info.st_mode) or info.st_mtime > written:
                return False
        except (OSError, ValueError):
            return False
    return True


def _write_registry(
    path: Path,
    directory: str,
    users: list[list[Any]],
    *,
    written: float | None,
    left: float | None = None,
) -> None:
    """Write a snapshot's registry (:func:`_read_registry`) under a temporary name, then
    rename it over ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    state = {"dir": directory, "users": users, "left": left, "written": written}
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)


def _snapshot_dirs(base: Path, stem: str) -> list[Path]:
    return [p for p in base.glob(f"{stem}-*") if p.name.rsplit("-", 1)[0] == stem]


def _clean_stem(base: Path, stem: str, keep: str | None) -> None:
    """Under the lock of ``stem`` (held by the caller): remove its snapshot directories other
    than ``keep`` and the temporary registries of tasks killed while writing one
    (:func:`_write_registry`, under the same lock); when ``keep`` is ``None`` its registry
    too."""
    for path in _snapshot_dirs(base, stem):
        if path.name != keep and path.is_symlink():
            path.unlink(missing_ok=True)
        elif path.name != keep:
            shutil.rmtree(path, ignore_errors=True)
    prefix = f".{stem}.json."
    for path in base.glob(f"{prefix}*.tmp"):
        if path.name[len(prefix) : -len(".tmp")].isdigit():  # a pid: not another stem's
            path.unlink(missing_ok=True)
    if keep is None:
        (base / f"{stem}.json").unlink(missing_ok=True)


def remove_stale_snapshots(
    base: Path, host: str, *, skip: str = "", now: float | None = None
) -> list[str]:
    """Remove what is no longer kept in ``base`` for this ``host``: for each snapshot name
    (``src-<job key>-<host>``) whose lock is free and whose registry lists no running process
    (:func:`live_users`) and was not left cleanly within :data:`KEEP_S` seconds of ``now``
    (default ``time.time()``; :func:`_kept`) - what killed jobs left, or kept directories no
    task came back to - its directories, registry and lock file; for one still kept, its
    directories the registry does not name (a rank killed while writing one). ``skip`` is left
    alone (the caller's own). Names of other hosts are never touched (their processes cannot
    be checked from here); one that cannot be removed (``OSError``) is left with a warning.
    Returns the names cleaned."""
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
    now = time.time() if now is None else now
    for stem in sorted(stems):
        lock_path = base / f"{stem}.lock"
        lock = FileLock(str(lock_path))
        try:
            lock.acquire(timeout=0)
        except (Timeout, OSError):  # a rank of that job is at work on it now
            continue
        try:
            state = _read_registry(base / f"{stem}.json", stem)
            kept = _kept(state, now)
            _clean_stem(base, stem, state["dir"] if kept else None)  # type: ignore[index]
            if not kept:
                lock_path.unlink(missing_ok=True)
                cleaned.append(stem)
        except OSError as error:  # not this job's: it must not fail it
            log.warning("Could not remove the code snapshot %s (%s).", base / stem, error)
        finally:
            lock.release()
    return cleaned


def snapshot_base() -> Path:
    """The private directory the snapshots of this user live in: the per-user runtime
    directory (``seml_hydra.store.server.tunnel.runtime_dir``: mode 0700, checked with ``lstat`` to be a
    directory of this user that nobody else can write). When another user took the usual
    name first (``<tmp>/seml-hydra-<uid>``), that one warns and uses a directory under the
    home, else a fresh one of this process: nothing is imported from the taken one.

    Raises :class:`SourceSnapshotError` when no private directory can be made, or
    ``$SEML_HYDRA_RUNTIME_DIR`` names one that is not private (another user made it, it is
    open to others, or it is a symlink): nothing is imported from it.
    """
    try:
        return runtime_dir()
    except RuntimeDirError as error:
        raise SourceSnapshotError(
            f"no private place for the code snapshot on node {os.uname().nodename}: {error}"
        ) from None


def snapshot_key(cluster: str, source_files: Sequence[Sequence[Any]]) -> str:
    """The ``job_key`` of :func:`materialized` for a snapshot (pure): ``<cluster>_<digest>``,
    the digest (16 hex digits of SHA-1) of its ``[[path, GridFS id], ...]``. GridFS files never
    change, so equal keys mean equal files: the tasks of a batch running on one node at the same
    time share one directory (the first one writes it) instead of each writing its own."""
    text = json.dumps([[str(rel), str(file_id)] for rel, file_id in source_files])
    return f"{cluster}_{hashlib.sha1(text.encode()).hexdigest()[:16]}"


@contextlib.contextmanager
def materialized(
    db: Database,
    source_files: Sequence[Sequence[Any]],
    job_key: str,
    script_dir: str = "",
    live_root: str | None = None,
) -> Iterator[Path]:
    """Run inside the snapshot: once per node per job, in a private directory this job creates.

    Everything lives in this user's private runtime directory (:func:`snapshot_base`), named
    ``src-<job_key>-<host>`` (``job_key``: the snapshot's :func:`snapshot_key`, so the jobs
    running the same snapshot on a node at the same time share it; any key works): the lock
    (``.lock``), the registry of the ranks using the snapshot (``.json``: its directory and
    the ``[pid, start time]`` of each rank) and the snapshot directory
    ``src-<job_key>-<host>-<random token>`` (mode 0700). Under the lock (at most
    :data:`LOCK_TIMEOUT_S` seconds), a rank reuses the directory the registry names when a
    running process uses it, or when its last user left it cleanly less than :data:`KEEP_S`
    seconds ago and every file is still there (:func:`_reusable`: the next wave of an array, a
    requeued or restarted task of the same batch). Otherwise it removes what is there (what
    an earlier, killed job of the same key left, or a local job whose process id wrapped) and
    writes a new directory (:func:`write_new_tree`). The last one to leave keeps the directory
    (the registry records when) and keeps the bytecode Python wrote for its modules in the
    node's cache, which gives the modules of a later directory with the same sources their
    compiled code (``seml_hydra.store.snapshot.bytecode``). Creating or leaving a directory
    also removes this host's other snapshots no task uses or came back to within
    :data:`KEEP_S`, and what killed jobs left (:func:`remove_stale_snapshots`); a directory
    that does not fit removes the kept ones no task uses first (:func:`_write_making_room`).

    Before anything is imported, the base and the snapshot directory are checked with
    ``lstat`` (this user's, not open to others, not symlinks); then the directory and its
    ``src/`` come first on ``sys.path``, after the snapshot's copy of the script's directory
    ``script_dir`` (relative to the snapshot root, ``""``: the root) in the first place, where
    Python puts the script's directory; every other entry inside the live project
    ``live_root`` (the project root at launch: the launch folder submitit's ``-m`` puts first,
    ``PYTHONPATH``, an editable install's path) is replaced by the same folder in the snapshot
    (:func:`snapshot_path`), so no module of the project is imported from the live tree, not
    even one the task imports only when it runs. All of it is undone on leaving. The working directory stays what Hydra makes it (the
    launch directory, or the output directory with ``hydra.job.chdir=true``): SEML runs from
    its temporary copy, but a Hydra app's relative paths (data, caches) mean the launch
    directory, and those files are not in the snapshot anyway.

    Raises :class:`SourceSnapshotError` when the node has no private place for it, the lock is
    not free within :data:`LOCK_TIMEOUT_S`, or the directory cannot be created or filled.
    """
    from filelock import FileLock, Timeout

    base = snapshot_base()
    host = socket.gethostname()
    stem = f"{SNAPSHOT_PREFIX}{_safe_name(job_key)}-{_safe_name(host)}"
    registry = base / f"{stem}.json"
    lock = FileLock(str(base / f"{stem}.lock"), timeout=LOCK_TIMEOUT_S)
    me = [os.getpid(), process_start(os.getpid())]
    created = False
    directory = base / stem
    try:
        with lock.acquire(poll_interval=LOCK_POLL_S):
            state = _read_registry(registry, stem)
            if _reusable(base, state, source_files):
                directory = base / state["dir"]  # type: ignore[index]
                users = [*state["users"], me]  # type: ignore[index]
                written = state["written"]  # type: ignore[index]
            else:  # nobody runs from or kept a snapshot of this key: what is there is stale
                # (or it was removed under its users, by a cleaner of old temporary files)
                _clean_stem(base, stem, None)
                directory = base / f"{stem}-{secrets.token_hex(8)}"
                directory.mkdir(mode=0o700)
                created = True
                try:
                    files = retrying(  # retried while MongoDB is unreachable
                        lambda: read_sources(db, source_files, directory),
                        "reading the code snapshot",
                    )
                    _write_making_room(files, directory, base, host, stem)
                    restore_bytecode(directory, base / CACHE_DIR)
                except BaseException:
                    shutil.rmtree(directory, ignore_errors=True)
                    raise
                users, written = [me], time.time()
            _write_registry(registry, directory.name, users, written=written)
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
    if script_dir:
        added.insert(0, str(directory.joinpath(*PurePosixPath(script_dir).parts)))
    before = list(sys.path)
    sys.path[:] = added + snapshot_path(before, live_root, directory, os.getcwd())
    ours = set(sys.path)
    try:
        yield directory
    finally:  # the entries the run added itself stay
        sys.path[:] = before + [e for e in sys.path if e not in ours and e not in before]
        _leave(lock, registry, stem, directory, me, host)


def _write_making_room(
    files: Sequence[tuple[Path, bytes]], directory: Path, base: Path, host: str, stem: str
) -> None:
    """:func:`write_new_tree` of ``files`` into the fresh ``directory``; when the file system
    is full (``ENOSPC``, ``EDQUOT``), remove this host's snapshots no running task uses, the
    kept ones too (a cache: :data:`KEEP_S`), and write once more into a fresh ``directory``
    when that removed any. Called under the lock of ``stem`` (left alone). Raises ``OSError``."""
    try:
        write_new_tree(files)
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        shutil.rmtree(directory, ignore_errors=True)
        if not remove_stale_snapshots(base, host, skip=stem, now=float("inf")):
            raise
        directory.mkdir(mode=0o700)
        write_new_tree(files)


def _leave(lock: Any, registry: Path, stem: str, directory: Path, me: list[Any], host: str) -> None:
    """Take this rank out of the registry; the last rank keeps the directory for the next
    tasks of the same code (:data:`KEEP_S`: the registry records when it left), then removes
    this host's other snapshots nobody uses or kept (:func:`remove_stale_snapshots`; the
    other ranks leave that to it). A lock that stays held only leaves the directory behind
    (removed by a later job)."""
    from filelock import Timeout

    try:
        with lock.acquire(poll_interval=LOCK_POLL_S):
            state = _read_registry(registry, stem)
            if state is None or state["dir"] != directory.name:  # no rank can be using it
                shutil.rmtree(directory, ignore_errors=True)
                return
            users = state["users"]
            if me in users:
                users.remove(me)
            written = state["written"]
            if users:
                _write_registry(registry, directory.name, users, written=written)
                return
            # the last one: kept for the next tasks of the same code (KEEP_S)
            store_bytecode(directory, directory.parent / CACHE_DIR)
            _write_registry(registry, directory.name, [], written=written, left=time.time())
    except (Timeout, OSError) as error:
        log.warning(
            "Could not leave the code snapshot %s (%s); a later job removes it.",
            directory,
            error,
        )
        return
    remove_stale_snapshots(directory.parent, host, skip=stem)


def _reusable(
    base: Path, state: dict[str, Any] | None, source_files: Sequence[Sequence[Any]]
) -> bool:
    """Whether the directory a snapshot's registry ``state`` names can be run from again: in
    use by a running task of this node, or left cleanly within :data:`KEEP_S` seconds with
    every file still there (:func:`_complete`); never one that is not a private directory of
    this user (a symbolic link: :func:`private_dir_problem`), which is written anew."""
    if state is None or private_dir_problem(base / state["dir"]):
        return False
    if state["users"]:
        return True
    return _kept(state, time.time()) and _complete(
        base / state["dir"], source_files, state["written"]
    )
