"""Tests for seml_hydra.job.rank: placing a rank from its environment, seeding, current plan."""

from __future__ import annotations

import logging
import pickle
import random
import sys

import pytest

from seml_hydra.job import rank
from seml_hydra.job.rank import (
    RankPlan,
    apply_seed,
    current_plan,
    format_rank_prefix,
    plan_rank,
    set_current_plan,
)
from seml_hydra.job.slurm_env import RankEnvironmentError


def slurm_step(
    procid: int, localid: int, nodeid: int, ntasks: int, nnodes: int, **extra: str
) -> dict[str, str]:
    """The variables srun sets in one task of a step (what submitit's tasks see)."""
    env = {
        "SLURM_JOB_ID": "123",
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": str(procid),
        "SLURM_LOCALID": str(localid),
        "SLURM_NODEID": str(nodeid),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_JOB_NUM_NODES": str(nnodes),
    }
    env.update(extra)
    return env


def submitit_local(globalid: int, ntasks: int) -> dict[str, str]:
    """The variables submitit's LocalExecutor sets in one task."""
    return {
        "SUBMITIT_EXECUTOR": "local",
        "SUBMITIT_LOCAL_JOB_ID": "4242",
        "SUBMITIT_LOCAL_GLOBALID": str(globalid),
        "SUBMITIT_LOCAL_LOCALID": str(globalid),
        "SUBMITIT_LOCAL_NTASKS": str(ntasks),
        "SUBMITIT_LOCAL_NODEID": "0",
        "SUBMITIT_LOCAL_JOB_NUM_NODES": "1",
    }


def primary(**fields):
    return {"is_primary": True, "attach_observers": True, "writes_outputs": True, **fields}


def secondary(**fields):
    return {"is_primary": False, "attach_observers": False, "writes_outputs": False, **fields}


