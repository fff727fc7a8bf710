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
import re
import shlex
import stat
import struct
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

__all__ = [
    "UnsafePathError",
    "default_acl_problem",
    "group_has_others",
    "parse_acl",
    "acl_write_grants",
    "creatable_dir_problem",
    "program_lookup_problem",
    "pycache_prefix_options",
    "search_entry_problem",
    "search_path_entries",
    "job_dir_problem",
    "launch_paths_problem",
    "unsafe_executable",
    "unsafe_file",
    "unsafe_files",
    "unsafe_import_dir",
    "unsafe_path_part",
]


class UnsafePathError(Exception):
    """A path another user could redirect (its message says which part and why)."""


@lru_cache(maxsize=64)
def group_has_others(gid: int, uid: int) -> bool:
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


#: the extended attributes holding a POSIX ACL: what a file or directory allows now
#: (``access``), and what entries made in a directory inherit (``default``)
ACL_ACCESS, ACL_DEFAULT = "system.posix_acl_access", "system.posix_acl_default"
#: ACL entry tags (``linux/posix_acl.h``) and the write permission bit
ACL_USER_OBJ, ACL_USER, ACL_GROUP_OBJ, ACL_GROUP, ACL_MASK, ACL_OTHER = 1, 2, 4, 8, 16, 32
ACL_WRITE = 2


class AclEntry(NamedTuple):
    """One entry of a POSIX ACL: ``tag`` (``ACL_USER``, ...), ``perm`` (bits r=4, w=2, x=1)
    and ``id`` (the uid or gid of an ``ACL_USER``/``ACL_GROUP`` entry, else None)."""

    tag: int
    perm: int
    id: int | None


def parse_acl(data: bytes) -> list[AclEntry]:
    """The entries of a POSIX ACL as Linux stores it in ``system.posix_acl_*`` (pure): a
    little-endian header (version 2) and 8-byte entries ``(tag u16, perm u16, id u32)``.
    Raises ``ValueError`` for another version or a truncated value."""
    if len(data) < 4 or (len(data) - 4) % 8 or struct.unpack_from("<I", data)[0] != 2:
        raise ValueError(f"not a POSIX ACL (version 2) of {len(data)} bytes")
    entries = []
    for offset in range(4, len(data), 8):
        tag, perm, ident = struct.unpack_from("<HHI", data, offset)
        named = tag in (ACL_USER, ACL_GROUP)
        entries.append(AclEntry(tag, perm, ident if named else None))
    return entries


def acl_write_grants(
    entries: Sequence[AclEntry], uid: int, gid: int, shared: Callable[[int], bool]
) -> list[AclEntry]:
    """The entries of an ACL that let a user other than ``uid`` (and root) write (pure): a
    named user other than ``uid``, the owning group (``gid``) or a named group when
    ``shared(gid)`` says it holds other users, each as far as the mask allows, and ``other``.
    An ACL naming only its owner, or granting others no write, gives none. For a default ACL,
    ``gid`` is the group the entries made in the directory get."""
    masks = [e.perm for e in entries if e.tag == ACL_MASK]
    mask = masks[0] if masks else 7
    grants = []
    for entry in entries:
        if entry.tag == ACL_OTHER:
            allowed = entry.perm
        elif entry.tag == ACL_USER and entry.id not in (uid, 0):
            allowed = entry.perm & mask
        elif entry.tag in (ACL_GROUP_OBJ, ACL_GROUP):
            group = gid if entry.id is None else entry.id
            allowed = entry.perm & mask if shared(group) else 0
        else:
            allowed = 0
        if allowed & ACL_WRITE:
            grants.append(entry)
    return grants


def _acl_entry_text(entry: AclEntry) -> str:
    """``user:semlother:rwx`` (getfacl's form; a number for an id without a name)."""
    kind = "user" if entry.tag in (ACL_USER_OBJ, ACL_USER) else "group"
    kind = {ACL_MASK: "mask", ACL_OTHER: "other"}.get(entry.tag, kind)
    name = ""
    if entry.id is not None:
        try:
            name = (pwd.getpwuid if kind == "user" else grp.getgrgid)(entry.id)[0]
        except KeyError:
            name = str(entry.id)
    perm = "".join(c if entry.perm & b else "-" for c, b in (("r", 4), ("w", 2), ("x", 1)))
    return f"{kind}:{name}:{perm}"


