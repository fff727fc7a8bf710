"""Paths another local user could redirect: the rule every side applies before it trusts a
directory it writes to or a file it loads (the sweep dir and submitit folder at launch, the
pickle a job unpickles, the job's output directory, a ``restore-sources`` target).

On a shared login node anyone may own a directory on your path (``/tmp/multirun`` made first)
or write into one (``/tmp/x`` made 0777, a group-writable project folder): they can then swap
an entry of it at any moment, e.g. replace the ``*_submitted.pkl`` a job is about to unpickle,
and their code runs as you. The rule only reads metadata (``lstat``); it imports no other
sub-package.
"""

from __future__ import annotations

import grp
import os
import pwd
import shlex
import stat
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = [
    "UnsafePathError",
    "job_dir_problem",
    "launch_paths_problem",
    "unsafe_executable",
    "unsafe_file",
    "unsafe_import_dir",
    "unsafe_path_part",
]


class UnsafePathError(Exception):
    """A path another user could redirect (its message says which part and why)."""


@lru_cache(maxsize=64)
def _group_has_others(gid: int, uid: int) -> bool:
    """Whether group ``gid`` may hold a user other than ``uid``: it lists another member, or it
    is not ``uid``'s own user-private group (named as the user, the convention of Debian's
    ``adduser`` and most clusters), whose other primary members cannot be told without listing
    every user (``getpwall``, slow or disabled under LDAP). An unknown group counts as shared."""
    try:
        group = grp.getgrgid(gid)
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return True
    return bool(set(group.gr_mem) - {name}) or group.gr_name != name