# (id, env, document, keyword arguments to plan_rank, expected fields of the plan)
PLAN_CASES = [
    (
        "single-process",
        {"HOME": "/root"},
        {},
        {},
        primary(
            global_rank=0,
            local_rank=0,
            world_size=1,
            node_rank=0,
            num_nodes=1,
            log_level=logging.INFO,
            seed=None,
            source="single-process",
            job_id=None,
            array_job_id=None,
            array_task_id=None,
        ),
    ),
    (
        "slurm-1x2-rank0",
        slurm_step(0, 0, 0, 2, 1),
        {},
        {},
        primary(
            global_rank=0,
            local_rank=0,
            world_size=2,
            node_rank=0,
            num_nodes=1,
            log_level=logging.INFO,
            source="slurm",
            job_id="123",
            array_job_id=None,
            array_task_id=None,
        ),
    ),
    (
        "slurm-1x2-rank1",
        slurm_step(1, 1, 0, 2, 1),
        {},
        {},
        secondary(
            global_rank=1,
            local_rank=1,
            world_size=2,
            node_rank=0,
            num_nodes=1,
            log_level=logging.ERROR,
            source="slurm",
            job_id="123",
        ),
    ),
    (
        "slurm-2x2-rank3-nnodes",
        {
            "SLURM_JOB_ID": "77",
            "SLURM_STEP_ID": "0",
            "SLURM_PROCID": "3",
            "SLURM_LOCALID": "1",
            "SLURM_NODEID": "1",
            "SLURM_NTASKS": "4",
            "SLURM_NNODES": "2",
        },
        {},
        {},
        secondary(
            global_rank=3,
            local_rank=1,
            world_size=4,
            node_rank=1,
            num_nodes=2,
            log_level=logging.ERROR,
            source="slurm",
            job_id="77",
        ),
    ),
    (
        "slurm-nprocs-fallback-and-old-stepid",
        {
            "SLURM_JOB_ID": "77",
            "SLURM_STEPID": "2",
            "SLURM_PROCID": "2",
            "SLURM_LOCALID": "0",
            "SLURM_NODEID": "1",
            "SLURM_NPROCS": "3",
            "SLURM_JOB_NUM_NODES": "2",
        },
        {},
        {},
        secondary(global_rank=2, world_size=3, node_rank=1, num_nodes=2, source="slurm"),
    ),
    (
        "slurm-array-task",
        slurm_step(0, 0, 0, 1, 1, SLURM_ARRAY_JOB_ID="100", SLURM_ARRAY_TASK_ID="4"),
        {},
        {},
        primary(job_id="100_4", array_job_id="100", array_task_id=4, source="slurm"),
    ),
    (
        "slurm-array-task-rank1",
        slurm_step(1, 1, 0, 2, 1, SLURM_ARRAY_JOB_ID="100", SLURM_ARRAY_TASK_ID="0"),
        {},
        {},
        secondary(job_id="100_0", array_job_id="100", array_task_id=0),
    ),
    (
        "slurm-batch-script-is-one-process",
        # sbatch's batch script: no step id, NTASKS describes the allocation.
        {"SLURM_JOB_ID": "9", "SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_NNODES": "2"},
        {},
        {},
        primary(global_rank=0, world_size=1, num_nodes=1, source="slurm", job_id="9"),
    ),
    (
        "slurm-batch-script-without-procid",
        {"SLURM_JOB_ID": "9", "SLURM_NTASKS": "4"},
        {},
        {},
        primary(global_rank=0, world_size=1, source="slurm", job_id="9"),
    ),
    (
        "submitit-local-rank0",
        submitit_local(0, 2),
        {},
        {},
        primary(
            global_rank=0,
            local_rank=0,
            world_size=2,
            node_rank=0,
            num_nodes=1,
            log_level=logging.INFO,
            source="submitit-local",
            job_id="4242",
            array_job_id=None,
            array_task_id=None,
        ),
    ),
    (
        "submitit-local-rank1",
        submitit_local(1, 2),
        {},
        {},
        secondary(
            global_rank=1,
            local_rank=1,
            world_size=2,
            log_level=logging.ERROR,
            source="submitit-local",
        ),
    ),
    (
        "submitit-local-inside-slurm-allocation",
        {**submitit_local(1, 2), **slurm_step(0, 0, 0, 1, 1)},
        {},
        {},
        secondary(global_rank=1, world_size=2, source="submitit-local", job_id="4242"),
    ),
    (
        "submitit-executor-slurm",
        {"SUBMITIT_EXECUTOR": "slurm", **slurm_step(2, 0, 1, 4, 2)},
        {},
        {},
        secondary(global_rank=2, local_rank=0, node_rank=1, world_size=4, source="slurm"),
    ),
    (
        "unknown-executor-falls-back-to-slurm-job-id",
        {"SUBMITIT_EXECUTOR": "debug", **slurm_step(0, 0, 0, 1, 1)},
        {},
        {},
        primary(source="slurm", job_id="123"),
    ),
    (
        "unknown-executor-without-slurm-is-single-process",
        {"SUBMITIT_EXECUTOR": "debug"},
        {},
        {},
        primary(source="single-process"),
    ),
    (
        "seed-from-document",
        {},
        {"seed": 7, "config": {"seed": 8}},
        {},
        primary(seed=7),
    ),
    (
        "seed-from-config",
        {},
        {"config": {"seed": 8, "lr": 0.1}},
        {},
        primary(seed=8),
    ),
    (
        "seed-none-in-document-falls-back-to-config",
        {},
        {"seed": None, "config": {"seed": 8}},
        {},
        primary(seed=8),
    ),
    (
        "no-seed",
        {},
        {"config": {"lr": 0.1}},
        {},
        primary(seed=None),
    ),
    (
        "seed-same-on-every-rank",
        slurm_step(3, 1, 1, 4, 2),
        {"config": {"seed": 12345}},
        {},
        secondary(seed=12345),
    ),
    (
        "custom-levels-primary-by-name",
        slurm_step(0, 0, 0, 2, 1),
        {},
        {"primary_log_level": "debug", "other_log_level": "warning"},
        primary(log_level=logging.DEBUG),
    ),
    (
        "custom-levels-other-by-name",
        slurm_step(1, 1, 0, 2, 1),
        {},
        {"primary_log_level": "DEBUG", "other_log_level": "Warn"},
        secondary(log_level=logging.WARNING),
    ),
    (
        "custom-levels-by-number",
        slurm_step(1, 1, 0, 2, 1),
        {},
        {"primary_log_level": 5, "other_log_level": 35},
        secondary(log_level=35),
    ),
]