def _acl_grants(path: str | os.PathLike[str], which: str, uid: int, gid: int) -> list[str] | None:
    """The entries (getfacl's text) of the ACL ``which`` (:data:`ACL_ACCESS` or
    :data:`ACL_DEFAULT`) of ``path`` that let others write (:func:`acl_write_grants`): empty
    when it grants others nothing, None when there is no such ACL (or no ACLs on that file
    system). An ACL that cannot be parsed counts as granting (``["an unreadable ACL"]``)."""
    try:
        data = os.getxattr(path, which)
    except OSError:
        return None
    try:
        grants = acl_write_grants(parse_acl(data), uid, gid, lambda g: group_has_others(g, uid))
    except ValueError:
        return ["an unreadable ACL"]
    prefix = "default:" if which == ACL_DEFAULT else ""
    return [prefix + _acl_entry_text(e) for e in grants]


def _writers(st: os.stat_result, uid: int, path: str | os.PathLike[str]) -> str | None:
    """Who besides the owner may write ``st`` (at ``path``), sticky bit aside: ``"every
    user"`` (o+w), ``"users of its ACL (user:bob:rwx)"`` (with a POSIX access ACL the group
    mode bits are only its mask: its entries decide; one naming only the owner grants
    nothing), ``"group <name>"`` (g+w when the group holds other users), or None."""
    if st.st_mode & stat.S_IWOTH:
        return "every user"
    if not st.st_mode & stat.S_IWGRP:
        return None
    granted = _acl_grants(path, ACL_ACCESS, uid, st.st_gid)
    if granted is not None:
        return f"users of its ACL ({', '.join(granted)})" if granted else None
    if group_has_others(st.st_gid, uid):
        try:
            return f"group {grp.getgrgid(st.st_gid).gr_name}"
        except KeyError:
            return f"group {st.st_gid}"
    return None


def _others_can_write(st: os.stat_result, uid: int, path: str | os.PathLike[str]) -> str | None:
    """Who besides the owner may create, rename or delete entries of the directory ``st`` at
    ``path`` (:func:`_writers`), or None. A sticky directory (``/tmp``) lets others add
    entries but not touch yours: it counts as safe."""
    if st.st_mode & stat.S_ISVTX:
        return None
    return _writers(st, uid, path)


def default_acl_problem(path: str | os.PathLike[str], uid: int | None = None) -> str | None:
    """Why what is made in the directory ``path`` would be open to other users through its
    default ACL (``setfacl -d -m u:bob:rwx``: every file and directory made there inherits
    it, whatever the umask), or None. The group judged is the one new entries get: the
    directory's with the set-group-id bit, else the effective gid."""
    me = os.geteuid() if uid is None else uid
    try:
        st = os.stat(path)
    except OSError:
        return None
    gid = st.st_gid if st.st_mode & stat.S_ISGID else os.getegid()
    granted = _acl_grants(path, ACL_DEFAULT, me, gid)
    if not granted:
        return None
    return (
        f"{path} has a default ACL that lets other users write what is made in it "
        f"({', '.join(granted)})"
    )


def unsafe_path_part(
    path: str | os.PathLike[str], uid: int | None = None, *, any_owner: bool = False
) -> str | None:
    """Why another user could redirect what is read or written under ``path``, or None.

    Each part of ``path`` that exists is judged, along ``path`` as given (``lstat``: a link
    planted at ``/tmp/restore`` counts) and along its resolved form (a link of yours into
    another user's directory): a symbolic link or directory owned by a user other than
    ``uid`` (default: the effective uid) and root, or a directory that others may write
    without the sticky bit (mode o+w; g+w when its group holds other users:
    :func:`group_has_others`; a POSIX access ACL granting others write). Parts that do not
    exist yet are not judged (they will be made by you), but the deepest directory that
    exists must have no default ACL granting others write (:func:`default_acl_problem`:
    what is made below it would inherit that). Same rule as ``restore-sources`` (SEML has none: it writes wherever told).

    Args:
        path: a file or directory path, absolute or relative to the working directory.
        uid: the user who must own the path (tests pass another).
        any_owner: judge only what others can write, not who owns each part (a software
            tree of an admin account on ``PATH``: trusted as its owner is), except a part
            another user made in a directory every user can add entries to (``/tmp``: their
            own directory there, or a link of yours to it, is theirs to fill).

    Returns:
        One sentence naming the first unsafe part (``"/tmp/x is a directory every user can
        write (mode 0777, no sticky bit)"``), or None when the path is safe.
    """
    me = os.geteuid() if uid is None else uid
    literal = Path(os.path.abspath(path))
    for candidate in (literal, Path(os.path.realpath(literal))):
        deepest: Path | None = None  # the last directory there: what is made goes in it
        in_open = False  # whether the part before is a directory others add entries to
        for prefix in [*reversed(candidate.parents), candidate]:
            try:
                st = os.lstat(prefix)
            except (FileNotFoundError, NotADirectoryError):  # not there (under a file, too)
                break
            if stat.S_ISDIR(st.st_mode):
                deepest = prefix
            problem = _part_problem(prefix, st, me, any_owner=any_owner, in_open=in_open)
            if problem is not None:
                return problem
            in_open = stat.S_ISDIR(st.st_mode) and _writable_by_others(st, me, prefix)
        inherited = None if deepest is None else default_acl_problem(deepest, me)
        if inherited is not None:
            return inherited
    return None


