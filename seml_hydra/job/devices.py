"""Which GPU a rank uses (pure): the documented helper behind ``seml_hydra.local_device``.

With ``hydra.launcher.gpus_per_task`` (sbatch/srun ``--gpus-per-task``) Slurm binds GPUs to
tasks: each rank's ``CUDA_VISIBLE_DEVICES`` lists only its own, so it uses device 0. Some sites
(or ``gpus_per_node`` without binding) give every task all of the node's GPUs; then the rank
picks by its ``local_rank`` (``RankPlan.local_rank``, the rank among the tasks on its node), as
torch.distributed and jax.distributed examples do with ``LOCAL_RANK``. :func:`local_device`
covers both::

    import torch
    from seml_hydra import local_device

    index = local_device()          # None without GPUs
    if index is not None:
        torch.cuda.set_device(index)

On ``seml_local`` there is no Slurm to bind GPUs: the launcher spreads the machine's GPUs
(``hydra.launcher.visible_gpus``) over its jobs and ranks (:func:`local_rank_gpus`, pure) and
hands each job its ranks' lists in :data:`LOCAL_GPUS_VAR`; each rank process then sets its own
``CUDA_VISIBLE_DEVICES`` from it (:func:`local_gpu_environment`) before the task starts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from seml_hydra.job.rank import current_plan
from seml_hydra.job.slurm_env import SOURCE_SUBMITIT_LOCAL, placement

#: a ``seml_local`` job's GPUs, one entry per local rank: ``"0,1;2,3"`` (rank 0 sees 0,1 ...)
LOCAL_GPUS_VAR = "SEML_HYDRA_LOCAL_GPUS"
#: a ``seml_local`` job's ``gpus_per_task`` (what ``SLURM_GPUS_PER_TASK`` is on Slurm)
GPUS_PER_TASK_VAR = "SEML_HYDRA_GPUS_PER_TASK"


def visible_devices(env: Mapping[str, str]) -> list[str]:
    """The entries of ``CUDA_VISIBLE_DEVICES`` in ``env`` (``"0,1"`` -> ``["0", "1"]``); ``[]``
    when it is unset, empty or ``NoDevFiles`` (Slurm's value for a task without GPUs)."""
    value = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if not value or value == "NoDevFiles":
        return []
    return [part.strip() for part in value.split(",") if part.strip()]


def gpus_per_task(env: Mapping[str, str]) -> int:
    """Slurm's ``SLURM_GPUS_PER_TASK`` (``"1"``, ``"a100:2"``), else ``seml_local``'s
    :data:`GPUS_PER_TASK_VAR`, as a count; 1 when unset or unreadable."""
    value = env.get("SLURM_GPUS_PER_TASK") or env.get(GPUS_PER_TASK_VAR, "")
    match = re.search(r"(\d+)\s*$", value)
    return max(1, int(match.group(1))) if match else 1


def local_device(local_rank: int | None = None, env: Mapping[str, str] | None = None) -> int | None:
    """The index (into this process's visible devices, i.e. ``cuda:<index>``) of the first GPU
    this rank should use, or None when it sees no GPU.

    Args:
        local_rank: the rank among the tasks on this node; default: the running experiment's
            (``seml_hydra.job.rank.current_plan().local_rank``).
        env: the environment (default ``os.environ``): ``CUDA_VISIBLE_DEVICES`` and
            ``SLURM_GPUS_PER_TASK``.

    Returns:
        ``0`` when the rank sees no more GPUs than it was given (Slurm bound them to the task:
        they are its own), else ``local_rank * gpus_per_task % visible`` (every task sees all
        of the node's GPUs: ranks take disjoint ones in local-rank order).
    """
    env = os.environ if env is None else env
    visible = visible_devices(env)
    if not visible:
        return None
    per_task = gpus_per_task(env)
    if len(visible) <= per_task:
        return 0
    if local_rank is None:
        local_rank = current_plan().local_rank
    return (local_rank * per_task) % len(visible)


# -- seml_local: the machine's GPUs spread over jobs and ranks (submitit's LocalExecutor gives
# every job the same first gpus_per_node GPUs: submitit/local/local.py, ``visible_gpus``) --


def local_job_gpu_count(launcher: Mapping[str, Any]) -> int:
    """How many GPUs one ``seml_local`` job gets (pure): ``tasks_per_node * gpus_per_task``
    when ``gpus_per_task`` is set, else ``gpus_per_node``, else 0."""
    if launcher.get("gpus_per_task"):
        return int(launcher.get("tasks_per_node") or 1) * int(launcher["gpus_per_task"])
    return int(launcher.get("gpus_per_node") or 0)


def check_visible_gpus(launcher: Mapping[str, Any]) -> None:
    """Refuse a ``visible_gpus`` that cannot be spread (pure; None is fine).

    Raises:
        ValueError: naming the field: not a list of distinct GPU ids (ints >= 0, or names such
            as ``GPU-<uuid>`` without ``,``/``;``/spaces), no GPU count to spread them by
            (neither ``gpus_per_task`` nor ``gpus_per_node``), or one job needs more GPUs
            than listed (as submitit's ``LocalExecutor`` refuses it).
    """
    visible = launcher.get("visible_gpus")
    if visible is None:
        return
    where = f"hydra.launcher.visible_gpus={visible!r}"

    def is_id(x: Any) -> bool:
        if isinstance(x, bool):
            return False
        if isinstance(x, int):
            return x >= 0
        return isinstance(x, str) and re.fullmatch(r"[A-Za-z0-9_./:-]+", x) is not None

    if isinstance(visible, (str, bytes)) or not all(is_id(x) for x in visible):
        raise ValueError(f"{where}: must be a list of GPU ids, e.g. [0, 1, 2, 3]")
    ids = [str(x) for x in visible]
    if len(set(ids)) != len(ids) or not ids:
        raise ValueError(f"{where}: must list each GPU once, at least one")
    per_job = local_job_gpu_count(launcher)
    if per_job == 0:
        raise ValueError(
            f"{where}: say how many GPUs each job gets with hydra.launcher.gpus_per_task "
            "(per rank) or gpus_per_node (per job)"
        )
    if per_job > len(ids):
        raise ValueError(f"{where}: one job needs {per_job} GPUs, only {len(ids)} are listed")


def local_rank_gpus(launcher: Mapping[str, Any], job_index: int) -> list[list[str]]:
    """The GPUs each local rank of ``seml_local`` job number ``job_index`` (0, 1, ... in
    submission order) sees (pure): one list of ids per rank, ``[]`` when no GPU is asked for.

    The job gets :func:`local_job_gpu_count` GPUs ``n``: positions ``job_index * n ...
    job_index * n + n - 1`` of ``visible_gpus``, wrapping around when more jobs than GPUs run
    (jobs then share, as evenly as possible); without ``visible_gpus`` the first ``n`` GPUs,
    the same for every job (submitit's ``LocalExecutor``). With ``gpus_per_task`` each rank
    gets its own consecutive ``gpus_per_task`` of them (``--gpus-per-task`` on Slurm), else
    every rank sees all of the job's (``gpus_per_node``, as Slurm without binding).
    """
    per_job = local_job_gpu_count(launcher)
    ranks = int(launcher.get("tasks_per_node") or 1)
    visible = [str(x) for x in launcher.get("visible_gpus") or range(per_job)]
    if per_job == 0 or not visible:
        return [[] for _ in range(ranks)]
    start = job_index * per_job
    job = [visible[(start + k) % len(visible)] for k in range(per_job)]
    per_rank = launcher.get("gpus_per_task")
    if not per_rank:
        return [list(job) for _ in range(ranks)]
    return [job[r * per_rank : (r + 1) * per_rank] for r in range(ranks)]


def local_job_environment(launcher: Mapping[str, Any], job_index: int) -> dict[str, str]:
    """The environment of ``seml_local`` job number ``job_index`` that spreads the GPUs (pure):
    :data:`LOCAL_GPUS_VAR` (:func:`local_rank_gpus`, ``;`` between ranks) and, with
    ``gpus_per_task``, :data:`GPUS_PER_TASK_VAR`; ``{}`` when the job asks for no GPU."""
    if local_job_gpu_count(launcher) == 0:
        return {}
    ranks = local_rank_gpus(launcher, job_index)
    env = {LOCAL_GPUS_VAR: ";".join(",".join(gpus) for gpus in ranks)}
    if launcher.get("gpus_per_task"):
        env[GPUS_PER_TASK_VAR] = str(launcher["gpus_per_task"])
    return env


def local_gpu_environment(env: Mapping[str, str]) -> dict[str, str]:
    """What this rank process sets in its environment before the task starts (pure): on
    submitit's local executor with :data:`LOCAL_GPUS_VAR` set, ``{"CUDA_VISIBLE_DEVICES":
    <this local rank's entry>}``; else ``{}`` (Slurm sets it itself). Raises
    ``RankEnvironmentError`` when the local rank variables are malformed."""
    value = env.get(LOCAL_GPUS_VAR)
    if value is None:
        return {}
    place = placement(env)
    entries = value.split(";")
    if place.source != SOURCE_SUBMITIT_LOCAL or place.local_rank >= len(entries):
        return {}
    return {"CUDA_VISIBLE_DEVICES": entries[place.local_rank]}
