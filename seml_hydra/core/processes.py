"""Local processes: is pid P still the process that started at T, which sockets it holds, and
running a short command with a time limit. Used by the submission (its ``submitting`` mark),
the code snapshots' registry of ranks, the embedded ``mongod`` and the Slurm client.

Linux first (``/proc``); where there is no ``/proc`` a running pid counts as alive without a
start time to compare. Imports no other sub-package.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = [
    "holds_socket",
    "process_alive",
    "process_start",
    "read_pid_file",
    "run_captured",
]


def process_start(pid: int) -> str | None:
    """The start time of running process ``pid`` (Linux: field 22 of ``/proc/<pid>/stat``, in
    clock ticks since boot, as a string), which tells it from a later process with the same pid.

    Args:
        pid: a process id.

    Returns:
        The start time; ``""`` for an existing pid where there is no ``/proc`` (nothing to
        compare); None when no such process runs (a zombie does not run).
    """
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except FileNotFoundError:
        if os.path.exists("/proc/self/stat"):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return ""
    except OSError:
        return None
    state, *fields = stat.rsplit(")", 1)[1].split()
    return None if state in ("Z", "X") else fields[18]


def process_alive(pid: int, start: str | None = None) -> bool:
    """True when process ``pid`` runs (not a zombie) and, if ``start`` is given and ``/proc``
    tells, is the process that had that start time (:func:`process_start`), not a later one
    that got the same pid after it wrapped.

    Args:
        pid: a process id.
        start: its :func:`process_start` when it was recorded, or None to check only that
            some process ``pid`` runs.
    """
    now = process_start(pid)
    if now is None:
        return False
    return start is None or now == "" or now == start


def holds_socket(pid: object, inode: int) -> bool:
    """True if process ``pid`` runs as this process's effective uid (real and effective uid
    both, ``/proc/<pid>/status``) and has the socket ``inode`` open (``/proc/<pid>/fd``).

    Args:
        pid: a process id (anything else, e.g. a value read from a state file, gives False).
        inode: a socket inode, e.g. from ``/proc/net/tcp``.
    """
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/status") as fh:
            uids = next(line for line in fh if line.startswith("Uid:")).split()[1:3]
        if any(int(uid) != os.geteuid() for uid in uids):
            return False
        fds = os.listdir(f"/proc/{pid}/fd")
    except (OSError, StopIteration, ValueError):
        return False
    target = f"socket:[{inode}]"
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                return True
        except OSError:
            continue
    return False


def read_pid_file(path: Path) -> int | None:
    """The pid written in the pid file ``path`` (e.g. ``mongod --pidfilepath``), or None when
    it is missing or holds no integer."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def run_captured(
    cmd: Sequence[str],
    timeout_s: float,
    *,
    env: Mapping[str, str] | None = None,
    new_session: bool = False,
    umask: int = -1,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` (an argument list, no shell) with stdin ``/dev/null``, capture stdout and
    stderr as text (UTF-8, undecodable bytes replaced) and wait at most ``timeout_s``.

    Args:
        cmd: program and arguments.
        timeout_s: seconds the command may run; it is killed after that.
        env: its environment (the caller's when None).
        new_session: start it in a new session (a daemon that must outlive us, e.g.
            ``mongod --fork``).
        umask: its umask (-1: the caller's).

    Returns:
        The finished process (``returncode``, ``stdout``, ``stderr``); a non-zero exit status
        is not an error here.

    Raises:
        subprocess.TimeoutExpired: it ran longer than ``timeout_s`` (it was killed).
        OSError: it could not be started (``FileNotFoundError``: no such program).
    """
    return subprocess.run(
        list(cmd),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        timeout=timeout_s,
        env=None if env is None else dict(env),
        start_new_session=new_session,
        umask=umask,
        check=False,
    )
