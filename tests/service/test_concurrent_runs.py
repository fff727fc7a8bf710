"""Two runs, or two ranks, of one experiment writing at once, on the real MongoDB.

- A requeued array task (Slurm's ``SLURM_RESTART_COUNT`` larger, ``execution.restart``) finds
  its experiment RUNNING in the earlier run of the same task, e.g. after the node's slurmd died
  while the task lived on: it takes over only when the earlier run's heartbeat is stale, waits
  otherwise, and never runs a finished one again. Other ranks of the same run claim as always.
  The Slurm end-to-end case is in test_node_failure.py.
- Ranks recording their failures at the same time keep each other's ``fail_trace`` headers.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from seml_hydra.core import states
from seml_hydra.job import claim as claiming
from seml_hydra.job.claim import claim, claim_after_earlier_run, fence
from seml_hydra.job.failures import fail_if_a_rank_failed, rank_failure_header, record_rank_failure
from seml_hydra.job.observer import _WithoutUpsert
from seml_hydra.job.slurm_env import restart_count

JOB = {"cluster": "semltest", "array_id": 700, "task_id": 2}
EARLIER = {**JOB, "restart": 0}
REQUEUED = {**JOB, "restart": 1}
STALE = timedelta(seconds=states.HEARTBEAT_STALE_S + 30)
FRESH = timedelta(seconds=3)


@pytest.fixture(params=["UTC", "America/New_York", "Asia/Tokyo"])
def local_tz(request):
    """This process' local time zone (the claim must not depend on it)."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = request.param
    time.tzset()
    yield request.param
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def sacred_time(age: timedelta) -> datetime:
    """A time ``age`` ago the way Sacred writes it: ``datetime.utcnow()``, naive UTC."""
    return datetime.now(timezone.utc).replace(tzinfo=None) - age


def insert_running(coll, execution, **signs):
    """The experiment RUNNING in ``execution`` with the given heartbeat/start_time/claim_time."""
    execution = dict(execution)
    if "claim_time" in signs:
        execution["claim_time"] = signs.pop("claim_time")
    coll.insert_one({"_id": 1, "status": states.RUNNING, "execution": execution, **signs})
    return coll.find_one({"_id": 1})


STALE_SIGNS = {
    "stale heartbeat": lambda: {"heartbeat": sacred_time(STALE), "start_time": sacred_time(STALE)},
    "aware stale heartbeat": lambda: {
        "heartbeat": datetime.now(timezone.utc) - STALE,
        "start_time": datetime.now(timezone.utc) - STALE,
    },
    # the CI failure of the first attempt (branch claim-restart): test_node_failure.py kills
    # the run as soon as Sacred started it, before its first heartbeat (Sacred beats after
    # 10 s; until then the document holds ``heartbeat: None``), so only start_time tells
    "killed before its first heartbeat": lambda: {
        "heartbeat": None,
        "start_time": sacred_time(STALE),
        "claim_time": datetime.now(timezone.utc) - STALE,
    },
    "stale claim, never started": lambda: {"claim_time": datetime.now(timezone.utc) - STALE},
    "nothing recorded (an old document)": lambda: {},
}
FRESH_SIGNS = {
    "fresh heartbeat": lambda: {"heartbeat": sacred_time(FRESH), "start_time": sacred_time(STALE)},
    "started, no heartbeat yet": lambda: {"heartbeat": None, "start_time": sacred_time(FRESH)},
    "just claimed, not started yet": lambda: {"claim_time": datetime.now(timezone.utc) - FRESH},
}


@pytest.mark.parametrize("signs", STALE_SIGNS.values(), ids=STALE_SIGNS.keys())
def test_a_requeued_run_takes_over_from_a_dead_earlier_run(test_db, local_tz, signs):
    coll = test_db["runs"]
    insert_running(coll, EARLIER, **signs())
    doc, why = claim(coll, 1, REQUEUED)
    assert why is None
    assert doc["status"] == states.RUNNING and doc["execution"]["restart"] == 1


