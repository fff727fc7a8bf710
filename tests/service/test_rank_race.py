"""A rank that fails after the primary's task ended still fails the experiment before the
launcher returns (the multi-rank race of note 4): the primary waits for the other ranks'
outcome before its final save, so the document is never COMPLETED while a rank can still fail.

``tests/apps/late_rank_app.py`` makes the race deterministic: its rank 1 fails only once rank 0
is waiting, or, when rank 0 saved COMPLETED without waiting, only after the launcher returned.
"""

from __future__ import annotations

import subprocess
import sys

from support.paths import ROOT
from support.wait import wait_until


def test_a_rank_failing_after_the_primary_ended_fails_the_launch(test_db, tmp_path):
    gate = tmp_path / "launcher-returned"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests/apps/late_rank_app.py"),
            "-m",
            "hydra/launcher=seml_local",
            "hydra.launcher.poll_interval_s=0.2",
            "hydra.launcher.tasks_per_node=2",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
            f"gate={gate}",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, stderr = proc.communicate(timeout=240)
    finally:
        gate.touch()  # lets rank 1 of a primary that did not wait fail now
    assert proc.returncode != 0, "the launcher returned success before rank 1 failed"
    assert "late failure on rank 1 (rank 0: waits)" in stderr
    collection = test_db["late_rank_app"]
    doc = wait_until(
        "rank 1's failure is recorded", lambda: collection.find_one({"rank_ends.rank": 1})
    )
    assert doc["status"] == "FAILED"
    assert [f["rank"] for f in doc["rank_failures"]] == [1]
    trace = "".join(doc["fail_trace"])
    assert "rank(s) 1 of experiment" in trace and "late failure on rank 1" in trace
    assert sorted((e["rank"], e["restart"]) for e in doc["rank_ends"]) == [(0, 0), (1, 0)]
