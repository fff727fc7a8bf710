"""A test app for the fast composition path: its config (``conf_fast``) has every kind of
interpolation, config groups and a structured-config schema (``typed_schema``)."""

from dataclasses import dataclass
from enum import Enum

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig


class Mode(Enum):
    FAST = 1
    SLOW = 2


@dataclass
class Typed:
    lr: float = 0.1
    steps: int = 10
    mode: Mode = Mode.FAST
    label: str = "t"
    ratio: float | None = None


ConfigStore.instance().store(name="typed_schema", node=Typed, package="typed")


@hydra.main(version_base="1.3", config_path="conf_fast", config_name="config")
def main(cfg: DictConfig) -> float:
    return float(cfg.lr)


if __name__ == "__main__":
    main()
