"""seml_hydra.core.processes: the one answer to "is pid P still the process that started at T"
(used by the submission marks, the code snapshots' registry of ranks and the embedded mongod),
which sockets a process holds, and running a short command with a time limit. Real processes,
no services."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from seml_hydra.core.processes import (
    holds_socket,
    process_alive,
    process_start,
    read_pid_file,
    run_captured,
)


def test_a_running_process_is_alive_with_its_own_start_time_only():
    start = process_start(os.getpid())
    assert isinstance(start, str) and start
    assert process_start(os.getpid()) == start  # stable: it tells this process apart
    assert process_alive(os.getpid())
    assert process_alive(os.getpid(), start)
    # the same pid with another start time is a later process: not the one recorded
    assert not process_alive(os.getpid(), str(int(start) + 1))


def test_an_exited_process_is_not_alive_reaped_or_zombie():
    zombie = subprocess.Popen(["true"])
    # wait until it has exited but leave it unreaped (WNOWAIT): a zombie does not run
    os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)
    start = process_start(zombie.pid)
    assert start is None
    assert not process_alive(zombie.pid)
    zombie.wait()
    assert not process_alive(zombie.pid)  # reaped: no such process


def test_holds_socket_names_the_process_holding_a_listening_socket():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        inode = os.fstat(sock.fileno()).st_ino
        assert holds_socket(os.getpid(), inode)
        assert not holds_socket(os.getpid(), inode + 1_000_000)
        # values read from a state file that are no pid
        for bad in ("1", True, None, 0, -5):
            assert not holds_socket(bad, inode)
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        assert not holds_socket(child.pid, inode)  # ours, but it does not hold that socket
    finally:
        child.communicate(b"")


def test_read_pid_file(tmp_path):
    path = tmp_path / "mongod.pid"
    assert read_pid_file(path) is None
    path.write_text("1234\n")
    assert read_pid_file(path) == 1234
    path.write_text("not a pid")
    assert read_pid_file(path) is None


def test_run_captured_reads_both_streams_and_the_status_with_stdin_closed():
    proc = run_captured(
        ["sh", "-c", "cat; echo out; printf '\\377' ; echo err >&2; umask; exit 3"],
        10,
        umask=0o077,
        env={"PATH": os.environ["PATH"]},
    )
    assert proc.returncode == 3
    # stdin is /dev/null (cat ends at once), undecodable bytes are replaced, the umask is set
    assert proc.stdout.splitlines() == ["out", "\ufffd0077"]
    assert proc.stderr == "err\n"


def test_run_captured_raises_for_a_timeout_and_a_missing_program():
    with pytest.raises(subprocess.TimeoutExpired):
        run_captured(["sleep", "30"], 0.2)
    with pytest.raises(FileNotFoundError):
        run_captured(["/nonexistent/seml-hydra-test-binary"], 5)


def test_temporarily_sets_entries_and_restores_present_and_absent_ones_even_on_error():
    from seml_hydra.core.scoped import temporarily

    mapping = {"a": 1}
    with pytest.raises(RuntimeError), temporarily(mapping, {"a": 2, "b": 3}):
        assert mapping == {"a": 2, "b": 3}
        raise RuntimeError
    assert mapping == {"a": 1}