@pytest.mark.parametrize(
    ("env", "document", "kwargs", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in PLAN_CASES],
)
def test_plan_rank_table(env, document, kwargs, expected):
    plan = plan_rank(env, document, **kwargs)
    actual = {name: getattr(plan, name) for name in expected}
    assert actual == expected
    assert plan.is_primary == (plan.global_rank == 0)
    assert plan.attach_observers == plan.writes_outputs == plan.is_primary


# (id, env, variable the message must name, another fragment the message must contain)
MALFORMED_CASES = [
    ("procid-not-int", slurm_step(0, 0, 0, 2, 1, SLURM_PROCID="x"), "SLURM_PROCID", "'x'"),
    ("procid-equals-ntasks", slurm_step(4, 0, 0, 4, 1), "SLURM_PROCID", "0..3"),
    ("procid-negative", slurm_step(-1, 0, 0, 2, 1), "SLURM_PROCID", "negative"),
    ("procid-empty", slurm_step(0, 0, 0, 2, 1, SLURM_PROCID=""), "SLURM_PROCID", "''"),
    ("procid-float", slurm_step(0, 0, 0, 2, 1, SLURM_PROCID="1.0"), "SLURM_PROCID", "'1.0'"),
    (
        "procid-missing-in-step",
        {k: v for k, v in slurm_step(0, 0, 0, 2, 1).items() if k != "SLURM_PROCID"},
        "SLURM_PROCID",
        "not set",
    ),
    (
        "ntasks-missing",
        {k: v for k, v in slurm_step(0, 0, 0, 2, 1).items() if k != "SLURM_NTASKS"},
        "SLURM_NTASKS",
        "SLURM_NPROCS",
    ),
    ("ntasks-zero", slurm_step(0, 0, 0, 0, 1), "SLURM_NTASKS", "positive"),
    ("ntasks-negative", slurm_step(0, 0, 0, -2, 1), "SLURM_NTASKS", "negative"),
    ("nprocs-not-int", {**slurm_step(0, 0, 0, 2, 1), "SLURM_NTASKS": "two"}, "SLURM_NTASKS", "two"),
    ("localid-equals-ntasks", slurm_step(1, 2, 0, 2, 1), "SLURM_LOCALID", "0..1"),
    ("localid-negative", slurm_step(1, -1, 0, 2, 1), "SLURM_LOCALID", "negative"),
    ("nodeid-equals-nnodes", slurm_step(1, 0, 2, 4, 2), "SLURM_NODEID", "0..1"),
    (
        "num-nodes-missing",
        {k: v for k, v in slurm_step(0, 0, 0, 2, 1).items() if k != "SLURM_JOB_NUM_NODES"},
        "SLURM_JOB_NUM_NODES",
        "SLURM_NNODES",
    ),
    (
        "array-task-id-not-int",
        slurm_step(0, 0, 0, 1, 1, SLURM_ARRAY_JOB_ID="100", SLURM_ARRAY_TASK_ID="a"),
        "SLURM_ARRAY_TASK_ID",
        "'a'",
    ),
    (
        "array-task-id-missing",
        slurm_step(0, 0, 0, 1, 1, SLURM_ARRAY_JOB_ID="100"),
        "SLURM_ARRAY_TASK_ID",
        "not set",
    ),
    (
        "executor-slurm-without-job-id",
        {"SUBMITIT_EXECUTOR": "slurm", "SLURM_PROCID": "0"},
        "SLURM_JOB_ID",
        "not set",
    ),
    (
        "batch-script-with-nonzero-procid",
        {"SLURM_JOB_ID": "9", "SLURM_PROCID": "2", "SLURM_NTASKS": "4"},
        "SLURM_PROCID",
        "SLURM_STEP_ID",
    ),
    (
        "local-globalid-not-int",
        {**submitit_local(0, 2), "SUBMITIT_LOCAL_GLOBALID": "x"},
        "SUBMITIT_LOCAL_GLOBALID",
        "'x'",
    ),
    (
        "local-globalid-equals-ntasks",
        submitit_local(2, 2),
        "SUBMITIT_LOCAL_GLOBALID",
        "0..1",
    ),
    (
        "local-ntasks-missing",
        {k: v for k, v in submitit_local(0, 2).items() if k != "SUBMITIT_LOCAL_NTASKS"},
        "SUBMITIT_LOCAL_NTASKS",
        "not set",
    ),
    (
        "local-job-id-missing",
        {k: v for k, v in submitit_local(0, 2).items() if k != "SUBMITIT_LOCAL_JOB_ID"},
        "SUBMITIT_LOCAL_JOB_ID",
        "not set",
    ),
    (
        "local-nodeid-negative",
        {**submitit_local(0, 2), "SUBMITIT_LOCAL_NODEID": "-1"},
        "SUBMITIT_LOCAL_NODEID",
        "negative",
    ),
]


