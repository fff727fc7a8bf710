"""The run's whole output reaches its document at the end, whatever the heartbeat thread was
doing: a real Sacred run (``seml_hydra.job.observed.run_observed``, the primary rank's code
path) in this process, on the test mongod. The outage cases (the outcome kept past
``SEML_MONGODB_RETRY_S``) are in tests/service/test_db_outage.py."""

from __future__ import annotations

import sys
import threading

import pymongo
import pytest
from pymongo import monitoring
from support.mongo import MONGO_URL
from support.wait import wait_until

from seml_hydra.job.claim import fence
from seml_hydra.job.observed import run_observed

pytestmark = pytest.mark.mongo


def _doc(name: str) -> dict:
    return {
        "_id": 1,
        "status": "RUNNING",
        "config": {"x": 1},
        "seed": 3,
        "seml": {"name": name},
        "execution": {"restart": 0},
    }


def test_a_failing_task_keeps_the_lines_it_printed_last(test_db):
    """Sacred 0.8.7 keeps the output printed after its last read in the closed capture
    (``CapturedStdout.final``), which no heartbeat reads once the task raised: the final save
    must hold it."""
    coll = test_db["lastwords"]
    doc = _doc("lastwords")
    coll.insert_one(doc)

    def task() -> None:
        print("last words before the error")
        raise ValueError("boom")

    with pytest.raises(ValueError):
        run_observed(test_db, "lastwords", doc, task, fence=fence(doc))
    final = coll.find_one({"_id": 1})
    assert final["status"] == "FAILED"
    assert "last words before the error" in final["captured_out"]
    assert "captured_out_incomplete" not in final


class BlockOneBeat(monitoring.CommandListener):
    """Holds the first ``update`` the heartbeat thread sends once armed (a slow or unreachable
    server) until the main thread is in Sacred's ``_emit_completed``: Sacred's own wait for
    the heartbeat thread (2 s) is over by then."""

    def __init__(self) -> None:
        self.armed = False
        self.blocked = threading.Event()

    def started(self, event) -> None:
        if not self.armed or event.command_name != "update":
            return
        if threading.current_thread() is threading.main_thread():
            return
        self.armed = False
        self.blocked.set()
        main = threading.main_thread().ident
        wait_until(
            "the run ends while the beat waits",
            lambda: _in_frame(main, "_emit_completed"),
            60,
            0.01,
        )

    def succeeded(self, event) -> None:
        pass

    def failed(self, event) -> None:
        pass


def _in_frame(thread_id: int | None, name: str) -> bool:
    frame = sys._current_frames().get(thread_id)
    while frame is not None:
        if frame.f_code.co_name == name:
            return True
        frame = frame.f_back
    return False


def test_a_beat_in_flight_when_the_task_returns_loses_no_output(test_db, monkeypatch):
    """The task prints its last line while a heartbeat save waits for the server, and returns:
    Sacred hands the last output to the observer only through that thread's last beat, which
    comes after the final save began. The document still holds every line."""
    from sacred import SETTINGS

    monkeypatch.setattr(SETTINGS, "DEFAULT_BEAT_INTERVAL", 0.3)
    coll = test_db["inflight"]
    doc = _doc("inflight")
    coll.insert_one(doc)
    listener = BlockOneBeat()
    client = pymongo.MongoClient(MONGO_URL, event_listeners=[listener])

    def task() -> int:
        print("first line")
        listener.armed = True
        assert listener.blocked.wait(60), "no heartbeat came"
        print("last line, printed while the beat waits")
        return 7

    try:
        assert run_observed(client[test_db.name], "inflight", doc, task, fence=fence(doc)) == 7
    finally:
        client.close()
    final = coll.find_one({"_id": 1})
    assert final["status"] == "COMPLETED" and final["result"] == 7
    assert "first line" in final["captured_out"]
    assert "last line, printed while the beat waits" in final["captured_out"]