def _part_problem(
    prefix: Path, st: os.stat_result, uid: int, *, any_owner: bool = False, in_open: bool = False
) -> str | None:
    """Why the part ``prefix`` of a path (``st``: its ``lstat``) lets a user other than
    ``uid`` redirect what is below it, or None: :func:`unsafe_path_part`'s rule for one part
    (another user's link, directory or file unless ``any_owner``, and with it too when
    ``in_open``: the part before is a directory every user can add entries to; a directory
    others can write without the sticky bit)."""
    is_link = stat.S_ISLNK(st.st_mode)
    if st.st_uid not in (uid, 0) and (in_open or not any_owner):
        kind = (
            "a symbolic link"
            if is_link
            else "a directory"
            if stat.S_ISDIR(st.st_mode)
            else "a file"
        )
        where = f" in {prefix.parent}, where every user can add theirs" if any_owner else ""
        return f"{prefix} is {kind} of another user (uid {st.st_uid}){where}"
    writers = (
        None if is_link or not stat.S_ISDIR(st.st_mode) else _others_can_write(st, uid, prefix)
    )
    if writers is None:
        return None
    return (
        f"{prefix} is a directory {writers} can write "
        f"(mode {stat.S_IMODE(st.st_mode):04o}, no sticky bit)"
    )


def unsafe_import_dir(
    path: str | os.PathLike[str], uid: int | None = None, *, any_owner: bool = False
) -> str | None:
    """Why a module another user planted in the directory ``path`` could be imported by a
    process with ``path`` on ``sys.path``, or None: :func:`unsafe_path_part`, or the directory
    itself lets others add entries (o+w, or g+w with other users in the group), sticky or not
    (``/tmp``: the sticky bit keeps your files, not theirs, out of reach). ``any_owner``:
    as for :func:`unsafe_path_part`."""
    me = os.geteuid() if uid is None else uid
    problem, st = _path_and_stat(path, me, any_owner=any_owner)
    if problem is None and st is not None and _writable_by_others(st, me, path):
        return f"{path} is a directory other users can add files to (mode {_mode(st):04o})"
    return problem


def _path_and_stat(
    path: str | os.PathLike[str], uid: int, *, any_owner: bool = False
) -> tuple[str | None, os.stat_result | None]:
    """``(unsafe_path_part(path), os.stat(path))``; the stat is None when the path is unsafe
    or not there (links followed)."""
    problem = unsafe_path_part(path, uid, any_owner=any_owner)
    if problem is not None:
        return problem, None
    try:
        return None, os.stat(path)
    except OSError:
        return None, None


def _mode(st: os.stat_result) -> int:
    return stat.S_IMODE(st.st_mode)


def _writable_by_others(st: os.stat_result, uid: int, path: str | os.PathLike[str]) -> bool:
    """Whether users other than ``uid`` may write ``st`` (at ``path``): :func:`_writers`,
    sticky or not."""
    return _writers(st, uid, path) is not None


def unsafe_file(path: str | os.PathLike[str], uid: int | None = None) -> str | None:
    """Why the file ``path`` cannot be trusted to hold what ``uid`` (default: the effective
    uid) wrote, or None: its directories fail :func:`unsafe_path_part`, or the file itself
    is a symbolic link, not a regular file, owned by another user (root included: a job
    loads only what its user wrote), or writable by others (o+w, or g+w with other users in
    the group). Raises nothing; a file that is not there is judged by its directories only.
    """
    return unsafe_files([path], uid)


def unsafe_files(paths: Sequence[str | os.PathLike[str]], uid: int | None = None) -> str | None:
    """The first :func:`unsafe_file` problem of ``paths`` (e.g. the pickles of one submission,
    each in its job's folder below the submitit folder), or None, judged with each directory
    walked once: the directory they all are in by :func:`unsafe_path_part` (its parts, links
    resolved too), then the parts below it each by the same rule (one that is a symbolic link
    sends its path to :func:`unsafe_path_part` as a whole; what is below it may be elsewhere),
    with the default ACL of each file's directory, then each file."""
    me = os.geteuid() if uid is None else uid
    if not paths:
        return None
    common = Path(os.path.commonpath([Path(os.path.abspath(p)).parent for p in paths]))
    problem = unsafe_path_part(common, me)
    judged = {common}  # directories found safe
    for path in paths:
        directory = Path(os.path.abspath(path)).parent
        problem = problem or _below_problem(common, directory, me, judged)
        problem = problem or _own_file_problem(path, me)
        if problem is not None:
            return problem
    return None


