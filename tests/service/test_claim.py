"""The claim rule on a real MongoDB, and a duplicated array task on the real Slurm testbed.

A rank may run an experiment when it is PENDING, or RUNNING/RESCHEDULED with this job's own
``execution.{cluster, array_id, task_id}`` (another rank of the job, or the task requeued).
Anything else is refused, and a refused rank touches nothing.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from datetime import datetime

import pytest
from support.run import run_app

from seml_hydra.core import states
from seml_hydra.job.claim import claim
from seml_hydra.job.runner import JobRunner

THIS_JOB = {"cluster": "semltest", "array_id": 500, "task_id": 3}
OTHER_JOBS = [
    {"cluster": "semltest", "array_id": 499, "task_id": 3},  # another array
    {"cluster": "semltest", "array_id": 500, "task_id": 4},  # another task of this array
    {"cluster": "elsewhere", "array_id": 500, "task_id": 3},  # another cluster
]


def insert(collection, status, execution=None, **extra):
    doc = {"_id": 1, "status": status, "config": {"x": 1}, "seed": 7, **extra}
    if execution is not None:
        doc["execution"] = dict(execution)
    collection.insert_one(doc)
    return collection.find_one({"_id": 1})


def recorded(execution: dict) -> dict:
    """A claimed ``execution`` without its ``claim_time`` (checked to be a date)."""
    assert isinstance(execution.get("claim_time"), datetime), execution
    return {k: v for k, v in execution.items() if k != "claim_time"}


def test_pending_is_claimed(test_db):
    coll = test_db["claims"]
    insert(coll, states.PENDING)
    doc, why = claim(coll, 1, {**THIS_JOB, "slurm_output_file": "/x/500_3_0_log.out"})
    assert why is None
    assert doc["status"] == states.RUNNING
    assert recorded(doc["execution"]) == {
        **THIS_JOB,
        "restart": 0,
        "slurm_output_file": "/x/500_3_0_log.out",
    }


@pytest.mark.parametrize("status", [states.RUNNING, states.RESCHEDULED])
def test_running_with_this_jobs_execution_is_claimed(test_db, status):
    """Another rank of the same job (or this array task requeued) runs it too."""
    coll = test_db["claims"]
    insert(coll, status, {**THIS_JOB, "slurm_output_file": "/x/primary.out"})
    doc, why = claim(coll, 1, THIS_JOB, record_execution=False)
    assert why is None and doc["status"] == states.RUNNING
    # a non-primary rank keeps the primary's output file paths
    assert recorded(doc["execution"]) == {
        **THIS_JOB,
        "restart": 0,
        "slurm_output_file": "/x/primary.out",
    }


def test_non_primary_claiming_first_sets_the_identity_only(test_db):
    coll = test_db["claims"]
    insert(coll, states.PENDING)
    doc, why = claim(coll, 1, {**THIS_JOB, "slurm_output_file": "/x/r1"}, record_execution=False)
    assert why is None and recorded(doc["execution"]) == {**THIS_JOB, "restart": 0}


@pytest.mark.parametrize("other", OTHER_JOBS)
@pytest.mark.parametrize("status", [states.RUNNING, states.RESCHEDULED])
def test_running_in_another_job_is_refused_and_untouched(test_db, status, other):
    coll = test_db["claims"]
    before = insert(coll, status, other)
    doc, why = claim(coll, 1, THIS_JOB)
    assert doc is None
    assert why == (
        f"it is {status} in job {other['array_id']}_{other['task_id']} on {other['cluster']}, "
        "not this job"
    )
    assert coll.find_one({"_id": 1}) == before


@pytest.mark.parametrize(
    "status",
    [
        states.COMPLETED,
        states.FAILED,
        states.KILLED,
        states.INTERRUPTED,
        states.STAGED,
    ],
)
@pytest.mark.parametrize("same_job", [True, False])
def test_finished_or_staged_is_refused_and_untouched(test_db, status, same_job):
    """A requeued or duplicated task never re-runs a finished experiment, even its own."""
    coll = test_db["claims"]
    before = insert(coll, status, THIS_JOB if same_job else OTHER_JOBS[0], result=42)
    doc, why = claim(coll, 1, THIS_JOB)
    assert doc is None and why == f"it is {status}, not PENDING"
    assert coll.find_one({"_id": 1}) == before


def test_missing_experiment_is_refused(test_db):
    assert claim(test_db["claims"], 1, THIS_JOB) == (None, "it no longer exists")


def test_only_one_of_two_jobs_claims_a_pending_experiment(test_db):
    coll = test_db["claims"]
    insert(coll, states.PENDING)
    first = claim(coll, 1, THIS_JOB)
    second = claim(coll, 1, OTHER_JOBS[0])
    assert first[1] is None and second[0] is None
    assert recorded(coll.find_one({"_id": 1})["execution"]) == {**THIS_JOB, "restart": 0}


def slurm_env(execution: dict, procid: int = 0) -> dict[str, str]:
    return {
        "SUBMITIT_EXECUTOR": "slurm",
        "SLURM_CLUSTER_NAME": execution["cluster"],
        "SLURM_JOB_ID": str(execution["array_id"] + 1000),
        "SLURM_ARRAY_JOB_ID": str(execution["array_id"]),
        "SLURM_ARRAY_TASK_ID": str(execution["task_id"]),
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": str(procid),
        "SLURM_LOCALID": str(procid),
        "SLURM_NODEID": "0",
        "SLURM_NTASKS": "2",
        "SLURM_JOB_NUM_NODES": "1",
    }


@pytest.mark.parametrize("status", [states.COMPLETED, states.FAILED])
def test_job_runner_refuses_a_finished_experiment_of_its_own_job(
    test_db, db_url, monkeypatch, caplog, status
):
    """The runner itself (as a rank of a requeued task): returns SKIPPED, writes nothing and
    does not raise (the job exits 0); the payload is never even loaded."""
    coll = test_db["claims"]
    before = insert(coll, status, THIS_JOB, result=42)
    for key, value in slurm_env(THIS_JOB, procid=1).items():
        monkeypatch.setenv(key, value)
    runner = JobRunner(db_cfg=None, collection="claims", payload_id="000000000000000000000000")
    with caplog.at_level(logging.WARNING, logger="seml_hydra.job.runner"):
        outcomes = runner([1])
    assert outcomes == [f"SKIPPED: it is {status}, not PENDING"]
    assert coll.find_one({"_id": 1}) == before
    assert f"Not running experiment 1 of claims: it is {status}, not PENDING" in caplog.text


def test_second_copy_of_a_completed_array_task_does_not_run_it_again(slurm, test_db, tmp_path):
    """End to end: a sweep on Slurm completes; then one of its array tasks is started again by
    hand from its submitit pickle, with the same SLURM_ARRAY_JOB_ID / SLURM_ARRAY_TASK_ID."""
    sweep = tmp_path / "sweep"
    proc = run_app(
        "ranks.py",
        "-m",
        "hydra/launcher=seml",
        f"hydra.sweep.dir={sweep}",
        f"report_dir={tmp_path / 'reports'}",
        "hydra.launcher.poll_interval_s=0.3",
        "tag=a,b",  # two points: a real array job
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = test_db["ranks"].find_one({"config.tag": "b"})
    assert doc["status"] == states.COMPLETED
    execution = doc["execution"]
    job_id = f"{execution['array_id']}_{execution['task_id']}"
    folder = sweep / ".submitit" / job_id
    assert (folder / f"{job_id}_submitted.pkl").exists(), list(folder.parent.iterdir())
    report = tmp_path / "reports" / "b" / "rank0.json"
    first_pid = json.loads(report.read_text())["pid"]

    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SUBMITIT_", "SBATCH_"))
    }
    env.update(slurm_env(execution))
    env["SLURM_NTASKS"] = "1"
    again = subprocess.run(
        [sys.executable, "-m", "submitit.core._submit", str(folder)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    after = test_db["ranks"].find_one({"_id": doc["_id"]})
    assert after == doc
    assert json.loads(report.read_text())["pid"] == first_pid  # the task did not run again
    log_text = again.stdout + again.stderr
    assert f"Not running experiment {doc['_id']} of ranks: it is COMPLETED, not PENDING" in (
        log_text
    ), log_text[-3000:]


def test_claimed_experiment_that_cannot_start_is_failed_not_left_running(
    test_db, db_url, monkeypatch
):
    """Claimed, then the setup fails (here: the batch payload is gone from GridFS): the
    experiment is FAILED with this rank's trace, and the job fails."""
    from seml_hydra.job.runner import RankExperimentsFailed

    coll = test_db["claims"]
    insert(coll, states.PENDING, hydra={"node_diff": []})
    for key, value in {**slurm_env(THIS_JOB), "SLURM_NTASKS": "1"}.items():
        monkeypatch.setenv(key, value)
    runner = JobRunner(db_cfg=None, collection="claims", payload_id="0123456789abcdef01234567")
    with pytest.raises(RankExperimentsFailed, match="experiment"):
        runner([1])
    doc = coll.find_one({"_id": 1})
    assert doc["status"] == states.FAILED
    assert [f["rank"] for f in doc["rank_failures"]] == [0]
    trace = "".join(doc["fail_trace"])
    assert "rank 0" in trace and "NoFile" in trace


