"""Who am I inside a multi-task experiment: rank facts, log level, seed and output duties.

One experiment document may run as several Slurm tasks (possibly on several nodes), every
rank running the same task function.  This module turns the environment of one such process
into a :class:`RankPlan` that tells the rest of ``seml_hydra`` how this rank must behave.
The rules follow SEML's multi-task change ("Add support for multi node/task jobs"):

* rank 0 logs from ``INFO``, every other rank only from ``ERROR``;
* observers (Sacred/MongoDB) are attached on rank 0 only;
* one seed is fixed while the experiment is prepared, *before* the ranks diverge, so every
  rank sees the same seed.

On top of that, only rank 0 writes Hydra's ``.hydra/`` files and the job log file
(``RankPlan.writes_outputs``), so ranks never race on the same files.

Purity: :func:`plan_rank`, :func:`format_rank_prefix` and everything they call are pure; they
read the environment only through their ``env`` argument and import neither submitit nor
pymongo.  The two deliberate exceptions are spelled out where they live:
:func:`apply_seed` (seeds global random number generators) and :func:`current_plan` (reads
``os.environ`` when no plan was registered with :func:`set_current_plan`).

How the task reads its facts::

    from seml_hydra import rank

    plan = rank.current_plan()
    plan.seed, plan.global_rank, plan.world_size, plan.is_primary
"""

from __future__ import annotations

import logging
import os
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.util import find_spec
from numbers import Integral
from typing import Any

from seml_hydra.core.errors import UserError

__all__ = [
    "RankEnvironmentError",
    "RankPlan",
    "apply_seed",
    "current_plan",
    "format_rank_prefix",
    "plan_rank",
    "resolve_log_level",
    "seed_from_document",
    "set_current_plan",
]

SOURCE_SLURM = "slurm"
SOURCE_SUBMITIT_LOCAL = "submitit-local"
SOURCE_SINGLE_PROCESS = "single-process"

# numpy's legacy ``numpy.random.seed`` accepts 0 <= seed < 2**32 only.
_NUMPY_SEED_MODULUS = 2**32
# ``torch.manual_seed`` accepts a 64-bit seed; negative seeds are wrapped into uint64 by torch.
_TORCH_SEED_MODULUS = 2**64

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


@dataclass(frozen=True)
class RankPlan:
    """How one process (one rank) of an experiment behaves.

    Attributes:
        global_rank: rank of this process among all tasks of the job, ``0..world_size-1``.
        local_rank: rank among the tasks on this node (use it to pick a GPU).
        world_size: number of tasks running the experiment.
        node_rank: index of this node, ``0..num_nodes-1``.
        num_nodes: number of nodes of the job (step).
        is_primary: ``global_rank == 0``.
        log_level: logging level number for this rank (rank 0: INFO, others: ERROR by default).
        seed: the experiment's seed, identical on every rank; ``None`` if the document has none.
        attach_observers: attach Sacred/MongoDB observers; true on the primary only.
        writes_outputs: write Hydra's ``.hydra/`` files and the job log file; primary only.
        source: where the facts came from: ``"slurm"``, ``"submitit-local"`` or
            ``"single-process"``.
        job_id: ``"<array_job_id>_<array_task_id>"`` for an array task, else the plain job id
            (same convention as submitit's ``JobEnvironment.job_id``); ``None`` when there is
            no job.
        array_job_id: Slurm's ``SLURM_ARRAY_JOB_ID`` or ``None``.
        array_task_id: Slurm's ``SLURM_ARRAY_TASK_ID`` as an int, or ``None``.
    """

    global_rank: int
    local_rank: int
    world_size: int
    node_rank: int
    num_nodes: int
    is_primary: bool
    log_level: int
    seed: int | None
    attach_observers: bool
    writes_outputs: bool
    source: str
    job_id: str | None
    array_job_id: str | None
    array_task_id: int | None


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
class _Placement:
    global_rank: int
    local_rank: int
    world_size: int
    node_rank: int
    num_nodes: int
    source: str
    job_id: str | None = None
    array_job_id: str | None = None
    array_task_id: int | None = None


def _detect_source(env: Mapping[str, str]) -> str:
    executor = env.get("SUBMITIT_EXECUTOR", "")
    if executor == "slurm":
        return SOURCE_SLURM
    if executor == "local":
        return SOURCE_SUBMITIT_LOCAL
    if _get(env, "SLURM_JOB_ID") is not None:
        return SOURCE_SLURM
    return SOURCE_SINGLE_PROCESS


