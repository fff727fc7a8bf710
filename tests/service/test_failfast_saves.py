"""A run's saves and a fail-fast stop (``seml_hydra.job.failfast``): a real Sacred run
(``seml_hydra.job.observed.run_observed``) in this process, on the test mongod."""

from __future__ import annotations

import pytest

from seml_hydra.job.claim import fence
from seml_hydra.job.observed import run_observed

pytestmark = pytest.mark.mongo

REASON = "fail-fast: 2 experiments failed: ids 1, 2"


def running(exp_id: int, collection: str, **fields: object) -> dict:
    """A claimed experiment document as the run starts (RUNNING, run 0), plus ``fields``."""
    return {
        "_id": exp_id,
        "status": "RUNNING",
        "config": {"x": exp_id},
        "seed": 1,
        "seml": {"name": collection},
        "execution": {"restart": 0},
        **fields,
    }


def test_a_run_starting_after_its_launch_was_stopped_does_not_write_running_over_the_stop(
    test_db,
):
    """The stop marks the claimed experiment INTERRUPTED before Sacred's first save: that save
    and the heartbeats must leave the mark (a waiting launcher may already have read it and
    exited); only the run's own final save writes its outcome."""
    coll = test_db["stopped"]
    doc = running(3, "stopped", fail_fast={"group": "g", "max_failures": 2})
    coll.insert_one(doc)
    coll.update_one(
        {"_id": 3},
        {"$set": {"status": "INTERRUPTED", "fail_fast.reason": REASON, "fail_trace": [REASON]}},
    )
    seen = []

    def task() -> int:
        seen.append(coll.find_one({"_id": 3})["status"])  # after Sacred's started_event
        return 7

    observers: list = []
    assert run_observed(test_db, "stopped", doc, task, fence=fence(doc), observers=observers) == 7
    assert seen == ["INTERRUPTED"]
    assert coll.find_one({"_id": 3})["fail_fast"]["reason"] == REASON
    assert coll.find_one({"_id": 3})["status"] == "COMPLETED"
    assert observers[0].over_stop  # the job drops the mark (failfast.unmark_completed)


def test_a_run_of_a_launch_that_was_not_stopped_says_its_final_save_found_no_stop(test_db):
    """The usual case: the final save matches the document without a stop's mark at once, so
    the job has no mark to drop and reads nothing more (``JobRunner._run_one``)."""
    coll = test_db["unstopped"]
    doc = running(3, "unstopped", fail_fast={"group": "g", "max_failures": 2})
    coll.insert_one(doc)
    observers: list = []
    assert (
        run_observed(test_db, "unstopped", doc, lambda: 7, fence=fence(doc), observers=observers)
        == 7
    )
    assert coll.find_one({"_id": 3})["status"] == "COMPLETED"
    assert not observers[0].over_stop


def test_the_stop_drops_its_mark_from_runs_that_completed_before_their_task_ended(test_db):
    """What a Slurm stop does once its cancelled tasks are gone (``failfast.stop_group``): a
    run that finished within Slurm's KillWait ended COMPLETED and is not "stopped" (as a
    ``seml_local`` run that completes); the INTERRUPTED ones keep the reason, and a fail trace
    that is not the stop's stays."""
    from seml_hydra.job.failfast import unmark_completed

    coll = test_db["stopped"]
    stop = {"group": "g", "max_failures": 2, "reason": REASON, "stop_time": 1}
    coll.insert_many(
        [
            {"_id": 3, "status": "INTERRUPTED", "fail_fast": stop, "fail_trace": [REASON + "\n"]},
            {"_id": 4, "status": "COMPLETED", "fail_fast": stop, "fail_trace": [REASON + "\n"]},
            {"_id": 5, "status": "COMPLETED", "fail_fast": stop, "fail_trace": ["its own\n"]},
        ]
    )
    assert unmark_completed(coll, [3, 4, 5]) == [4, 5]
    docs = {d["_id"]: d for d in coll.find()}
    assert docs[3]["fail_fast"] == stop and docs[3]["fail_trace"] == [REASON + "\n"]
    assert docs[4]["fail_fast"] == {"group": "g", "max_failures": 2}
    assert "fail_trace" not in docs[4]
    assert docs[5]["fail_fast"] == {"group": "g", "max_failures": 2}
    assert docs[5]["fail_trace"] == ["its own\n"]
    assert unmark_completed(coll, [3, 4, 5]) == []  # idempotent


def test_a_run_whose_other_rank_failed_does_not_write_running_over_the_failure(test_db):
    """Another rank of a multi-task experiment failed and marked it FAILED
    (``job.failures``) while the primary's run goes on: the primary's non-final saves (Sacred's
    first save, heartbeats) must leave FAILED (the launcher may have returned on it); only the
    run's own final save writes its outcome."""
    coll = test_db["ranks"]
    doc = running(1, "ranks")
    coll.insert_one(doc)
    coll.update_one({"_id": 1}, {"$set": {"status": "FAILED", "fail_trace": ["--- rank 1\n"]}})
    seen = []

    def task() -> int:
        seen.append(coll.find_one({"_id": 1})["status"])  # after Sacred's started_event
        return 7

    assert run_observed(test_db, "ranks", doc, task, fence=fence(doc)) == 7
    assert seen == ["FAILED"]
