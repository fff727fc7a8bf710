"""A run's saves and a fail-fast stop (``seml_hydra.job.failfast``): a real Sacred run
(``seml_hydra.job.observed.run_observed``) in this process, on the test mongod."""

from __future__ import annotations

import pytest

from seml_hydra.job.claim import fence
from seml_hydra.job.observed import run_observed

pytestmark = pytest.mark.mongo

REASON = "fail-fast: 2 experiments failed: ids 1, 2"


def test_a_run_starting_after_its_launch_was_stopped_does_not_write_running_over_the_stop(
    test_db,
):
    """The stop marks the claimed experiment INTERRUPTED before Sacred's first save: that save
    and the heartbeats must leave the mark (a waiting launcher may already have read it and
    exited); only the run's own final save writes its outcome."""
    coll = test_db["stopped"]
    doc = {
        "_id": 3,
        "status": "RUNNING",
        "config": {"x": 3},
        "seed": 1,
        "seml": {"name": "stopped"},
        "execution": {"restart": 0},
        "fail_fast": {"group": "g", "max_failures": 2},
    }
    coll.insert_one(doc)
    coll.update_one(
        {"_id": 3},
        {"$set": {"status": "INTERRUPTED", "fail_fast.reason": REASON, "fail_trace": [REASON]}},
    )
    seen = []

    def task() -> int:
        seen.append(coll.find_one({"_id": 3})["status"])  # after Sacred's started_event
        return 7

    assert run_observed(test_db, "stopped", doc, task, fence=fence(doc)) == 7
    assert seen == ["INTERRUPTED"]
    assert coll.find_one({"_id": 3})["fail_fast"]["reason"] == REASON