@pytest.mark.parametrize(
    ("env", "variable", "fragment"),
    [pytest.param(*case[1:], id=case[0]) for case in MALFORMED_CASES],
)
def test_malformed_environment_names_the_variable(env, variable, fragment):
    with pytest.raises(RankEnvironmentError) as info:
        plan_rank(env, {})
    message = str(info.value)
    assert message.startswith(variable)
    assert fragment in message
    assert "expected" in message
    assert info.value.variable == variable
    assert isinstance(info.value, ValueError)


def test_rank_environment_error_survives_pickling():
    # submitit pickles a task's exception back to the submitting process.
    with pytest.raises(RankEnvironmentError) as info:
        plan_rank(slurm_step(0, 0, 0, 2, 1, SLURM_PROCID="x"), {})
    clone = pickle.loads(pickle.dumps(info.value))
    assert type(clone) is RankEnvironmentError
    assert str(clone) == str(info.value)
    assert (clone.variable, clone.value) == ("SLURM_PROCID", "x")


@pytest.mark.parametrize(
    ("document", "where"),
    [
        ({"seed": "5"}, "document['seed']"),
        ({"seed": True}, "document['seed']"),
        ({"seed": 5.0}, "document['seed']"),
        ({"config": {"seed": "5"}}, "document['config']['seed']"),
        ({"config": {"seed": False}}, "document['config']['seed']"),
        ({"config": ["seed"]}, "document['config']"),
    ],
)
def test_bad_seed_is_a_value_error(document, where):
    with pytest.raises(ValueError, match=r"document\['") as info:
        plan_rank({}, document)
    assert str(info.value).startswith(where)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"primary_log_level": "LOUD"}, ValueError),
        ({"other_log_level": "verbose"}, ValueError),
        ({"other_log_level": -1}, ValueError),
        ({"primary_log_level": 2.5}, TypeError),
        ({"primary_log_level": True}, TypeError),
    ],
)
def test_bad_log_levels(kwargs, error):
    with pytest.raises(error):
        plan_rank({}, {}, **kwargs)


def test_plan_is_frozen():
    plan = plan_rank({}, {})
    with pytest.raises(AttributeError):
        plan.global_rank = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("env", "prefix"),
    [
        ({}, "[rank 0/1 node 0]"),
        (slurm_step(1, 1, 0, 4, 2), "[rank 1/4 node 0]"),
        (slurm_step(3, 1, 1, 4, 2), "[rank 3/4 node 1]"),
    ],
)
def test_format_rank_prefix(env, prefix):
    assert format_rank_prefix(plan_rank(env, {})) == prefix


