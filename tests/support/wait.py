"""Waiting for a state: no fixed sleeps in the tests."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest


def wait_until(
    what: str, predicate: Callable[[], Any], timeout: float = 180.0, interval: float = 0.5
):
    """Poll ``predicate`` every ``interval`` seconds until it returns something truthy (returned);
    fail the test after ``timeout`` seconds saying what was awaited (``what``)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting until {what}")
        time.sleep(interval)


def wait_running(collection, proc: subprocess.Popen, count: int = 1, timeout: float = 60):
    """Wait until ``count`` experiments of ``collection`` (a pymongo collection) are RUNNING; the
    launcher ``proc`` must still be alive meanwhile (else the test fails with its output)."""

    def running() -> bool:
        assert proc.poll() is None, proc.communicate()
        return collection.count_documents({"status": "RUNNING"}) >= count

    wait_until(f"{count} RUNNING experiment(s)", running, timeout, 0.2)
