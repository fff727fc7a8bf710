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
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from seml_hydra.job.rank import current_plan


def visible_devices(env: Mapping[str, str]) -> list[str]:
    """The entries of ``CUDA_VISIBLE_DEVICES`` in ``env`` (``"0,1"`` -> ``["0", "1"]``); ``[]``
    when it is unset, empty or ``NoDevFiles`` (Slurm's value for a task without GPUs)."""
    value = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if not value or value == "NoDevFiles":
        return []
    return [part.strip() for part in value.split(",") if part.strip()]


def gpus_per_task(env: Mapping[str, str]) -> int:
    """Slurm's ``SLURM_GPUS_PER_TASK`` (``"1"``, ``"a100:2"``) as a count; 1 when unset or
    unreadable."""
    match = re.search(r"(\d+)\s*$", env.get("SLURM_GPUS_PER_TASK", ""))
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
