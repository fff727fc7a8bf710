"""A test app whose task sleeps ``seconds`` and returns them (for detaching, cancelling...)."""

import time

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf_sleep", config_name="config")
def main(cfg: DictConfig) -> float:
    time.sleep(cfg.seconds)
    return cfg.seconds


if __name__ == "__main__":
    main()
