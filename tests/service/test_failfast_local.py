"""Fail-fast with ``hydra/launcher=seml_local`` (submitit's local executor), on the test mongod:
a stop marks a running local experiment INTERRUPTED but does not end its process (as ``seml
cancel``); when that run then ends COMPLETED, it was not stopped, and its document says so."""

from __future__ import annotations

import pytest
from conftest import start_app, statuses, wait_running, wait_until

pytestmark = pytest.mark.mongo

ONE_REASON = "fail-fast: 1 experiment failed: id 1"


def test_a_stopped_local_run_that_completes_drops_the_stop(test_db, tmp_path):
    fail_gate, gate = tmp_path / "fail now", tmp_path / "go"
    proc = start_app(
        "tests/apps/gate.py",
        "-m",
        "hydra/launcher=seml_local",
        "hydra.launcher.max_failures=1",
        "+fail_below=1",
        f"+fail_gate={fail_gate}",
        f"gate={gate}",
        "max_wait_s=120",
        "x=0,1",
        cwd=tmp_path,
    )
    coll = test_db["gate"]
    try:
        wait_running(coll, proc, count=2, timeout=120)
        fail_gate.touch()  # experiment 1 raises: its job stops the launch
        wait_until("2 stopped", lambda: statuses(coll).get(2) == "INTERRUPTED", timeout=120)
        assert coll.find_one({"_id": 2})["fail_fast"]["reason"] == ONE_REASON
        gate.touch()  # its process was not ended: it runs to the end
        wait_until("2 completed", lambda: statuses(coll).get(2) == "COMPLETED", timeout=120)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    doc = coll.find_one({"_id": 2})
    assert doc["result"] == 10
    # a completed run is not "stopped": no reason, no fail trace; its launch's mark stays
    wait_until(
        "the stop's mark dropped",
        lambda: "reason" not in coll.find_one({"_id": 2})["fail_fast"],
        30,
    )
    doc = coll.find_one({"_id": 2})
    assert set(doc["fail_fast"]) == {"group", "max_failures"}, doc["fail_fast"]
    assert "fail_trace" not in doc
    assert statuses(coll) == {1: "FAILED", 2: "COMPLETED"}