def _has_acl(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` carries a POSIX access ACL (then its group mode bits are the ACL's
    mask: what the users and groups it names may do at most)."""
    try:
        os.getxattr(path, "system.posix_acl_access", follow_symlinks=False)
    except OSError:
        return False
    return True


def _others_can_write(st: os.stat_result, uid: int, path: str | os.PathLike[str]) -> str | None:
    """Who besides the owner may create, rename or delete entries of the directory ``st`` at
    ``path`` (``"every user"``, ``"users its ACL names"``, ``"group <name>"``), or None. A
    sticky directory (``/tmp``) lets others add entries but not touch yours: it counts as
    safe."""
    if st.st_mode & stat.S_ISVTX:
        return None
    if st.st_mode & stat.S_IWOTH:
        return "every user"
    if st.st_mode & stat.S_IWGRP and _has_acl(path):
        return "users its ACL names"
    if st.st_mode & stat.S_IWGRP and _group_has_others(st.st_gid, uid):
        try:
            return f"group {grp.getgrgid(st.st_gid).gr_name}"
        except KeyError:
            return f"group {st.st_gid}"
    return None


def unsafe_path_part(path: str | os.PathLike[str], uid: int | None = None) -> str | None:
    """Why another user could redirect what is read or written under ``path``, or None.

    Each part of ``path`` that exists is judged, along ``path`` as given (``lstat``: a link
    planted at ``/tmp/restore`` counts) and along its resolved form (a link of yours into
    another user's directory): a symbolic link or directory owned by a user other than
    ``uid`` (default: the effective uid) and root, or a directory that others may write
    without the sticky bit (mode o+w; g+w when its group holds other users:
    :func:`_group_has_others`). Parts that do not exist yet are not judged (they will be
    made by you). Same rule as ``restore-sources`` (SEML has none: it writes wherever told).

    Args:
        path: a file or directory path, absolute or relative to the working directory.
        uid: the user who must own the path (tests pass another).

    Returns:
        One sentence naming the first unsafe part (``"/tmp/x is a directory every user can
        write (mode 0777, no sticky bit)"``), or None when the path is safe.
    """
    me = os.geteuid() if uid is None else uid
    literal = Path(os.path.abspath(path))
    for candidate in (literal, Path(os.path.realpath(literal))):
        for prefix in [*reversed(candidate.parents), candidate]:
            try:
                st = os.lstat(prefix)
            except (FileNotFoundError, NotADirectoryError):  # not there (under a file, too)
                break
            is_link = stat.S_ISLNK(st.st_mode)
            if st.st_uid not in (me, 0):
                kind = (
                    "a symbolic link"
                    if is_link
                    else "a directory"
                    if stat.S_ISDIR(st.st_mode)
                    else "a file"
                )
                return f"{prefix} is {kind} of another user (uid {st.st_uid})"
            writers = (
                None
                if is_link or not stat.S_ISDIR(st.st_mode)
                else _others_can_write(st, me, prefix)
            )
            if writers is not None:
                return (
                    f"{prefix} is a directory {writers} can write "
                    f"(mode {stat.S_IMODE(st.st_mode):04o}, no sticky bit)"
                )
    return None


def unsafe_import_dir(path: str | os.PathLike[str], uid: int | None = None) -> str | None:
    """Why a module another user planted in the directory ``path`` could be imported by a
    process with ``path`` on ``sys.path``, or None: :func:`unsafe_path_part`, or the directory
    itself lets others add entries (o+w, or g+w with other users in the group), sticky or not
    (``/tmp``: the sticky bit keeps your files, not theirs, out of reach)."""
    me = os.geteuid() if uid is None else uid
    problem, st = _path_and_stat(path, me)
    if problem is None and st is not None and _writable_by_others(st, me, path):
        return f"{path} is a directory other users can add files to (mode {_mode(st):04o})"
    return problem


def _path_and_stat(
    path: str | os.PathLike[str], uid: int
) -> tuple[str | None, os.stat_result | None]:
    """``(unsafe_path_part(path), os.stat(path))``; the stat is None when the path is unsafe
    or not there (links followed)."""
    problem = unsafe_path_part(path, uid)
    if problem is not None:
        return problem, None
    try:
        return None, os.stat(path)
    except OSError:
        return None, None


def _mode(st: os.stat_result) -> int:
    return stat.S_IMODE(st.st_mode)


def _writable_by_others(st: os.stat_result, uid: int, path: str | os.PathLike[str]) -> bool:
    """Whether users other than ``uid`` may write ``st`` (at ``path``): o+w, or g+w when the
    group holds other users or a POSIX ACL names more writers (sticky or not)."""
    mode = _mode(st)
    return bool(
        mode & stat.S_IWOTH
        or (mode & stat.S_IWGRP and (_group_has_others(st.st_gid, uid) or _has_acl(path)))
    )


def unsafe_file(path: str | os.PathLike[str], uid: int | None = None) -> str | None:
    """Why the file ``path`` cannot be trusted to hold what ``uid`` (default: the effective
    uid) wrote, or None: its directories fail :func:`unsafe_path_part`, or the file itself
    is a symbolic link, not a regular file, owned by another user (root included: a job
    loads only what its user wrote), or writable by others (o+w, or g+w with other users in
    the group). Raises nothing; a file that is not there is judged by its directories only.
    """
    me = os.geteuid() if uid is None else uid
    problem = unsafe_path_part(Path(os.path.abspath(path)).parent, me)
    if problem is not None:
        return problem
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file (a symbolic link or a special file)"
    if st.st_uid != me:
        return f"{path} belongs to another user (uid {st.st_uid})"
    if _writable_by_others(st, me, path):
        return f"{path} can be written by other users (mode {_mode(st):04o})"
    return None


def job_dir_problem(field: str, value: str | os.PathLike[str]) -> str | None:
    """The refusal of a job directory (``field``: the setting's name, e.g.
    ``hydra.launcher.submitit_folder``; ``value``: its path) that fails
    :func:`unsafe_path_part`, as one sentence saying what to do; None when it is safe."""
    problem = unsafe_path_part(value)
    if problem is None:
        return None
    return (
        f"{field}={value}: {problem}; another user could replace the files your jobs load "
        "there and run their code as you. Choose a directory of yours (e.g. "
        "hydra.sweep.dir=$HOME/multirun/...) or take others' write access away"
    )


def unsafe_executable(path: str | os.PathLike[str], uid: int | None = None) -> str | None:
    """Why the program ``path`` (the ``python`` a job runs, e.g. a wrapper script) could be
    another user's code, or None: :func:`unsafe_path_part` of the path (links resolved too), or
    the file it names belongs to neither ``uid`` nor root or others can write it."""
    me = os.geteuid() if uid is None else uid
    problem, st = _path_and_stat(path, me)
    if problem is not None or st is None:  # not there: the job's own error says so
        return problem
    if st.st_uid not in (me, 0):
        return f"{path} belongs to another user (uid {st.st_uid})"
    if _writable_by_others(st, me, path):
        return f"{path} can be written by other users (mode {_mode(st):04o})"
    return None


def _program_problem(program: str) -> str | None:
    """:func:`unsafe_executable` of an existing ``program``; for one not there yet, whether
    another user could create it (its nearest existing directory lets others add files:
    :func:`unsafe_import_dir`)."""
    if os.path.lexists(program):
        return unsafe_executable(program)
    parent = Path(os.path.abspath(program)).parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    problem = unsafe_import_dir(parent)
    return None if problem is None else f"{program} does not exist and {problem}"


def launch_paths_problem(hydra: Mapping[str, Any], judged: set[str]) -> str | None:
    """The first refusal of the paths a sweep point's jobs trust, or None: its sweep dir and
    submitit folder (:func:`job_dir_problem`) and the program its ``python`` launcher field
    starts when that is a path (:func:`unsafe_executable`). ``hydra``: the point's resolved
    ``hydra`` node; ``judged``: paths found safe already (updated), so a launch judges each
    once. Shared by the launcher and ``seml start``."""
    launcher = hydra.get("launcher") or {}
    for field, value in (
        ("hydra.sweep.dir", (hydra.get("sweep") or {}).get("dir")),
        ("hydra.launcher.submitit_folder", launcher.get("submitit_folder")),
    ):
        if value is None or str(value) in judged:
            continue
        problem = job_dir_problem(field, str(value))
        if problem is not None:
            return problem
        judged.add(str(value))
    python = launcher.get("python")
    try:
        words = shlex.split(str(python)) if python else []
    except ValueError:
        words = []
    for program in (w for w in words if "/" in w and not w.startswith("-")):
        if program in judged:
            continue
        problem = _program_problem(program)
        if problem is not None:
            return (
                f"hydra.launcher.python={python}: {problem}; another user could change the "
                "program your jobs start. Use an interpreter or wrapper of yours"
            )
        judged.add(program)
    return None
