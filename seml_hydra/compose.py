"""Compose sweep points: Hydra overrides -> one resolved config per point, and back to a
``DictConfig`` on the node.

All composition goes through :func:`compose_points` (one function, so a faster path for large
sweeps can replace its inside later). Each point is composed by Hydra's config loader
(``load_sweep_config``, which copies the master config's resolver cache so ``${now:...}`` values
agree) and resolved ONCE here, in the launcher, with ``hydra.job.num`` and
``hydra.runtime.output_dir`` already set, so every rank of every job sees the same values.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class SweepPoint:
    """One composed, resolved sweep point.

    Attributes:
        index: position in the launch's ``job_overrides`` (JobReturns come back in this order).
        job_num: ``hydra.job.num`` (``initial_job_idx + index``).
        overrides: the point's task overrides as given by the sweeper.
        config: the resolved app config, plain containers, without the ``hydra`` key.
        hydra: the resolved ``hydra`` node, plain containers.
    """

    index: int
    job_num: int
    overrides: list[str]
    config: dict[str, Any]
    hydra: dict[str, Any]

    @property
    def launcher(self) -> dict[str, Any]:
        """The point's own ``hydra.launcher`` node (resources may differ per point)."""
        return self.hydra["launcher"]


def _warm_resolver_cache(master_config: Any) -> None:
    """Resolve the master config once so cached resolvers (``now``) are fixed before the points
    copy the cache (Hydra's ``load_sweep_config`` calls ``OmegaConf.copy_cache``)."""
    from omegaconf import OmegaConf

    try:
        OmegaConf.to_container(master_config, resolve=True, throw_on_missing=False)
    except Exception:  # a value that only resolves per point: those points resolve it themselves
        pass


def compose_points(
    config_loader: Any,
    master_config: Any,
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
) -> list[SweepPoint]:
    """Compose and resolve every sweep point.

    Args:
        config_loader: ``hydra_context.config_loader``.
        master_config: the launcher's config (``Launcher.setup(config=...)``).
        job_overrides: one override list per point, as the sweeper passes them to ``launch``.
        initial_job_idx: the batch's first ``hydra.job.num``.

    Returns the points in input order.

    Raises Hydra's own errors (``ConfigCompositionException``, ``InterpolationResolutionError``...)
    for a point that does not compose or resolve; nothing has been staged at that time.
    """
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict, read_write

    _warm_resolver_cache(master_config)
    previous = HydraConfig.instance().cfg
    points = []
    try:
        for index, overrides in enumerate(job_overrides):
            job_num = initial_job_idx + index
            cfg = config_loader.load_sweep_config(master_config, list(overrides))
            with open_dict(cfg):
                cfg.hydra.job.num = job_num
            HydraConfig.instance().set_config(cfg)
            sweep_dir = str(OmegaConf.select(cfg, "hydra.sweep.dir"))
            subdir = str(OmegaConf.select(cfg, "hydra.sweep.subdir"))
            with read_write(cfg.hydra.runtime), open_dict(cfg.hydra.runtime):
                cfg.hydra.runtime.output_dir = os.path.abspath(os.path.join(sweep_dir, subdir))
            HydraConfig.instance().set_config(cfg)
            container = OmegaConf.to_container(
                cfg, resolve=True, throw_on_missing=False, enum_to_str=True
            )
            assert isinstance(container, dict)
            hydra_node = container.pop("hydra")
            # jobs run from elsewhere (the code snapshot): output paths must not be relative
            hydra_node["sweep"]["dir"] = os.path.abspath(str(hydra_node["sweep"]["dir"]))
            points.append(SweepPoint(index, job_num, list(overrides), container, hydra_node))
    finally:
        if previous is not None:
            HydraConfig.instance().cfg = previous
    return points


def escape_interpolations(value: Any) -> Any:
    """Escape ``${`` in the strings of a resolved container, so building a ``DictConfig`` from it
    does not interpolate a second time (a value resolved from ``\\${HOME}`` is the literal
    ``${HOME}``). Backslashes before ``${`` are doubled first, as OmegaConf's grammar wants."""
    if isinstance(value, dict):
        return {k: escape_interpolations(v) for k, v in value.items()}
    if isinstance(value, list):
        return [escape_interpolations(v) for v in value]
    if isinstance(value, str) and "${" in value:
        return re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", value)
    return value


def job_config(config: dict[str, Any], hydra_node: dict[str, Any], job_id: str | None) -> Any:
    """Rebuild the ``DictConfig`` that Hydra's ``run_job`` expects from a stored point.

    ``hydra`` must be typed as Hydra's ``HydraConf`` (``HydraConfig.set_config`` asserts it), so
    the stored node is merged onto the structured schema. ``job_id`` becomes ``hydra.job.id``
    (Slurm's ``<array>_<task>``).
    """
    from hydra.conf import HydraConf
    from omegaconf import OmegaConf, open_dict

    hydra_cfg = OmegaConf.structured(HydraConf)
    OmegaConf.set_struct(hydra_cfg, False)  # Hydra's composed node carries keys beyond the schema
    hydra_cfg.merge_with(escape_interpolations(hydra_node))
    if job_id is not None:
        hydra_cfg.job.id = job_id
    cfg = OmegaConf.create(escape_interpolations(config))
    with open_dict(cfg):
        cfg.hydra = hydra_cfg
    return cfg
