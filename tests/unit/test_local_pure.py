"""The pure parts of running experiments here (``seml_hydra.job.worker``,
``seml_hydra.manage.local``): what a worker may claim, the local job's environment, and the
option combinations ``start`` refuses."""

import pytest

from seml_hydra.job.slurm_env import execution_identity, placement
from seml_hydra.job.worker import local_job_environment, runnable_query, staged_claim_filter
from seml_hydra.manage.local import check_options
from seml_hydra.manage.selection import ManageError


def test_a_worker_claims_only_staged_ones_and_with_steal_also_pending_in_an_array():
    assert staged_claim_filter(4) == {"_id": 4, "status": {"$in": ["STAGED", "QUEUED"]}}
    steal = staged_claim_filter(4, steal_slurm=True)
    assert steal == {
        "_id": 4,
        "$or": [
            {"status": {"$in": ["STAGED", "QUEUED"]}},
            {"status": "PENDING", "slurm.array_id": {"$exists": True}},
        ],
    }


def test_runnable_query_keeps_the_selection_and_needs_a_payload():
    q = runnable_query({"batch_id": 2})
    assert q["$and"][0] == {"batch_id": 2}
    assert {"seml.payload_file": {"$exists": True}} in q["$and"]


def test_the_local_job_environment_makes_rank_0_of_one_local_task_named_by_the_pid():
    env = local_job_environment(4242, gpus="2,3")
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    # even inside an salloc (SLURM_JOB_ID set, no step): a local job, not a Slurm rank
    inside = {"SLURM_JOB_ID": "77", **env}
    assert execution_identity(inside) == {"cluster": "local", "array_id": 4242, "task_id": 0}
    where = placement(inside)
    assert (where.global_rank, where.world_size) == (0, 1)
    assert "CUDA_VISIBLE_DEVICES" not in local_job_environment(1)


@pytest.mark.parametrize(
    "options, phrase",
    [
        ({"debug": True, "local": True, "sacred_id": 1}, "use one of them"),
        ({"debug": True}, "name it with -id N"),
        ({"post_mortem": True}, "--post-mortem only works"),
        ({"worker_gpus": "0"}, "--worker-gpus only works"),
        ({"steal_slurm": True}, "--steal-slurm only works"),
    ],
)
def test_start_refuses_options_it_cannot_honour(options, phrase):
    args = {"debug": False, "local": False, "post_mortem": False, "worker_gpus": None}
    with pytest.raises(ManageError, match=phrase):
        check_options(**{**args, "sacred_id": None, **options})


def test_start_accepts_the_combinations_seml_allows():
    check_options(debug=True, local=False, post_mortem=True, worker_gpus=None, sacred_id=3)
    check_options(
        debug=False, local=True, post_mortem=True, worker_gpus="0", sacred_id=None, steal_slurm=True
    )
