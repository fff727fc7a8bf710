"""``seml_local`` spreads the machine's GPUs over its jobs and ranks
(``hydra.launcher.visible_gpus``), the pure parts: which GPUs job i / rank r gets, the job's
environment, what each rank process sets, and the refused values. No MongoDB, no processes."""

from __future__ import annotations

import pytest
from support.launcher_conf import launcher

from seml_hydra.job.devices import (
    GPUS_PER_TASK_VAR,
    LOCAL_GPUS_VAR,
    local_device,
    local_gpu_environment,
    local_job_environment,
    local_rank_gpus,
)
from seml_hydra.launch.sbatch import resource_key, validate_launcher


def test_one_gpu_per_rank_each_job_its_own_slice():
    node = launcher(visible_gpus=[0, 1, 2, 3], tasks_per_node=2, gpus_per_task=1)
    assert local_rank_gpus(node, 0) == [["0"], ["1"]]
    assert local_rank_gpus(node, 1) == [["2"], ["3"]]


def test_more_jobs_than_gpus_wrap_around():
    node = launcher(visible_gpus=[4, 6, 7], gpus_per_node=1)
    assert [local_rank_gpus(node, i) for i in range(4)] == [[["4"]], [["6"]], [["7"]], [["4"]]]


def test_gpus_per_task_above_one_gives_consecutive_gpus():
    node = launcher(visible_gpus=list(range(8)), tasks_per_node=2, gpus_per_task=2)
    assert local_rank_gpus(node, 1) == [["4", "5"], ["6", "7"]]


def test_gpus_per_node_without_binding_every_rank_sees_the_jobs_gpus():
    """As Slurm without --gpus-per-task: the ranks share the job's GPUs (local_device picks)."""
    node = launcher(visible_gpus=[0, 1, 2, 3], tasks_per_node=2, gpus_per_node=2)
    assert local_rank_gpus(node, 1) == [["2", "3"], ["2", "3"]]


def test_without_visible_gpus_every_job_gets_the_first_ones_as_submitit_does():
    node = launcher(tasks_per_node=2, gpus_per_task=1)
    assert local_rank_gpus(node, 0) == local_rank_gpus(node, 5) == [["0"], ["1"]]


def test_gpu_names_are_kept():
    node = launcher(visible_gpus=["GPU-a1", "MIG-2/1/0"], gpus_per_task=1)
    assert local_rank_gpus(node, 1) == [["MIG-2/1/0"]]


def test_no_gpu_asked_no_environment():
    assert local_job_environment(launcher(), 3) == {}
    assert local_rank_gpus(launcher(tasks_per_node=2), 0) == [[], []]


def test_the_job_environment_lists_every_rank():
    node = launcher(visible_gpus=[0, 1, 2, 3, 4, 5], tasks_per_node=2, gpus_per_task=1)
    assert local_job_environment(node, 2) == {LOCAL_GPUS_VAR: "4;5", GPUS_PER_TASK_VAR: "1"}
    shared = launcher(visible_gpus=[0, 1], tasks_per_node=2, gpus_per_node=2)
    assert local_job_environment(shared, 0) == {LOCAL_GPUS_VAR: "0,1;0,1"}


def local_env(local_rank: int, **more: str) -> dict[str, str]:
    return {
        "SUBMITIT_EXECUTOR": "local",
        "SUBMITIT_LOCAL_JOB_ID": "4242",
        "SUBMITIT_LOCAL_NTASKS": "2",
        "SUBMITIT_LOCAL_JOB_NUM_NODES": "1",
        "SUBMITIT_LOCAL_NODEID": "0",
        "SUBMITIT_LOCAL_GLOBALID": str(local_rank),
        "SUBMITIT_LOCAL_LOCALID": str(local_rank),
        "CUDA_VISIBLE_DEVICES": "0,1",  # what submitit's controller set for the whole job
        **more,
    }


def test_each_rank_process_sets_its_own_cuda_visible_devices():
    spread = {LOCAL_GPUS_VAR: "2,3;4,5", GPUS_PER_TASK_VAR: "2"}
    assert local_gpu_environment(local_env(0, **spread)) == {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert local_gpu_environment(local_env(1, **spread)) == {"CUDA_VISIBLE_DEVICES": "4,5"}


def test_a_bound_rank_uses_its_first_gpu_also_with_two_per_task():
    env = local_env(1, **{LOCAL_GPUS_VAR: "2,3;4,5", GPUS_PER_TASK_VAR: "2"})
    env.update(local_gpu_environment(env))
    assert local_device(1, env) == 0


def test_nothing_is_set_without_the_variable_or_outside_a_local_job():
    assert local_gpu_environment(local_env(1)) == {}
    slurm = {"SLURM_JOB_ID": "7", LOCAL_GPUS_VAR: "0;1"}
    assert local_gpu_environment(slurm) == {}


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"visible_gpus": [0, 1]}, "say how many GPUs"),
        ({"visible_gpus": [0], "gpus_per_node": 2}, "needs 2 GPUs, only 1"),
        ({"visible_gpus": [0, 1], "tasks_per_node": 2, "gpus_per_task": 2}, "needs 4 GPUs"),
        ({"visible_gpus": [0, 0], "gpus_per_node": 1}, "each GPU once"),
        ({"visible_gpus": [], "gpus_per_node": 1}, "each GPU once"),
        ({"visible_gpus": [-1], "gpus_per_node": 1}, "list of GPU ids"),
        ({"visible_gpus": [True], "gpus_per_node": 1}, "list of GPU ids"),
        ({"visible_gpus": ["0,1"], "gpus_per_node": 1}, "list of GPU ids"),
        ({"visible_gpus": "0,1", "gpus_per_node": 1}, "list of GPU ids"),
    ],
)
def test_bad_visible_gpus_are_refused(changes, message):
    with pytest.raises(ValueError, match=message) as error:
        validate_launcher(launcher(**changes))
    assert "hydra.launcher.visible_gpus" in str(error.value)


def test_points_with_other_visible_gpus_are_submitted_apart():
    node = launcher(gpus_per_node=1)
    assert resource_key({**node, "visible_gpus": [0]}) != resource_key(
        {**node, "visible_gpus": [1]}
    )