@pytest.mark.parametrize("signs", FRESH_SIGNS.values(), ids=FRESH_SIGNS.keys())
def test_a_requeued_run_leaves_an_earlier_run_alive_untouched(test_db, local_tz, signs):
    """Slurm requeued the job, but its earlier run lives on (e.g. only slurmd died)."""
    coll = test_db["runs"]
    before = insert_running(coll, EARLIER, **signs())
    doc, why = claim(coll, 1, REQUEUED)
    assert doc is None
    assert why.startswith(
        "still runs in an earlier run of this array task (Slurm restart 0, this run is restart 1"
    ), why
    assert coll.find_one({"_id": 1}) == before


def test_other_ranks_of_the_same_run_claim_whatever_the_heartbeat(test_db):
    coll = test_db["runs"]
    insert_running(coll, REQUEUED, heartbeat=sacred_time(FRESH))
    doc, why = claim(coll, 1, REQUEUED, record_execution=False)
    assert why is None and doc["execution"]["restart"] == 1


def test_a_run_never_takes_over_from_a_later_run(test_db):
    """A straggler of the earlier run (restart 0) finds the requeued run's claim, even stale."""
    coll = test_db["runs"]
    before = insert_running(coll, {**JOB, "restart": 2}, heartbeat=sacred_time(STALE))
    doc, why = claim(coll, 1, REQUEUED)
    assert doc is None
    assert why == "it is RUNNING in a later run of this array task (restart 2 > 1)"
    assert coll.find_one({"_id": 1}) == before


def test_our_own_time_limit_requeue_is_claimed_at_once(test_db):
    """``JobRunner.checkpoint`` marked it RESCHEDULED and ``scontrol requeue`` incremented
    SLURM_RESTART_COUNT: the requeued run resumes it while the heartbeat is still fresh."""
    coll = test_db["runs"]
    coll.insert_one(
        {
            "_id": 1,
            "status": states.RESCHEDULED,
            "execution": EARLIER,
            "heartbeat": sacred_time(FRESH),
        }
    )
    doc, why = claim(coll, 1, REQUEUED)
    assert why is None and doc["status"] == states.RUNNING


def pause_with(monkeypatch, on_pause) -> None:
    """Make the claim's pauses (``time.sleep`` in this test's thread) call ``on_pause(seconds)``
    instead; the sleeps of other threads (pymongo's monitors sleep 0.5 s too) stay real."""
    real_sleep, mine = time.sleep, threading.current_thread()

    def sleep(seconds):
        if threading.current_thread() is not mine:
            return real_sleep(seconds)
        return on_pause(seconds)

    monkeypatch.setattr(claiming.time, "sleep", sleep)


def test_a_requeued_run_waits_and_does_not_rerun_what_the_earlier_run_completed(
    test_db, monkeypatch, caplog
):
    """The earlier run completes while the requeued one waits (here: during its first pause)."""
    coll = test_db["runs"]
    insert_running(coll, EARLIER, heartbeat=sacred_time(FRESH))
    pauses = []

    def earlier_run_completes(seconds):
        pauses.append(seconds)
        coll.update_one({"_id": 1}, {"$set": {"status": states.COMPLETED, "result": 7}})

    pause_with(monkeypatch, earlier_run_completes)
    with caplog.at_level(logging.WARNING, logger="seml_hydra.job.claim"):
        doc, why = claim_after_earlier_run(coll, 1, REQUEUED, poll_s=0.5)
    assert (doc, why) == (None, "it is COMPLETED, not PENDING")
    assert pauses == [0.5]
    assert "Experiment 1 still runs in an earlier run of this array task" in caplog.text
    assert coll.find_one({"_id": 1})["execution"] == EARLIER


