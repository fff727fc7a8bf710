"""Stored data from before the sub-package layout keeps working: a batch staged and
a job file pickled by seml-hydra at commit 0b03e4b, when the run step was the module
``seml_hydra.run`` (fixtures made by ``tests/fixtures/old_layout/make_old_payload.py``). Their
pickles name ``seml_hydra.run.Payload`` and ``seml_hydra.run.JobRunner``, and the app's task
imports ``seml_hydra.rank``: the alias modules keep those names."""

from __future__ import annotations

from pathlib import Path

import bson
import pytest
from support.mongo import statuses
from support.wait import wait_until
from typer.testing import CliRunner

from seml_hydra.cli import app
from seml_hydra.job.runner import JobRunner
from seml_hydra.store.payload import Payload, hydra_base, load_payload

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "old_layout"
COLLECTION = "old_layout"


def old_batch() -> dict:
    """``{"documents", "payload", "metadata"}`` as the old launcher stored them."""
    return bson.decode((FIXTURES / "batch.bson").read_bytes())


def put_old_payload(db, batch: dict, sweep_dir: Path | None = None) -> str:
    """Store the old payload in GridFS with its own metadata (its base Hydra node's sweep
    directory moved to ``sweep_dir`` when given: the directory the sweep was launched from is
    gone); returns its file id."""
    import gridfs

    metadata = dict(batch["metadata"])
    if sweep_dir is not None:
        base = metadata["hydra_base"]
        metadata["hydra_base"] = {**base, "sweep": {**base["sweep"], "dir": str(sweep_dir)}}
    file_id = gridfs.GridFS(db).put(
        bytes(batch["payload"]), filename=f"seml_hydra_payload_{COLLECTION}", metadata=metadata
    )
    return str(file_id)


def test_the_old_payload_pickles_the_old_module_name():
    """The fixture is what the brief says: an old-layout pickle (guards the fixture itself)."""
    blob = bytes(old_batch()["payload"])
    assert b"seml_hydra.run" in blob and b"seml_hydra.job" not in blob


@pytest.mark.mongo
def test_an_old_layout_payload_loads_through_the_jobs_load_path(test_db):
    """``store.payload.load_payload`` (what every job calls) unpickles the old payload into
    today's :class:`Payload`, with a callable task and a typed base node that unpickles too."""
    import pickle

    batch = old_batch()
    payload_id = put_old_payload(test_db, batch)
    payload, base = load_payload(test_db, payload_id)
    assert type(payload) is Payload
    assert callable(payload.task_function)
    assert pickle.loads(payload.typed_hydra_base) is not None
    assert base == batch["metadata"]["hydra_base"] == hydra_base(test_db, payload_id)


def test_an_old_layout_job_file_unpickles_to_todays_job_runner():
    """submitit's job file of an array task submitted before the layout (a cloudpickled
    ``DelayedSubmission`` of ``seml_hydra.run.JobRunner``) loads into today's runner."""
    from submitit.core.utils import DelayedSubmission

    submission = DelayedSubmission.load(FIXTURES / "job.pkl")
    assert type(submission.function) is JobRunner
    assert submission.function.collection == COLLECTION
    assert submission.args == ([1],)


@pytest.mark.slurm
def test_experiments_staged_by_the_old_layout_run_to_completed_on_slurm(
    slurm, test_db, tmp_path, monkeypatch
):
    """The old batch, started from the database alone (``seml old_layout start``), runs on the
    Slurm testbed with today's code: both experiments COMPLETED with the task's results."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    batch = old_batch()
    payload_id = put_old_payload(test_db, batch, sweep_dir=tmp_path / "multirun")
    docs = []
    for doc in batch["documents"]:
        seml = {**doc["seml"], "payload_file": payload_id, "working_dir": str(tmp_path)}
        docs.append({**doc, "seml": seml})
    test_db[COLLECTION].insert_many(docs)

    result = CliRunner().invoke(app, [COLLECTION, "start"], prog_name="seml")
    assert result.exit_code == 0, (result.output, result.exception)
    assert "Started 2 experiment(s)" in result.output
    coll = test_db[COLLECTION]
    wait_until(
        "both old-layout experiments end",
        lambda: (
            set(statuses(coll).values()) <= {"COMPLETED", "FAILED"} and len(statuses(coll)) == 2
        ),
    )
    failed = {d["_id"]: d.get("fail_trace") for d in coll.find({"status": "FAILED"})}
    assert not failed, failed
    results = {d["_id"]: d["result"] for d in coll.find()}
    assert results == {1: {"value": 10, "world_size": 1}, 2: {"value": 20, "world_size": 1}}
