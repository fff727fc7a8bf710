"""seml_hydra.store.locks.FileLock: exclusive between holders (separate open files, as between
processes), a timeout that says so, and a lock file removed while a process waited for it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from seml_hydra.store.locks import FileLock, LockTimeout


def test_a_held_lock_times_out_for_another_holder_until_released(tmp_path):
    path = tmp_path / "x.lock"
    first, second = FileLock(path), FileLock(path, timeout=0)
    with first:
        with pytest.raises(LockTimeout, match="x.lock stayed locked"):
            second.acquire()
        assert first.is_locked and not second.is_locked
    second.acquire()
    assert second.is_locked
    second.release()
    assert (path.stat().st_mode & 0o777) == 0o600


def test_another_process_holding_it_blocks_this_one(tmp_path):
    path = tmp_path / "x.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from seml_hydra.store.locks import FileLock; "
            f"lock = FileLock({str(path)!r}); lock.acquire(); print('held', flush=True); "
            "sys.stdin.readline()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(LockTimeout):
            FileLock(path).acquire(timeout=0.2)
    finally:
        holder.communicate("\n", timeout=30)  # the holder exits: the lock is free
    FileLock(path).acquire(timeout=0)


def test_a_lock_file_removed_before_it_was_locked_is_locked_again(tmp_path, monkeypatch):
    """The file is removed between this process' open and its flock (as
    remove_stale_snapshots removes a free lock file): the lock taken must be on the file that
    now has the name, which the next process locks too, not on the removed one."""
    import fcntl
    import os

    from seml_hydra.store import locks

    path = tmp_path / "x.lock"
    real_flock = fcntl.flock
    removed = []

    def flock_after_removal(fd, operation):
        if not removed and operation & fcntl.LOCK_EX:
            path.unlink()
            removed.append(True)
        return real_flock(fd, operation)

    monkeypatch.setattr(locks.fcntl, "flock", flock_after_removal)
    lock = FileLock(path)
    lock.acquire(timeout=0)
    monkeypatch.setattr(locks.fcntl, "flock", real_flock)
    assert removed and os.fstat(lock._fd).st_ino == path.stat().st_ino
    with pytest.raises(LockTimeout):
        FileLock(path).acquire(timeout=0)
    lock.release()
