"""The one reading of a job's environment: which executor runs this process, its job ids and
its place among the ranks (pure: every function reads only its ``env`` argument).

The variables are those submitit's ``SlurmJobEnvironment`` and ``LocalJobEnvironment`` read:
``SUBMITIT_EXECUTOR``, Slurm's ``SLURM_JOB_ID``, ``SLURM_ARRAY_JOB_ID``,
``SLURM_ARRAY_TASK_ID``, ``SLURM_CLUSTER_NAME``, ``SLURM_RESTART_COUNT``, ``SLURM_STEP_ID``,
``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NODEID``, ``SLURM_NTASKS`` and
``SLURM_JOB_NUM_NODES``, and the ``SUBMITIT_LOCAL_*`` ones of submitit's local executor.
Read here for the rank plan (:func:`placement`, used by ``seml_hydra.job.rank.plan_rank``),
the experiment's ``execution`` identity (:func:`execution_identity`, :func:`restart_count`)
and the rank named in messages (:func:`rank_label`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from seml_hydra.core.errors import UserError

SOURCE_SLURM = "slurm"
SOURCE_SUBMITIT_LOCAL = "submitit-local"
SOURCE_SINGLE_PROCESS = "single-process"

_INT_RE = re.compile(r"-?[0-9]+")


class RankEnvironmentError(UserError, ValueError):
    """An environment variable needed to place this rank is missing or malformed.

    The message always names the variable, its value (or that it is not set) and what was
    expected, e.g. ``SLURM_PROCID='4' is out of range; expected the global rank of this
    task, an integer in 0..3 (SLURM_NTASKS='4')``.

    Attributes:
        variable: name of the offending variable, e.g. ``"SLURM_PROCID"``.
        value: its raw value, or ``None`` when it is not set.
        expected: human-readable description of an acceptable value.
        problem: what is wrong with the value (``None`` when it is not set).
    """

    def __init__(
        self,
        variable: str,
        value: str | None,
        expected: str,
        problem: str | None = None,
    ) -> None:
        self.variable = variable
        self.value = value
        self.expected = expected
        self.problem = problem
        if value is None:
            message = f"{variable} is not set; expected {expected}"
        else:
            message = f"{variable}={value!r} is {problem or 'invalid'}; expected {expected}"
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        # submitit pickles exceptions raised in a task back to the submitter; the default
        # ValueError pickling would call __init__ with the message only.
        return (type(self), (self.variable, self.value, self.expected, self.problem))


# --------------------------------------------------------------------------------------
# Reading variables
# --------------------------------------------------------------------------------------


def _get(env: Mapping[str, str], name: str) -> str | None:
    """The value of ``name``; an empty string counts as not set."""
    value = env.get(name)
    if value is None or value == "":
        return None
    return value


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str | None]:
    """The first of ``names`` that is set, and its value; else ``(names[0], None)``.

    A variable set to the empty string is reported (not skipped) so it gets a clear error.
    """
    for name in names:
        value = env.get(name)
        if value is not None:
            return name, value
    return names[0], None


def _parse_int(name: str, value: Any, expected: str, *, minimum: int) -> int:
    if not isinstance(value, str) or not _INT_RE.fullmatch(value):
        raise RankEnvironmentError(name, value, expected, "not an integer")
    number = int(value)
    if number < minimum:
        problem = "negative" if number < 0 else "too small"
        raise RankEnvironmentError(name, value, expected, problem)
    return number


def _read_count(env: Mapping[str, str], names: tuple[str, ...], what: str) -> tuple[str, int]:
    """A required positive count (world size, number of nodes): ``(variable used, value)``."""
    name, value = _first(env, names)
    expected = f"{what}, a positive integer"
    if value is None:
        if len(names) > 1:
            expected += f" (its fallback {' / '.join(names[1:])} is not set either)"
        raise RankEnvironmentError(names[0], None, expected)
    return name, _parse_int(name, value, expected, minimum=1)


def _read_index(
    env: Mapping[str, str],
    name: str,
    what: str,
    *,
    bound: int,
    bound_name: str,
) -> int:
    """A required index in ``0..bound-1``."""
    value = env.get(name)
    expected = f"{what}, an integer in 0..{bound - 1} ({bound_name}={str(bound)!r})"
    if value is None:
        raise RankEnvironmentError(name, None, expected)
    number = _parse_int(name, value, expected, minimum=0)
    if number >= bound:
        raise RankEnvironmentError(name, value, expected, "out of range")
    return number


def _require(env: Mapping[str, str], name: str, expected: str) -> str:
    value = env.get(name)
    if value is None or value == "":
        raise RankEnvironmentError(name, value, expected, "empty")
    return value


# --------------------------------------------------------------------------------------
# Placing the rank
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Where this process sits among the ranks of its job (:func:`placement`); the fields mean
    what the same fields of ``seml_hydra.job.rank.RankPlan`` mean."""

    global_rank: int
    local_rank: int
    world_size: int
    node_rank: int
    num_nodes: int
    source: str
    job_id: str | None = None
    array_job_id: str | None = None
    array_task_id: int | None = None