def test_a_requeued_run_takes_over_when_the_earlier_run_dies_while_it_waits(test_db, monkeypatch):
    coll = test_db["runs"]
    insert_running(coll, EARLIER, heartbeat=sacred_time(FRESH))

    def earlier_run_dies(seconds):  # its last heartbeat ages past the bound
        coll.update_one({"_id": 1}, {"$set": {"heartbeat": sacred_time(STALE)}})

    pause_with(monkeypatch, earlier_run_dies)
    doc, why = claim_after_earlier_run(coll, 1, REQUEUED, poll_s=0.5)
    assert why is None and doc["execution"]["restart"] == 1


def test_the_wait_for_an_earlier_run_is_bounded(test_db, monkeypatch):
    coll = test_db["runs"]
    before = insert_running(coll, EARLIER, heartbeat=sacred_time(FRESH))
    pause_with(monkeypatch, lambda s: pytest.fail("waited past the bound"))
    doc, why = claim_after_earlier_run(coll, 1, REQUEUED, max_wait_s=0)
    assert doc is None and why.endswith("; gave up waiting after 0 s")
    assert coll.find_one({"_id": 1}) == before


def test_an_earlier_run_that_lives_on_cannot_write_over_the_run_that_took_over(test_db):
    """The observer's saves of the earlier run are fenced by its restart count."""
    coll = test_db["runs"]
    earlier = insert_running(coll, EARLIER, claim_time=datetime.now(timezone.utc) - STALE)
    later, _ = claim(coll, 1, REQUEUED)
    _WithoutUpsert(coll, fence(earlier)).update_one(
        {"_id": 1}, {"$set": {"status": states.FAILED, "heartbeat": sacred_time(FRESH)}}
    )
    assert coll.find_one({"_id": 1}) == later
    _WithoutUpsert(coll, fence(later)).update_one({"_id": 1}, {"$set": {"result": 3}}, upsert=True)
    assert coll.find_one({"_id": 1})["result"] == 3


def test_restart_count():
    assert restart_count({}) == 0
    assert restart_count({"SLURM_RESTART_COUNT": "2"}) == 2
    with pytest.raises(ValueError, match="SLURM_RESTART_COUNT='x' is not an integer"):
        restart_count({"SLURM_RESTART_COUNT": "x"})


# --------------------------------------------------------------------------------------------
# ranks recording failures at once
# --------------------------------------------------------------------------------------------


class _WritesAfter:
    """The collection as one rank sees it, with ``before_write()`` (the other rank's work)
    happening between this rank's read and its write: the racy order, made deterministic."""

    def __init__(self, collection, before_write):
        self._collection = collection
        self._before_write = before_write

    def update_one(self, *args, **kwargs):
        self._before_write()
        return self._collection.update_one(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._collection, name)


def test_two_ranks_failing_at_once_keep_both_headers_in_fail_trace(test_db):
    coll = test_db["runs"]
    sacred_trace = ["Traceback (most recent call last):\n", "ValueError: rank 0\n"]
    coll.insert_one({"_id": 1, "status": states.FAILED, "fail_trace": sacred_trace})
    record_rank_failure(coll, 1, 1, "Traceback\n$ a line with a dollar\nKeyError: 1\n")

    def rank_2_fails():  # after rank 1 read the document, before it writes
        record_rank_failure(coll, 1, 2, "Traceback\nOSError: 2\n")
        fail_if_a_rank_failed(coll, 1)

    fail_if_a_rank_failed(_WritesAfter(coll, rank_2_fails), 1)
    doc = coll.find_one({"_id": 1})
    trace = doc["fail_trace"]
    headers = [line for line in trace if line.startswith("--- rank")]
    assert sorted(headers) == sorted({rank_failure_header(f) for f in doc["rank_failures"]}), trace
    assert len(headers) == 2
    assert trace[:2] == sacred_trace
    assert "$ a line with a dollar\n" in trace and "OSError: 2\n" in trace
    assert doc["status"] == states.FAILED
    fail_if_a_rank_failed(coll, 1)  # again: nothing added twice
    assert coll.find_one({"_id": 1})["fail_trace"] == trace