def test_apply_seed_random_matches_random_seed():
    random.seed(5)
    expected = [random.random() for _ in range(3)]
    random.seed(999)
    seeded = apply_seed(5)
    assert "random" in seeded
    assert [random.random() for _ in range(3)] == expected


def test_apply_seed_numpy_matches_numpy_seed():
    numpy = pytest.importorskip("numpy")
    numpy.random.seed(5)
    expected = numpy.random.random(3).tolist()
    numpy.random.seed(999)
    assert "numpy" in apply_seed(5)
    assert numpy.random.random(3).tolist() == expected


def test_apply_seed_reduces_numpy_seed_modulo_2_32():
    numpy = pytest.importorskip("numpy")
    numpy.random.seed(7)
    expected = numpy.random.random(3).tolist()
    apply_seed(2**32 + 7)
    assert numpy.random.random(3).tolist() == expected
    apply_seed(-1)  # numpy alone would reject this
    numpy.random.seed(2**32 - 1)
    after_wrap = numpy.random.random(3).tolist()
    apply_seed(-1)
    assert numpy.random.random(3).tolist() == after_wrap


def test_apply_seed_skips_absent_libraries(monkeypatch):
    real_find_spec = rank.find_spec

    def find_spec(name, *args, **kwargs):
        if name in ("numpy", "torch"):
            return None
        return real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(rank, "find_spec", find_spec)
    for name in ("numpy", "torch"):  # not imported either (restored after the test)
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert apply_seed(3) == ["random"]


@pytest.mark.parametrize("seed", [True, 3.0, "3", None])
def test_apply_seed_rejects_non_int(seed):
    with pytest.raises(TypeError):
        apply_seed(seed)


def test_module_does_not_import_submitit_or_pymongo():
    # Importing seml_hydra.job.rank must not drag the heavy clients in; check in a fresh process.
    import subprocess

    code = (
        "import sys, seml_hydra.job.rank; "
        "print(sorted(m for m in ('submitit', 'pymongo', 'numpy', 'torch') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": ":".join(p for p in sys.path if p)},
    )
    assert result.stdout.strip() == "[]"


@pytest.fixture
def no_current_plan():
    previous = set_current_plan(None)
    yield
    set_current_plan(previous)


def test_current_plan_outside_a_run_is_computed_from_os_environ(monkeypatch, no_current_plan):
    for name in ("SUBMITIT_EXECUTOR", "SLURM_JOB_ID"):
        monkeypatch.delenv(name, raising=False)
    plan = current_plan()
    assert (plan.source, plan.global_rank, plan.world_size, plan.seed) == (
        "single-process",
        0,
        1,
        None,
    )
    for name, value in slurm_step(1, 1, 0, 2, 1).items():
        monkeypatch.setenv(name, value)
    assert current_plan().global_rank == 1  # recomputed, not cached


def test_set_current_plan_registers_and_restores(no_current_plan):
    plan = plan_rank(slurm_step(1, 1, 0, 2, 1), {"seed": 11})
    assert set_current_plan(plan) is None
    assert current_plan() is plan
    assert rank.current_plan().seed == 11
    assert set_current_plan(None) is plan
    assert rank._current is None


def test_set_current_plan_rejects_other_objects(no_current_plan):
    with pytest.raises(TypeError):
        set_current_plan({"global_rank": 0})  # type: ignore[arg-type]
    assert isinstance(current_plan(), RankPlan)


def test_apply_seed_seeds_a_library_at_its_first_import():
    import subprocess

    code = (
        "import sys, random; from seml_hydra.job.rank import apply_seed; "
        "assert 'numpy' not in sys.modules; "
        "print(apply_seed(5)); import numpy; a = numpy.random.random(2).tolist(); "
        "numpy.random.seed(5); print(a == numpy.random.random(2).tolist())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert "'numpy'" in out[0] and out[1] == "True"