def source_of(env: Mapping[str, str]) -> str:
    """Which executor runs this process: :data:`SOURCE_SLURM`, :data:`SOURCE_SUBMITIT_LOCAL` or
    :data:`SOURCE_SINGLE_PROCESS` (pure).

    ``SUBMITIT_EXECUTOR`` decides when it is ``slurm`` or ``local`` (a local executor used
    inside a Slurm allocation is local); otherwise a set ``SLURM_JOB_ID`` means Slurm, and
    nothing a single process."""
    executor = env.get("SUBMITIT_EXECUTOR", "")
    if executor == "slurm":
        return SOURCE_SLURM
    if executor == "local":
        return SOURCE_SUBMITIT_LOCAL
    if _get(env, "SLURM_JOB_ID") is not None:
        return SOURCE_SLURM
    return SOURCE_SINGLE_PROCESS


def slurm_job_ids(env: Mapping[str, str]) -> tuple[str, str | None, int | None]:
    """``(job_id, array_job_id, array_task_id)`` of a Slurm job (pure).

    ``job_id`` is ``"<SLURM_ARRAY_JOB_ID>_<SLURM_ARRAY_TASK_ID>"`` for an array task (submitit's
    ``JobEnvironment.job_id`` convention), else ``SLURM_JOB_ID``; the two array variables go
    together. Raises :class:`RankEnvironmentError` naming the variable when ``SLURM_JOB_ID`` is
    unset or empty, one array variable is set without the other, or the task index is not a
    non-negative integer.
    """
    raw_job_id = _require(env, "SLURM_JOB_ID", "the Slurm job id of this task")
    array_job_id = _get(env, "SLURM_ARRAY_JOB_ID")
    raw_task_id = _get(env, "SLURM_ARRAY_TASK_ID")
    if array_job_id is not None and raw_task_id is None:
        raise RankEnvironmentError(
            "SLURM_ARRAY_TASK_ID",
            None,
            f"the array task index, because SLURM_ARRAY_JOB_ID={array_job_id!r} is set",
        )
    if raw_task_id is None:
        return raw_job_id, None, None
    if array_job_id is None:
        raise RankEnvironmentError(
            "SLURM_ARRAY_JOB_ID",
            None,
            f"the array's job id, because SLURM_ARRAY_TASK_ID={raw_task_id!r} is set",
        )
    array_task_id = _parse_int(
        "SLURM_ARRAY_TASK_ID",
        raw_task_id,
        "the array task index, a non-negative integer",
        minimum=0,
    )
    return f"{array_job_id}_{array_task_id}", array_job_id, array_task_id


def _place_slurm(env: Mapping[str, str]) -> Placement:
    job_id, array_job_id, array_task_id = slurm_job_ids(env)

    def placed(ranks: tuple[int, int, int, int, int]) -> Placement:
        return Placement(
            *ranks,
            SOURCE_SLURM,
            job_id=job_id,
            array_job_id=array_job_id,
            array_task_id=array_task_id,
        )

    in_step = _get(env, "SLURM_STEP_ID") is not None or _get(env, "SLURM_STEPID") is not None
    if not in_step:
        # The batch script itself (or an salloc shell): exactly one process, whatever
        # SLURM_NTASKS says about the allocation.  Slurm sets SLURM_PROCID=0 there, if at all.
        procid = env.get("SLURM_PROCID")
        if procid is not None:
            expected = (
                "0 or unset, because SLURM_STEP_ID is not set (outside an srun step this "
                "process is the batch script itself, a single process)"
            )
            if _parse_int("SLURM_PROCID", procid, expected, minimum=0) != 0:
                raise RankEnvironmentError("SLURM_PROCID", procid, expected, "not 0")
        return placed((0, 0, 1, 0, 1))
    ranks = _read_ranks(
        env,
        ("SLURM_NTASKS", "SLURM_NPROCS"),
        ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"),
        ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID"),
        ("this srun step", "this job"),
    )
    return placed(ranks)


def _place_submitit_local(env: Mapping[str, str]) -> Placement:
    job_id = _require(env, "SUBMITIT_LOCAL_JOB_ID", "the job id given by submitit's LocalExecutor")
    ranks = _read_ranks(
        env,
        ("SUBMITIT_LOCAL_NTASKS",),
        ("SUBMITIT_LOCAL_JOB_NUM_NODES",),
        ("SUBMITIT_LOCAL_GLOBALID", "SUBMITIT_LOCAL_LOCALID", "SUBMITIT_LOCAL_NODEID"),
        ("this local job", "this local job"),
    )
    return Placement(*ranks, SOURCE_SUBMITIT_LOCAL, job_id)