def _below_problem(judged_dir: Path, directory: Path, uid: int, judged: set[Path]) -> str | None:
    """:func:`unsafe_path_part` of ``directory``, a directory below ``judged_dir`` (found safe
    by it), judging only its parts below ``judged_dir`` that ``judged`` does not hold yet
    (updated with those found safe), and its default ACL."""
    prefix = judged_dir
    for part in directory.relative_to(judged_dir).parts:
        prefix = prefix / part
        if prefix in judged:
            continue
        try:
            st = os.lstat(prefix)
        except (FileNotFoundError, NotADirectoryError):  # not there: its file neither
            return None
        if stat.S_ISLNK(st.st_mode):  # its target's path is judged as a whole
            return unsafe_path_part(directory, uid)
        problem = _part_problem(prefix, st, uid)
        if problem is None and prefix == directory:
            problem = default_acl_problem(directory, uid)
        if problem is not None:
            return problem
        judged.add(prefix)
    return None


def _own_file_problem(path: str | os.PathLike[str], uid: int) -> str | None:
    """Why the file ``path`` itself (not its directories) cannot be trusted to hold what
    ``uid`` wrote (:func:`unsafe_file`), or None; None when it is not there."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file (a symbolic link or a special file)"
    if st.st_uid != uid:
        return f"{path} belongs to another user (uid {st.st_uid})"
    if _writable_by_others(st, uid, path):
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


def creatable_dir_problem(
    directory: str | os.PathLike[str], *, any_owner: bool = False
) -> str | None:
    """Why another user could put files into ``directory``, or None: :func:`unsafe_import_dir`
    of it, or, when it does not exist, of its nearest existing ancestor (whoever can add
    entries there could create it, filled with their files). ``any_owner``: as for
    :func:`unsafe_path_part`."""
    if os.path.isdir(directory):
        return unsafe_import_dir(directory, any_owner=any_owner)
    parent = Path(os.path.abspath(directory)).parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    problem = unsafe_import_dir(parent, any_owner=any_owner)
    return None if problem is None else f"{directory} does not exist and {problem}"


def search_entry_problem(path: str | os.PathLike[str]) -> str | None:
    """Why another user could put or change what the search-path entry ``path`` gives a job
    (a ``PYTHONPATH``, ``PATH`` or ``LD_LIBRARY_PATH`` entry, a library ``LD_PRELOAD``
    names), or None. A directory, or an entry not there: :func:`creatable_dir_problem` with
    ``any_owner``. A file (a zip or egg on ``PYTHONPATH``, an ``LD_PRELOAD`` library): its
    directory judged the same way, :func:`unsafe_path_part` of the file (links resolved) and
    the file itself writable by others (o+w, g+w with other users in the group, an ACL).
    Who owns each part is not judged (``any_owner``)."""
    if os.path.isdir(path) or not os.path.lexists(path):
        return creatable_dir_problem(path, any_owner=True)
    me = os.geteuid()
    directory = Path(os.path.abspath(path)).parent
    problem = creatable_dir_problem(directory, any_owner=True)
    if problem is None:
        problem, st = _path_and_stat(path, me, any_owner=True)
        if problem is None and st is not None and _writable_by_others(st, me, path):
            problem = f"{path} is a file other users can write (mode {_mode(st):04o})"
    return problem


def _program_problem(program: str) -> str | None:
    """:func:`unsafe_executable` of an existing ``program``; for one not there yet, whether
    another user could create it (:func:`creatable_dir_problem` of its directory)."""
    if os.path.lexists(program):
        return unsafe_executable(program)
    problem = creatable_dir_problem(Path(os.path.abspath(program)).parent)
    return None if problem is None else f"{program} does not exist and {problem}"


def search_path_entries(value: str, cwd: str) -> list[tuple[str, str]]:
    """``[(entry as given, the directory it means), ...]`` of a ``PATH``-like ``value``
    (pure): an empty entry means the working directory ``cwd``, a relative one is relative to
    it (a job's working directory is its launch directory)."""
    return [
        (entry, os.path.normpath(os.path.join(cwd, entry or ".")))
        for entry in value.split(os.pathsep)
    ]


def program_lookup_problem(program: str, path: str, cwd: str) -> str | None:
    """Why the program a job finds by ``PATH`` lookup (``program``: a bare name such as
    ``python3``; ``path``: the ``PATH`` value; ``cwd``: the job's working directory, what its
    empty and relative entries mean) could be another user's, or None (also when it is not
    found: the job's own error says so): the file found fails :func:`unsafe_executable`.
    The entries themselves (one others can add a program to, searched before it is found)
    are ``core.jobenv.environment_problem``'s to judge, which every caller runs on the same
    ``PATH`` and working directory (the launcher's setup, ``seml start``, the job)."""
    import shutil  # here: shutil imports bz2 and lzma, whose libraries a job's entry must not
    # load before it judged LD_LIBRARY_PATH (job.entry)

    directories = os.pathsep.join(d for _, d in search_path_entries(path, cwd))
    found = shutil.which(program, path=directories)
    return None if found is None else unsafe_executable(found)


#: words of the ``python`` launcher field that are not the program it starts
_SHELL_PREFIXES = ("exec", "command", "nice")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def _program_words(python: str) -> tuple[str | None, list[str]]:
    """``(the program the field starts when it names it by PATH lookup, the words that name
    programs by path)`` of a ``python`` launcher field (pure): ``exec`` and ``NAME=value``
    words before the program are skipped."""
    try:
        words = shlex.split(python)
    except ValueError:
        return None, []
    head = [w for w in words if w not in _SHELL_PREFIXES and not _ASSIGNMENT.match(w)]
    bare = head[0] if head and "/" not in head[0] else None
    options = {f"{_PYCACHE_OPTION}{d}" for d in pycache_prefix_options(python)}
    return bare, [w for w in words if "/" in w and not w.startswith("-") and w not in options]


#: the interpreter option that moves compiled modules (``-X pycache_prefix=DIR``)
_PYCACHE_OPTION = "pycache_prefix="


def pycache_prefix_options(python: str) -> list[str]:
    """The directories a ``python`` launcher field's ``-X pycache_prefix=DIR`` (or
    ``-Xpycache_prefix=DIR``) options name (pure): Python loads compiled modules from there
    from its very start (its ``encodings`` too), as ``PYTHONPYCACHEPREFIX``, which isolated
    mode (``-I``) ignores but an option is not."""
    try:
        words = shlex.split(python)
    except ValueError:
        return []
    found = []
    for before, word in zip(["", *words], words):
        if before == "-X":  # -X pycache_prefix=DIR
            option = word
        elif word.startswith("-X"):  # -Xpycache_prefix=DIR
            option = word[2:]
        else:
            continue
        if option.startswith(_PYCACHE_OPTION):
            found.append(option[len(_PYCACHE_OPTION) :])
    return found


def launch_paths_problem(hydra: Mapping[str, Any], judged: set[str], workdir: str) -> str | None:
    """The first refusal of the paths a sweep point's jobs trust, or None: its sweep dir and
    submitit folder (:func:`job_dir_problem`) and the program its ``python`` launcher field
    starts (:func:`unsafe_executable`; a relative path or a ``PATH`` lookup from ``workdir``,
    the jobs' working directory: :func:`program_lookup_problem`) and the directories of its
    ``-X pycache_prefix`` options (:func:`pycache_prefix_options`, :func:`search_entry_problem`). ``hydra``: the point's
    resolved ``hydra`` node; ``judged``: paths found safe already (updated), so a launch
    judges each once. Shared by the launcher and ``seml start``, which also judge the
    ``PATH`` entries (``core.jobenv.environment_problem``)."""
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
    bare, by_path = _program_words(str(python)) if python else (None, [])
    for program in ([bare] if bare else []) + by_path:
        where = os.path.normpath(os.path.join(workdir, program))  # "/" in it: a path
        key = where if "/" in program else f"{program} from {workdir}"
        if key in judged:
            continue
        problem = (
            _program_problem(where)
            if "/" in program
            else program_lookup_problem(program, os.environ.get("PATH", os.defpath), workdir)
        )
        if problem is not None:
            return (
                f"hydra.launcher.python={python}: {problem}; another user could change the "
                "program your jobs start. Use an interpreter or wrapper of yours"
            )
        judged.add(key)
    for prefix in pycache_prefix_options(str(python)) if python else []:
        problem = search_entry_problem(os.path.normpath(os.path.join(workdir, prefix)))
        if problem is not None:
            return (
                f"hydra.launcher.python={python}: -X {_PYCACHE_OPTION}{prefix}: {problem}; "
                "another user could put compiled modules there that your jobs would run as you. "
                "Use a prefix of yours (or none)"
            )
    return None
