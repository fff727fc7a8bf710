"""``core.parallel.run_at_once``: the writes of a large ``delete`` or KILLED marking sent at once."""

from __future__ import annotations

import threading

import pytest

from seml_hydra.core.parallel import run_at_once


def test_calls_run_at_once_and_their_results_come_in_order():
    # each call waits for the other at a barrier: one after the other they would time out
    barrier = threading.Barrier(2, timeout=10)

    def call(value):
        barrier.wait()
        return value

    assert run_at_once([lambda: call("a"), lambda: call("b")], 4) == ["a", "b"]


def test_one_worker_runs_the_calls_one_after_the_other_in_this_thread():
    threads = []
    calls = [lambda: threads.append(threading.current_thread()) or len(threads)] * 3
    assert run_at_once(calls, 1) == [1, 2, 3]
    assert threads == [threading.current_thread()] * 3


def test_the_first_failure_is_raised_once_every_call_ended():
    ended = []
    release = threading.Event()

    def slow():
        release.wait(10)
        ended.append("slow")

    def fail():
        release.set()
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        run_at_once([fail, slow], 2)
    assert ended == ["slow"]
