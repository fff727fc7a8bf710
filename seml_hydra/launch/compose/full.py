"""Hydra's full composition of one sweep point (``load_sweep_config``, as Hydra's own launchers
compose a job), resolved in the launcher: the path of every point the fast path
(``launch.compose.fast``) does not take, and the reference the fast path is checked against."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from seml_hydra.launch.compose.job_id import (
    JOB_ID_INTERPOLATION,
    JobIdError,
    job_id_message,
    mark_job_id,
    token_path,
)
from seml_hydra.launch.containers import to_dict


def compose_full(
    config_loader: Any, master_config: Any, overrides: Sequence[str], job_num: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One point by Hydra's full composition, resolved with ``hydra.job.num = job_num`` and its
    ``hydra.runtime.output_dir`` set (absolute), as the job will see them.

    Args:
        config_loader: ``hydra_context.config_loader``.
        master_config: the launcher's config (``Launcher.setup(config=...)``).
        overrides: the point's task overrides.
        job_num: the point's ``hydra.job.num``.

    Returns ``(app config, hydra node)``: plain containers, enums as their names, missing
    values as ``"???"``; ``hydra.sweep.dir`` absolute (jobs run from the code snapshot).

    Raises Hydra's and OmegaConf's own errors for a point that does not compose or resolve;
    :class:`~seml_hydra.launch.compose.job_id.JobIdError` for ``${hydra.job.id}`` outside
    ``hydra.sweep.subdir``. Leaves ``HydraConfig`` holding this point's config.
    """
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict, read_write
    from omegaconf.errors import InterpolationToMissingValueError

    cfg = config_loader.load_sweep_config(master_config, list(overrides))
    with open_dict(cfg):
        cfg.hydra.job.num = job_num
    HydraConfig.instance().set_config(cfg)
    text = to_dict(cfg.hydra.sweep, resolve=False).get("dir")
    if isinstance(text, str) and JOB_ID_INTERPOLATION.search(text):
        raise JobIdError(job_id_message("hydra.sweep.dir", text))
    marked = mark_job_id(cfg)  # ${hydra.job.id} in the subdir: the job puts its id there
    try:
        sweep_dir = str(OmegaConf.select(cfg, "hydra.sweep.dir"))
        subdir = str(OmegaConf.select(cfg, "hydra.sweep.subdir"))
        with read_write(cfg.hydra.runtime), open_dict(cfg.hydra.runtime):
            cfg.hydra.runtime.output_dir = os.path.abspath(os.path.join(sweep_dir, subdir))
        HydraConfig.instance().set_config(cfg)
        container = to_dict(cfg, resolve=True, throw_on_missing=False, enum_to_str=True)
    except InterpolationToMissingValueError as error:
        if "hydra.job.id" not in str(error):
            raise
        raise JobIdError(job_id_message(str(error.full_key))) from None
    if marked:  # only the Hydra node may hold the job id's token: the config is stored as is
        found = token_path({k: v for k, v in container.items() if k != "hydra"})
        if found is not None:
            raise JobIdError(job_id_message(".".join(found)))
    assert isinstance(container, dict)
    hydra_node = container.pop("hydra")
    # jobs run from elsewhere (the code snapshot): output paths must not be relative
    hydra_node["sweep"]["dir"] = os.path.abspath(str(hydra_node["sweep"]["dir"]))
    return container, hydra_node
