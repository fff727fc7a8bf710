"""What a job inherits from the launching shell that another local user could use to run
code as you: the search paths and files of :data:`SEARCH_PATH_VARIABLES` (``PATH``,
``PYTHONPATH``, ``LD_LIBRARY_PATH``, ``LD_PRELOAD``, ``BASH_ENV``, ...), the umask, and
an interpreter too old to keep the working directory off the import path of the processes a
task starts.

A job gets the launching environment (sbatch exports it). A ``PYTHONPATH`` entry others can
add files to (``/tmp/shared``, sticky or not) lets them plant a ``sitecustomize.py`` or a
module that shadows ours; a ``PATH`` entry others can add files to lets them plant the
``python`` (or ``srun``) the job looks up; an ``LD_LIBRARY_PATH`` entry others can add files
to lets them plant a shared library the job's interpreter loads (``libbz2.so.1.0`` when it
imports ``bz2``), whose constructor runs as you; a umask without group or other write masked
makes every file the launch, submitit, Hydra and the job create (pickles, ``.hydra/*``, job
folders) writable by them. The rules judge metadata only (``core.paths``); the decisions
without I/O are pure functions.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping

from seml_hydra.core.paths import group_has_others, search_entry_problem, search_path_entries

__all__ = [
    "SEARCH_PATH_VARIABLES",
    "environment_problem",
    "private_umask",
    "private_umask_kept",
    "safe_path_problem",
    "tighten_umask",
]

#: the variables whose entries name directories a job loads programs, modules, compiled code or
#: libraries from, in the order they are judged
SEARCH_PATH_VARIABLES = (
    "PYTHONPATH",
    "PATH",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "LD_AUDIT",
    "PYTHONHOME",
    "PYTHONPLATLIBDIR",
    "PYTHONUSERBASE",
    "PYTHONPYCACHEPREFIX",
    "BASH_ENV",
    "OPENSSL_CONF",
    "OPENSSL_MODULES",
    "GCONV_PATH",
)

#: what another user would plant in an entry of each of :data:`SEARCH_PATH_VARIABLES`
_PLANTED = {
    "PYTHONPATH": "module (a sitecustomize.py too)",
    "PATH": "program",
    "LD_LIBRARY_PATH": "shared library",
    "LD_PRELOAD": "shared library",
    "LD_AUDIT": "shared library",
    "PYTHONHOME": "standard-library module",
    "PYTHONPLATLIBDIR": "standard-library module",
    "PYTHONUSERBASE": "site-packages .pth file",
    "PYTHONPYCACHEPREFIX": "compiled module (.pyc)",
    "BASH_ENV": "shell script (the job's batch shell reads it first)",
    "OPENSSL_CONF": "configuration loading a library",
    "OPENSSL_MODULES": "shared library",
    "GCONV_PATH": "shared library",
}

#: the variables that name files (the others name directories): libraries every process of
#: the job maps (space- or colon-separated), and single files read at start
_LIBRARY_LISTS = ("LD_PRELOAD", "LD_AUDIT")
_SINGLE_FILES = ("BASH_ENV", "OPENSSL_CONF")
#: the variables the dynamic loader expands ``$LIB``, ``$PLATFORM`` and ``$ORIGIN`` in
_LOADER = ("LD_LIBRARY_PATH", "LD_PRELOAD", "LD_AUDIT")


def _entries(name: str, value: str, cwd: str) -> list[tuple[str, str]]:
    """``[(entry as given, the path judged), ...]`` of variable ``name``'s ``value``
    (pure). ``LD_PRELOAD`` and ``LD_AUDIT`` name library files every process of the job maps
    (separated by spaces or colons; a bare name is looked up in the system's and
    ``LD_LIBRARY_PATH``'s directories, judged there); ``BASH_ENV`` (read by the batch shell)
    and ``OPENSSL_CONF`` name one file. ``PYTHONHOME`` is judged with ``lib`` and
    ``lib/pythonX.Y`` under it (where the standard library and its zip are read),
    ``PYTHONUSERBASE`` with the user site-packages of this Python under it
    (``lib/pythonX.Y/site-packages``, where ``site`` reads ``.pth`` files), an absolute
    ``PYTHONPLATLIBDIR`` with ``pythonX.Y`` under it (a relative one names a directory of the
    interpreter's own prefix: not judged). The others are ``PATH``-like lists of directories,
    or files (a zip on ``PYTHONPATH``) (:func:`core.paths.search_path_entries`)."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    if name in _SINGLE_FILES:
        return [(value, os.path.normpath(os.path.join(cwd, value)))]
    if name in _LIBRARY_LISTS:
        files = [e for e in value.replace(" ", os.pathsep).split(os.pathsep) if "/" in e]
        return [(e, os.path.normpath(os.path.join(cwd, e))) for e in files]
    if name == "PYTHONPLATLIBDIR":
        if not os.path.isabs(value):
            return []
        return [(value, value), (value, os.path.join(value, version))]
    entries = search_path_entries(value, cwd)
    below: dict[str, list[tuple[str, ...]]] = {
        "PYTHONHOME": [("lib",), ("lib", version)],
        "PYTHONUSERBASE": [("lib", version, "site-packages")],
    }
    under = [(e, os.path.join(d, *parts)) for parts in below.get(name, []) for e, d in entries]
    return entries + under


def environment_problem(environ: Mapping[str, str], cwd: str) -> str | None:
    """The first entry of a :data:`SEARCH_PATH_VARIABLES` variable of ``environ`` (a job's
    environment, or the launcher's, which the jobs inherit) where another user could put a
    module, program, compiled module or shared library,
    as one sentence naming the variable and the entry; None when every entry is safe.
    ``cwd``: the directory empty and relative entries mean. Judged by
    :func:`core.paths.search_entry_problem`: a directory others can add files to, sticky or
    not (``/tmp`` itself too), or a non-sticky one others can write above it; a file entry
    (a zip, a library) others can write, or in such a directory; a part another user made in
    a directory every user adds entries to (their own ``/tmp/lib``). Otherwise who owns each
    part is not judged (software trees of admin accounts, ``/opt/slurm/bin`` owned by
    ``slurm``, are trusted as their owner is); an entry that does not exist is judged by its
    nearest existing directory (:func:`core.paths.creatable_dir_problem`). A loader variable
    naming a ``$LIB``, ``$PLATFORM`` or ``$ORIGIN`` token is refused (what it loads cannot be
    judged)."""
    for name in SEARCH_PATH_VARIABLES:
        value = environ.get(name)
        if not value:
            continue
        for entry, path in _entries(name, value, cwd):
            problem = (
                "it names a $ token the loader expands ($LIB, $PLATFORM, $ORIGIN), so what it "
                "loads cannot be judged: name the path itself"
                if name in _LOADER and "$" in entry
                else search_entry_problem(path)
            )
            if problem is not None:
                what = _PLANTED[name]
                return (
                    f"{name} entry {entry!r}: {problem}, so another user could put a {what} "
                    "there that your jobs would run as you. Take it out of "
                    f"{name} (or take others' write access away)"
                )
    return None


def private_umask(umask: int, group_shared: bool) -> int:
    """``umask`` with the write bits of other users added (pure): others' always, the
    group's when ``group_shared`` (the group new files get holds other users). ``0o002``
    with a user-private group stays as it is; ``0o000`` becomes ``0o002`` or ``0o022``."""
    return umask | 0o002 | (0o020 if group_shared else 0)


def tighten_umask() -> tuple[int, int] | None:
    """Set the process umask to :func:`private_umask` of the current one (the group: the
    effective gid's) so that what this process and its children create (the sweep dir,
    ``multirun.yaml``, the submitit folder and pickles, and, through sbatch's
    ``SLURM_UMASK``, what the jobs write) is not writable by other users. Returns ``(old,
    new)`` when it changed, else None. Process-wide: call it on the launching side only."""
    old = os.umask(0o077)
    new = private_umask(old, group_has_others(os.getegid(), os.geteuid()))
    os.umask(new)
    return None if new == old else (old, new)


@contextlib.contextmanager
def private_umask_kept() -> Iterator[tuple[int, int] | None]:
    """:func:`tighten_umask` for the ``with`` block only (e.g. ``seml start``'s submission,
    in a process that goes on afterwards); yields what it changed."""
    changed = tighten_umask()
    try:
        yield changed
    finally:
        if changed is not None:
            os.umask(changed[0])


def safe_path_problem(version: tuple[int, int], cwd_problem: str | None) -> str | None:
    """Why a job cannot keep its working directory off the import path of the Python
    processes its task starts (pure): the directory is unsafe (``cwd_problem``, from
    :func:`core.paths.unsafe_import_dir`) and the interpreter (``version``: ``(major,
    minor)``) is older than 3.11, which ignores ``PYTHONSAFEPATH`` (a ``-c`` or ``-m``
    child, multiprocessing's workers included, would put the directory first on
    ``sys.path``). None otherwise."""
    if cwd_problem is None or version >= (3, 11):
        return None
    return (
        f"Python {version[0]}.{version[1]} ignores PYTHONSAFEPATH, and {cwd_problem}: the "
        "Python processes the task starts would import modules another user put there. Run "
        "the jobs with Python >= 3.11 (hydra.launcher.python) or from a directory of yours"
    )
