"""core.schema: the experiment document's types match what staging writes, and importing them
imports no pymongo."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone

from seml_hydra.core.documents import build_document
from seml_hydra.core.schema import ExperimentDoc, SemlDoc, SlurmDoc


def staged() -> dict:
    return build_document(
        exp_id=1,
        batch_id=1,
        config={"lr": 0.1},
        overrides=["lr=0.1"],
        hydra={"overrides": ["lr=0.1"], "job_num": 0},
        seed=5,
        seml={"executable": "/w/app.py", "name": "exp", "working_dir": "/w"},
        sbatch_options={"time": 60},
        experiments_per_job=1,
        git={"path": "/w", "commit": "abc", "dirty": False},
        add_time=datetime(2026, 1, 1, tzinfo=timezone.utc),
    )


def test_a_staged_document_has_the_required_fields_and_only_fields_the_schema_names():
    doc = staged()
    every = ExperimentDoc.__required_keys__ | ExperimentDoc.__optional_keys__
    assert ExperimentDoc.__required_keys__ <= set(doc) <= every
    assert set(doc["seml"]) <= SemlDoc.__optional_keys__
    assert set(doc["slurm"][0]) <= SlurmDoc.__optional_keys__


def test_the_run_and_our_fields_are_optional():
    for field in ("start_time", "result", "fail_trace", "fail_fast", "pruned", "attempts"):
        assert field in ExperimentDoc.__optional_keys__


def test_importing_the_schema_imports_no_pymongo():
    code = "import sys, seml_hydra.core.schema; print('pymongo' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]