def _place_slurm(env: Mapping[str, str]) -> _Placement:
    raw_job_id = _require(env, "SLURM_JOB_ID", "the Slurm job id of this task")

    array_job_id = _get(env, "SLURM_ARRAY_JOB_ID")
    raw_task_id = _get(env, "SLURM_ARRAY_TASK_ID")
    array_task_id: int | None = None
    if array_job_id is not None and raw_task_id is None:
        raise RankEnvironmentError(
            "SLURM_ARRAY_TASK_ID",
            None,
            f"the array task index, because SLURM_ARRAY_JOB_ID={array_job_id!r} is set",
        )
    if raw_task_id is not None:
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
    job_id = raw_job_id if array_job_id is None else f"{array_job_id}_{array_task_id}"
    ids = {"job_id": job_id, "array_job_id": array_job_id, "array_task_id": array_task_id}

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
        return _Placement(0, 0, 1, 0, 1, SOURCE_SLURM, **ids)

    ntasks_name, world_size = _read_count(
        env, ("SLURM_NTASKS", "SLURM_NPROCS"), "the number of tasks of this srun step"
    )
    nodes_name, num_nodes = _read_count(
        env, ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"), "the number of nodes of this job"
    )
    global_rank = _read_index(
        env,
        "SLURM_PROCID",
        "the global rank of this task",
        bound=world_size,
        bound_name=ntasks_name,
    )
    local_rank = _read_index(
        env,
        "SLURM_LOCALID",
        "the rank of this task on its node",
        bound=world_size,
        bound_name=ntasks_name,
    )
    node_rank = _read_index(
        env,
        "SLURM_NODEID",
        "the index of this node",
        bound=num_nodes,
        bound_name=nodes_name,
    )
    return _Placement(
        global_rank, local_rank, world_size, node_rank, num_nodes, SOURCE_SLURM, **ids
    )


def _place_submitit_local(env: Mapping[str, str]) -> _Placement:
    job_id = _require(env, "SUBMITIT_LOCAL_JOB_ID", "the job id given by submitit's LocalExecutor")
    ntasks_name, world_size = _read_count(
        env, ("SUBMITIT_LOCAL_NTASKS",), "the number of tasks of this local job"
    )
    nodes_name, num_nodes = _read_count(
        env, ("SUBMITIT_LOCAL_JOB_NUM_NODES",), "the number of nodes of this local job"
    )
    global_rank = _read_index(
        env,
        "SUBMITIT_LOCAL_GLOBALID",
        "the global rank of this task",
        bound=world_size,
        bound_name=ntasks_name,
    )
    local_rank = _read_index(
        env,
        "SUBMITIT_LOCAL_LOCALID",
        "the rank of this task on its node",
        bound=world_size,
        bound_name=ntasks_name,
    )
    node_rank = _read_index(
        env,
        "SUBMITIT_LOCAL_NODEID",
        "the index of this node",
        bound=num_nodes,
        bound_name=nodes_name,
    )
    return _Placement(
        global_rank, local_rank, world_size, node_rank, num_nodes, SOURCE_SUBMITIT_LOCAL, job_id
    )


def _place(env: Mapping[str, str]) -> _Placement:
    source = _detect_source(env)
    if source == SOURCE_SLURM:
        return _place_slurm(env)
    if source == SOURCE_SUBMITIT_LOCAL:
        return _place_submitit_local(env)
    return _Placement(0, 0, 1, 0, 1, SOURCE_SINGLE_PROCESS)


# --------------------------------------------------------------------------------------
# Seed and log level
# --------------------------------------------------------------------------------------