def _read_ranks(
    env: Mapping[str, str],
    ntasks: tuple[str, ...],
    nnodes: tuple[str, ...],
    ids: tuple[str, str, str],
    of: tuple[str, str],
) -> tuple[int, int, int, int, int]:
    """``(global_rank, local_rank, world_size, node_rank, num_nodes)`` from the count variables
    ``ntasks`` and ``nnodes`` (each a name and its fallbacks) and the index variables ``ids``
    (global rank, local rank, node index), each index checked against its count; ``of`` names
    what the tasks and the nodes are counted of, for the messages."""
    ntasks_name, world_size = _read_count(env, ntasks, f"the number of tasks of {of[0]}")
    nodes_name, num_nodes = _read_count(env, nnodes, f"the number of nodes of {of[1]}")
    global_id, local_id, node_id = ids
    global_rank = _read_index(
        env, global_id, "the global rank of this task", bound=world_size, bound_name=ntasks_name
    )
    local_rank = _read_index(
        env,
        local_id,
        "the rank of this task on its node",
        bound=world_size,
        bound_name=ntasks_name,
    )
    node_rank = _read_index(
        env, node_id, "the index of this node", bound=num_nodes, bound_name=nodes_name
    )
    return global_rank, local_rank, world_size, node_rank, num_nodes


def placement(env: Mapping[str, str]) -> Placement:
    """This process' place among the ranks, from ``env`` (pure): the rules and the variables are
    those ``seml_hydra.job.rank.plan_rank`` documents. Raises :class:`RankEnvironmentError`
    naming a missing or malformed variable."""
    source = source_of(env)
    if source == SOURCE_SLURM:
        return _place_slurm(env)
    if source == SOURCE_SUBMITIT_LOCAL:
        return _place_submitit_local(env)
    return Placement(0, 0, 1, 0, 1, SOURCE_SINGLE_PROCESS)


def execution_identity(env: Mapping[str, str]) -> dict[str, Any]:
    """This job's ``execution.{cluster, array_id, task_id}`` (SEML 0.5's ``ExecutionDoc``; pure).

    Slurm (:func:`source_of`): ``SLURM_CLUSTER_NAME``, ``SLURM_ARRAY_JOB_ID`` (or
    ``SLURM_JOB_ID`` for a job that is not an array) and ``SLURM_ARRAY_TASK_ID`` (or 0), ids as
    :func:`slurm_job_ids` reads them; without ``SLURM_CLUSTER_NAME`` the cluster is ``"slurm"``,
    which ``seml_hydra.manage`` takes for this cluster (``UNNAMED_CLUSTERS``, as documents from
    before the real name was recorded). submitit's local executor (also when only
    ``SUBMITIT_LOCAL_JOB_ID`` says so): cluster ``"local"``, the local job id (the process id
    of the job) and task 0.

    Raises ``ValueError`` (:class:`RankEnvironmentError`) naming the variable when neither is
    present or a value is not an integer.
    """
    source = source_of(env)
    if source == SOURCE_SINGLE_PROCESS and "SUBMITIT_LOCAL_JOB_ID" in env:
        source = SOURCE_SUBMITIT_LOCAL
    if source == SOURCE_SUBMITIT_LOCAL:
        return {"cluster": "local", "array_id": _job_id(env, "SUBMITIT_LOCAL_JOB_ID"), "task_id": 0}
    if source == SOURCE_SINGLE_PROCESS:
        raise RankEnvironmentError(
            "SLURM_JOB_ID",
            None,
            "the Slurm job id, or SUBMITIT_LOCAL_JOB_ID the local job's: neither SLURM_JOB_ID "
            "nor SUBMITIT_LOCAL_JOB_ID is set, so this is not in a job",
        )
    _, array_job_id, array_task_id = slurm_job_ids(env)
    return {
        "cluster": env.get("SLURM_CLUSTER_NAME", "slurm"),
        "array_id": _job_id(env, "SLURM_JOB_ID" if array_job_id is None else "SLURM_ARRAY_JOB_ID"),
        "task_id": array_task_id or 0,
    }


def _job_id(env: Mapping[str, str], name: str) -> int:
    """Variable ``name`` as an integer job id; raises :class:`RankEnvironmentError`."""
    return _parse_int(name, env.get(name), "an integer job id", minimum=0)


def restart_count(env: Mapping[str, str]) -> int:
    """How often Slurm restarted this job: ``SLURM_RESTART_COUNT`` (0 when unset, as in a job's
    first run and under submitit's local executor; pure). Slurm increments it in every requeued
    run, whether Slurm requeued the job itself (a node failure) or ``scontrol requeue`` did
    (``JobRunner.checkpoint``). Raises ``ValueError`` naming the variable when it is not an
    integer."""
    value = env.get("SLURM_RESTART_COUNT", "0")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"SLURM_RESTART_COUNT={value!r} is not an integer") from None


def rank_label(env: Mapping[str, str]) -> str:
    """This process' global rank as the environment tells it, unchecked, for messages (pure;
    never raises, also when :func:`placement` would): ``SLURM_PROCID``, else
    ``SUBMITIT_LOCAL_GLOBALID``, else ``"0"``."""
    return env.get("SLURM_PROCID") or env.get("SUBMITIT_LOCAL_GLOBALID") or "0"
