"""An exclusive lock on a file between processes of one node (``fcntl.flock``), for the code
snapshot a job writes or reuses at its start (``seml_hydra.store.snapshot``).

The ``filelock`` package does the same on Unix, but importing it (4.x: some 25 modules) costs
~8-10 ms CPU in every job's start-up (``benchmarks/README.md``, "Job life"). The login-node
locks (``embedded``, ``tunnel``) keep ``filelock``.
"""

from __future__ import annotations

import fcntl
import os
import time
from typing import Any

#: seconds between two attempts while another process holds the lock: the first pause, doubled
#: after each attempt up to the last (a snapshot is written in ~10 ms: the tasks waiting for it
#: start soon after, without a busy loop)
FIRST_POLL_S, POLL_S = 0.002, 0.05


class LockTimeout(TimeoutError):
    """The lock stayed held by another process for the whole timeout."""


class FileLock:
    """An exclusive ``flock`` on the file ``path`` (created with ``mode`` when missing), as
    ``filelock.FileLock`` takes it on Unix; a context manager. Not reentrant.

    A lock file removed while a process waited for it (``snapshot.remove_stale_snapshots``
    unlinks free lock files) is opened again after the wait, so two processes never both hold
    a lock on the same name.

    Attributes:
        lock_file: the path, as a string.
        timeout: default seconds :meth:`acquire` waits; negative: forever.
    """

    def __init__(self, path: str | os.PathLike[str], timeout: float = -1, mode: int = 0o600):
        self.lock_file = os.fspath(path)
        self.timeout = timeout
        self._mode = mode
        self._fd: int | None = None

    @property
    def is_locked(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self, timeout: float | None = None) -> None:
        """Take the lock, waiting at most ``timeout`` seconds (the object's ``timeout`` when
        None; 0: one attempt; negative: forever), polling after :data:`FIRST_POLL_S` seconds,
        then twice as long each time up to :data:`POLL_S`.

        Raises:
            LockTimeout: another process held it for the whole time.
            OSError: the file cannot be opened or created (a missing directory, no space).
        """
        if self._fd is not None:
            raise RuntimeError(f"{self.lock_file} is already locked by this object")
        wait = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        pause = FIRST_POLL_S
        while True:
            fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, self._mode)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                if 0 <= wait and time.monotonic() >= deadline:
                    raise LockTimeout(f"{self.lock_file} stayed locked for {wait:.0f} s") from None
                time.sleep(pause)
                pause = min(POLL_S, 2 * pause)
                continue
            except BaseException:
                os.close(fd)
                raise
            if os.fstat(fd).st_nlink == 0:  # removed while we waited: lock the new file
                os.close(fd)
                continue
            self._fd = fd
            return

    def release(self) -> None:
        """Give the lock up (nothing when it is not held)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
