"""``${hydra.job.id}`` at staging, shared by both paths of ``launch.compose``: the Slurm job id
does not exist when the launcher resolves a point, so only ``hydra.sweep.subdir`` may use it
(the job puts its id in place of ``core.hydra_node.JOB_ID_TOKEN``); anywhere else it is refused
with :class:`JobIdError`."""

from __future__ import annotations

import re
from typing import Any

from seml_hydra.core.errors import UserError
from seml_hydra.core.hydra_node import JOB_ID_TOKEN
from seml_hydra.launch.containers import to_dict

#: ``${hydra.job.id}`` or ``${hydra:job.id}`` in an unresolved string
JOB_ID_INTERPOLATION = re.compile(r"\$\{\s*hydra\s*[.:]\s*job\.id\s*\}")


class JobIdError(UserError):
    """A config that needs ``${hydra.job.id}`` at staging (:func:`job_id_message`)."""


def job_id_message(key: str, text: str | None = None) -> str:
    """The refusal of ``${hydra.job.id}`` in ``key`` (unresolved ``text`` when known; pure):
    the launcher resolves every point's config at staging, before Slurm gives the job its id
    (hydra-submitit-launcher resolves it in the job). Only ``hydra.sweep.subdir`` gets the id
    in the job (:func:`mark_job_id`)."""
    return (
        f"{key if text is None else f'{key}={text}'} uses ${{hydra.job.id}}, the Slurm job "
        "id, which does not exist yet when seml-hydra resolves the config (at staging); only "
        "hydra.sweep.subdir gets it in the job (e.g. hydra.sweep.subdir=${hydra.job.num}_"
        "${hydra.job.id}). Elsewhere use ${hydra.job.num} instead (unique within the sweep); "
        "the job's Slurm id is recorded in its document (hydra.job_id). Nothing was staged."
    )


def mark_job_id(cfg: Any) -> bool:
    """Set ``hydra.job.id`` of a composed, unresolved config to ``JOB_ID_TOKEN`` when its
    ``hydra.sweep.subdir`` uses ``${hydra.job.id}`` (hydra-submitit-launcher's
    ``${hydra.job.num}_${hydra.job.id}``): the Slurm job id exists only in the job, which puts
    it in the token's place (``core.hydra_node.with_job_id``). Returns whether it did."""
    from omegaconf import open_dict, read_write

    text = to_dict(cfg.hydra.sweep, resolve=False).get("subdir")
    if not (isinstance(text, str) and JOB_ID_INTERPOLATION.search(text)):
        return False
    with read_write(cfg.hydra), open_dict(cfg.hydra):
        cfg.hydra.job.id = JOB_ID_TOKEN
    return True


def token_path(value: Any, path: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """The path of the first string of a resolved container that holds ``JOB_ID_TOKEN``, or
    None (pure)."""
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return path if isinstance(value, str) and JOB_ID_TOKEN in value else None
    for key, item in items:
        found = token_path(item, (*path, str(key)))
        if found is not None:
            return found
    return None