@pytest.mark.parametrize(
    "slurm",
    [
        [{"array_id": 500, "task_id": 3}],  # ours: slurm[0], an integer
        [{"array_id": "500"}],  # a string
        [{"sbatch_options": {}}, {"array_id": 500}],  # SEML 0.5: the entry it submitted with
        [{"submitting": {"token": "x"}}],  # between sbatch and the write of the job's ids
    ],
)
def test_pending_of_this_array_or_of_no_recorded_array_is_claimed(test_db, slurm):
    coll = test_db["claims"]
    insert(coll, states.PENDING, slurm=slurm)
    doc, why = claim(coll, 1, THIS_JOB)
    assert why is None and doc["status"] == states.RUNNING


def test_pending_recorded_in_another_array_is_refused_and_untouched(test_db):
    """An orphan array (its submitter died before recording it; the experiments were submitted
    again since, as array 501) must not run them: they wait for their recorded array."""
    coll = test_db["claims"]
    before = insert(coll, states.PENDING, slurm=[{"array_id": 501, "task_id": 3}])
    doc, why = claim(coll, 1, THIS_JOB)
    assert doc is None and why == "it is PENDING for job 501, not for this job 500"
    assert coll.find_one({"_id": 1}) == before


def test_an_array_no_document_records_runs_none_of_the_experiments(slurm, test_db, tmp_path):
    """The orphan of a launcher that died between sbatch and recording the job: after its
    experiments were submitted again (their documents name another array), releasing the
    orphan runs none of them; they stay PENDING for their recorded array."""
    from support.mongo import statuses
    from support.slurm import squeue_tasks
    from support.wait import wait_until

    coll = test_db["gate"]
    proc = run_app(
        "../tests/apps/gate.py",
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.wait=false",
        "hydra.launcher.experiments_per_job=1",
        f"gate={tmp_path / 'go'}",
        "x=1,2",
        "+hydra.launcher.additional_parameters.hold=true",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    orphan = coll.find_one({"_id": 1})["slurm"][0]["array_id"]
    try:
        # as if submitted again as another array after the record of `orphan` was lost
        coll.update_many({}, {"$set": {"slurm.0.array_id": orphan + 100000}})
        subprocess.run(["scontrol", "release", str(orphan)], check=True)
        wait_until(
            "the orphan array ends (or runs an experiment)",
            lambda: squeue_tasks(orphan) == {} or set(statuses(coll).values()) != {"PENDING"},
        )
        assert statuses(coll) == {1: "PENDING", 2: "PENDING"}
        assert all("execution" not in d for d in coll.find())
        logs = "".join(path.read_text() for path in tmp_path.rglob(f"{orphan}_*_log.*"))
        for exp_id in (1, 2):
            assert (
                f"Not running experiment {exp_id} of gate: it is PENDING for job "
                f"{orphan + 100000}, not for this job {orphan}" in logs
            ), logs
    finally:
        subprocess.run(["scancel", str(orphan)], check=True)
