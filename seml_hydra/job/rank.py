"""Who am I inside a multi-task experiment: rank facts, log level, seed and output duties.

One experiment document may run as several Slurm tasks (possibly on several nodes), every
rank running the same task function.  This module turns the environment of one such process
(read by ``seml_hydra.job.slurm_env``) into a :class:`RankPlan` that tells the rest of ``seml_hydra`` how this rank must behave.
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
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.util import find_spec
from numbers import Integral
from typing import Any

from seml_hydra.job.slurm_env import RankEnvironmentError, placement

__all__ = [
    "RankEnvironmentError",  # raised by plan_rank (older apps: seml_hydra.rank.RankEnvironmentError)
    "RankPlan",
    "apply_seed",
    "current_plan",
    "format_rank_prefix",
    "plan_rank",
    "resolve_log_level",
    "seed_from_document",
    "set_current_plan",
]

# numpy's legacy ``numpy.random.seed`` accepts 0 <= seed < 2**32 only.
_NUMPY_SEED_MODULUS = 2**32
# ``torch.manual_seed`` accepts a 64-bit seed; negative seeds are wrapped into uint64 by torch.
_TORCH_SEED_MODULUS = 2**64


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

    Where the facts come from (read by ``seml_hydra.job.slurm_env.placement``; variable names as
    in submitit's ``SlurmJobEnvironment`` and ``LocalJobEnvironment``):

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
        slurm_env.RankEnvironmentError: a required variable is missing, or one is not a
            non-negative integer, a count is 0, a rank or local rank is >= the world size, a node id is
            >= the number of nodes.  The message names the variable, its value and what was
            expected.
        ValueError: the document's seed is not an int (see :func:`seed_from_document`), or
            a log level name is unknown.
        TypeError: a log level is neither an int nor a str.
    """
    place = placement(env)
    seed = seed_from_document(document)
    primary_level = resolve_log_level(primary_log_level)
    other_level = resolve_log_level(other_log_level)
    is_primary = place.global_rank == 0
    return RankPlan(
        global_rank=place.global_rank,
        local_rank=place.local_rank,
        world_size=place.world_size,
        node_rank=place.node_rank,
        num_nodes=place.num_nodes,
        is_primary=is_primary,
        log_level=primary_level if is_primary else other_level,
        seed=seed,
        attach_observers=is_primary,
        writes_outputs=is_primary,
        source=place.source,
        job_id=place.job_id,
        array_job_id=place.array_job_id,
        array_task_id=place.array_task_id,
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
        slurm_env.RankEnvironmentError: only outside a run, if ``os.environ`` is malformed.
    """
    plan = _current
    if plan is not None:
        return plan
    return plan_rank(os.environ, {})