def _check_seed(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(
            f"{where}={value!r} is not a valid seed: expected an int "
            f"(got {type(value).__name__}; bool and float are not accepted)"
        )
    return int(value)


def seed_from_document(document: Mapping[str, Any]) -> int | None:
    """The experiment's seed from an experiment document, or ``None``.

    Lookup order: ``document["seed"]``, then ``document["config"]["seed"]``.  A key that is
    absent or holds ``None`` counts as "no seed here".  SEML fixes this seed while preparing
    the experiment, before the ranks diverge, so every rank uses the same value.

    Raises:
        ValueError: the seed found is not an int (``bool``, ``float`` and ``str`` are
            rejected rather than silently ignored), or ``document["config"]`` is neither a
            mapping nor ``None``.
    """
    seed = document.get("seed")
    if seed is not None:
        return _check_seed(seed, "document['seed']")
    config = document.get("config")
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise ValueError(
            f"document['config'] is a {type(config).__name__}; expected a mapping to read "
            "'seed' from"
        )
    seed = config.get("seed")
    if seed is None:
        return None
    return _check_seed(seed, "document['config']['seed']")


def resolve_log_level(level: int | str) -> int:
    """A logging level number from an int or a level name (case-insensitive).

    ``"INFO"``, ``"error"``, ``"Warn"`` and names registered with ``logging.addLevelName``
    are accepted; so are non-negative ints, returned unchanged.

    Raises:
        ValueError: unknown level name, or a negative number.
        TypeError: neither an int nor a str (``bool`` is rejected).
    """
    if isinstance(level, bool):
        raise TypeError(f"log level {level!r} is a bool; expected an int or a level name")
    if isinstance(level, int):
        if level < 0:
            raise ValueError(f"log level {level!r} is negative; expected a level number >= 0")
        return level
    if isinstance(level, str):
        number = logging.getLevelName(level.strip().upper())
        if isinstance(number, int):
            return number
        raise ValueError(
            f"unknown log level name {level!r}; expected one of "
            "CRITICAL, ERROR, WARNING, INFO, DEBUG, NOTSET or a level number"
        )
    raise TypeError(f"log level {level!r} is a {type(level).__name__}; expected an int or a str")


# --------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------


def plan_rank(
    env: Mapping[str, str],
    document: Mapping[str, Any],
    *,
    primary_log_level: int | str = logging.INFO,
    other_log_level: int | str = logging.ERROR,
) -> RankPlan:
    """Plan how this rank runs the experiment described by ``document``.

    Args:
        env: the process environment (``os.environ`` or a plain dict of str to str).
        document: the experiment document (only ``seed`` and ``config.seed`` are read).
        primary_log_level: log level of rank 0, an int or a level name (default INFO).
        other_log_level: log level of every other rank (default ERROR).

    Returns:
        A :class:`RankPlan`.  Rank 0 is primary: it logs at ``primary_log_level``, attaches
        observers and writes outputs; all other ranks log at ``other_log_level`` and do none
        of that.  The seed is the same on every rank (SEML multi-task change).

    Where the facts come from (variable names as in submitit's ``SlurmJobEnvironment`` and
    ``LocalJobEnvironment``):

    * ``SUBMITIT_EXECUTOR=slurm`` -> Slurm; ``SUBMITIT_EXECUTOR=local`` -> submitit local,
      even if ``SLURM_JOB_ID`` is set (a local executor used inside an allocation);
      otherwise Slurm if ``SLURM_JOB_ID`` is set, else a single process (rank 0 of 1).
    * Slurm inside an srun step (``SLURM_STEP_ID`` or ``SLURM_STEPID`` set; submitit always
      runs its tasks as srun steps): ``SLURM_JOB_ID``, ``SLURM_PROCID``, ``SLURM_LOCALID``,
      ``SLURM_NODEID``, ``SLURM_NTASKS`` (or ``SLURM_NPROCS``) and ``SLURM_JOB_NUM_NODES``
      (or ``SLURM_NNODES``) are all required.  Unlike submitit, which defaults a missing
      rank to 0, a missing variable is an error: two ranks both believing they are rank 0
      would both write outputs and attach observers.
    * Slurm outside an srun step (the sbatch batch script itself, or an salloc shell):
      ``SLURM_NTASKS`` describes the allocation, not the processes running, so it is
      ignored and this process is rank 0 of 1 on node 0 of 1.  ``SLURM_PROCID`` must then
      be unset or ``0``.
    * Slurm array tasks: ``SLURM_ARRAY_JOB_ID`` and ``SLURM_ARRAY_TASK_ID`` go together;
      ``job_id`` becomes ``"<array_job_id>_<array_task_id>"``.
    * submitit local: ``SUBMITIT_LOCAL_GLOBALID``, ``SUBMITIT_LOCAL_LOCALID``,
      ``SUBMITIT_LOCAL_NTASKS``, ``SUBMITIT_LOCAL_NODEID``, ``SUBMITIT_LOCAL_JOB_NUM_NODES``
      and ``SUBMITIT_LOCAL_JOB_ID`` are all required.

    Raises:
        RankEnvironmentError: a required variable is missing, or one is not a non-negative
            integer, a count is 0, a rank or local rank is >= the world size, a node id is
            >= the number of nodes.  The message names the variable, its value and what was
            expected.
        ValueError: the document's seed is not an int (see :func:`seed_from_document`), or
            a log level name is unknown.
        TypeError: a log level is neither an int nor a str.
    """
    placement = _place(env)
    seed = seed_from_document(document)
    primary_level = resolve_log_level(primary_log_level)
    other_level = resolve_log_level(other_log_level)
    is_primary = placement.global_rank == 0
    return RankPlan(
        global_rank=placement.global_rank,
        local_rank=placement.local_rank,
        world_size=placement.world_size,
        node_rank=placement.node_rank,
        num_nodes=placement.num_nodes,
        is_primary=is_primary,
        log_level=primary_level if is_primary else other_level,
        seed=seed,
        attach_observers=is_primary,
        writes_outputs=is_primary,
        source=placement.source,
        job_id=placement.job_id,
        array_job_id=placement.array_job_id,
        array_task_id=placement.array_task_id,
    )


def format_rank_prefix(plan: RankPlan) -> str:
    """A log-line prefix such as ``"[rank 1/4 node 0]"`` (global rank / world size, node)."""
    return f"[rank {plan.global_rank}/{plan.world_size} node {plan.node_rank}]"


def _seed_numpy(numpy: Any, seed: int) -> None:
    numpy.random.seed(seed % _NUMPY_SEED_MODULUS)


def _seed_torch(torch: Any, seed: int) -> None:
    torch.manual_seed(seed % _TORCH_SEED_MODULUS)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed % _TORCH_SEED_MODULUS)


