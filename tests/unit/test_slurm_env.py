"""The one reading of a job's environment (``seml_hydra.job.slurm_env``): the experiment's
``execution`` identity, the rank plan and the rank named in messages agree on what the
variables say (pure: no services)."""

from __future__ import annotations

import pytest

from seml_hydra.job.rank import plan_rank
from seml_hydra.job.slurm_env import (
    RankEnvironmentError,
    execution_identity,
    placement,
    rank_label,
    source_of,
)

ARRAY_TASK = {
    "SUBMITIT_EXECUTOR": "slurm",
    "SLURM_JOB_ID": "1005",
    "SLURM_ARRAY_JOB_ID": "1000",
    "SLURM_ARRAY_TASK_ID": "5",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "0",
    "SLURM_NTASKS": "2",
    "SLURM_JOB_NUM_NODES": "1",
}
PLAIN_JOB = {"SLURM_JOB_ID": "77"}
LOCAL = {
    "SUBMITIT_EXECUTOR": "local",
    "SUBMITIT_LOCAL_JOB_ID": "4242",
    "SUBMITIT_LOCAL_GLOBALID": "0",
    "SUBMITIT_LOCAL_LOCALID": "0",
    "SUBMITIT_LOCAL_NTASKS": "1",
    "SUBMITIT_LOCAL_NODEID": "0",
    "SUBMITIT_LOCAL_JOB_NUM_NODES": "1",
    "SLURM_JOB_ID": "9",  # a local executor inside a Slurm allocation: the local job wins
}


@pytest.mark.parametrize(
    "env, identity, job_id, label",
    [
        (ARRAY_TASK, {"cluster": "slurm", "array_id": 1000, "task_id": 5}, "1000_5", "1"),
        (PLAIN_JOB, {"cluster": "slurm", "array_id": 77, "task_id": 0}, "77", "0"),
        (LOCAL, {"cluster": "local", "array_id": 4242, "task_id": 0}, "4242", "0"),
    ],
    ids=["slurm-array-task", "slurm-plain-job", "submitit-local"],
)
def test_identity_rank_plan_and_label_read_the_same_job(env, identity, job_id, label):
    plan = plan_rank(env, {})
    assert execution_identity(env) == identity
    assert plan.job_id == job_id
    assert str(plan.global_rank) == rank_label(env) == label
    assert plan.source == source_of(env) == placement(env).source


def test_an_array_job_id_without_its_task_id_is_refused_by_identity_and_plan_alike():
    """One rule for the two array variables: the identity no longer takes task 0 for an array
    task whose index is missing, where the rank plan refused it."""
    env = {"SLURM_JOB_ID": "1005", "SLURM_ARRAY_JOB_ID": "1000"}
    with pytest.raises(RankEnvironmentError, match="SLURM_ARRAY_TASK_ID is not set"):
        plan_rank(env, {})
    with pytest.raises(RankEnvironmentError, match="SLURM_ARRAY_TASK_ID is not set"):
        execution_identity(env)


def test_rank_label_never_raises_where_the_plan_does():
    env = {**ARRAY_TASK, "SLURM_PROCID": "x"}
    with pytest.raises(RankEnvironmentError, match="SLURM_PROCID='x' is not an integer"):
        placement(env)
    assert rank_label(env) == "x"
