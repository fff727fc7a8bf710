"""Stores the sweeper config in Hydra's ConfigStore: ``hydra/sweeper=seml``.

Imported at every Hydra start (Hydra scans ``hydra_plugins``): dataclasses and the ConfigStore
only, no ``seml_hydra`` import.
"""

from __future__ import annotations

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore

SWEEPER_TARGET = "hydra_plugins.seml_launcher.seml_sweeper.SemlSweeper"


@dataclass
class SemlSweeperConf:
    """Hydra's basic sweeper (same grid, same order, same ``params``), without composing every
    point a second time to validate it (see ``seml_sweeper.SemlSweeper``)."""

    _target_: str = SWEEPER_TARGET
    # at most this many points per launch (null: all points in one launch, i.e. one batch)
    max_batch_size: int | None = None
    # sweep parameters from the config, e.g. {optimizer.lr: "0.1,0.01"}, as in the basic sweeper
    params: dict[str, str] | None = None


ConfigStore.instance().store(
    group="hydra/sweeper", name="seml", node=SemlSweeperConf, provider="seml_launcher"
)