#: library -> how to seed it (the library's module object, the seed)
_SEEDERS = {"numpy": _seed_numpy, "torch": _seed_torch}


class _SeedOnImport:
    """A ``sys.meta_path`` finder that seeds a library right after its first import, so a task
    that imports numpy or torch later still starts from the experiment's seed, and one that
    never imports them does not pay for importing them (torch: about 1.5 s per rank)."""

    def __init__(self) -> None:
        self.pending: dict[str, int] = {}

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in self.pending:
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        seed, loader = self.pending.pop(fullname), spec.loader
        exec_module = loader.exec_module

        def exec_and_seed(module: Any) -> None:
            exec_module(module)
            _SEEDERS[fullname](module, seed)

        loader.exec_module = exec_and_seed  # type: ignore[method-assign]
        return spec


_SEED_ON_IMPORT = _SeedOnImport()


def apply_seed(seed: int) -> list[str]:
    """SIDE EFFECT: seed the global random number generators of this process.

    * ``random``: ``random.seed(seed)`` with the full seed, now;
    * ``numpy``: ``numpy.random.seed(seed % 2**32)`` (numpy's legacy seeding only accepts
      ``0..2**32-1``);
    * ``torch``: ``torch.manual_seed(seed % 2**64)`` and, with CUDA,
      ``torch.cuda.manual_seed_all``.

    numpy and torch are seeded now when already imported, else right after their first import
    (a ``sys.meta_path`` hook), and not at all when not installed (``find_spec``): every rank
    gets the same seed, as in SEML's multi-task change, without importing torch for a task that
    does not use it.

    Args:
        seed: the experiment's seed (an int; ``bool`` is rejected).

    Returns:
        Names of what was or will be seeded, e.g. ``["random", "numpy", "torch"]``.

    Raises:
        TypeError: ``seed`` is not an int.
    """
    import sys

    if isinstance(seed, bool) or not isinstance(seed, Integral):
        raise TypeError(f"seed {seed!r} is a {type(seed).__name__}; expected an int")
    seed = int(seed)
    seeded = ["random"]
    random.seed(seed)
    for name, seeder in _SEEDERS.items():
        if name in sys.modules:
            seeder(sys.modules[name], seed)
        elif find_spec(name) is not None:
            _SEED_ON_IMPORT.pending[name] = seed
            if _SEED_ON_IMPORT not in sys.meta_path:
                sys.meta_path.insert(0, _SEED_ON_IMPORT)
        else:
            continue
        seeded.append(name)
    return seeded


# --------------------------------------------------------------------------------------
# The plan of the running experiment
# --------------------------------------------------------------------------------------

_current: RankPlan | None = None


def set_current_plan(plan: RankPlan | None) -> RankPlan | None:
    """Register ``plan`` as this process's plan (``None`` clears it); returns the previous one.

    Called by the runner before the task function starts and cleared after it ends, so
    the task can read its seed and rank facts through :func:`current_plan`::

        previous = set_current_plan(plan)
        try:
            run_task()
        finally:
            set_current_plan(previous)
    """
    global _current
    if plan is not None and not isinstance(plan, RankPlan):
        raise TypeError(f"expected a RankPlan or None, got {type(plan).__name__}")
    previous = _current
    _current = plan
    return previous


def current_plan() -> RankPlan:
    """The plan of this rank: the task can read its seed and rank facts here.

    Example::

        from seml_hydra import rank

        seed = rank.current_plan().seed
        if rank.current_plan().is_primary:
            ...

    While an experiment runs this is the plan registered with :func:`set_current_plan`.
    Outside a run it is ``plan_rank(os.environ, {})``, computed on each call (nothing is
    cached, and ``seed`` is ``None`` since there is no document); this is the one place in
    the module that reads ``os.environ`` itself.

    Raises:
        RankEnvironmentError: only outside a run, if ``os.environ`` is malformed.
    """
    plan = _current
    if plan is not None:
        return plan
    return plan_rank(os.environ, {})
