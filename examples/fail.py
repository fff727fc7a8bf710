"""Minimal Hydra app that fails for one sweep point (used by the tests).

python examples/fail.py -m x=1,2,3   # x=2 raises ValueError, the others return x * 10
"""

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf_fail", config_name="config")
def main(cfg: DictConfig) -> int:
    if cfg.x == cfg.fail_on:
        raise ValueError(f"x == {cfg.x}")
    return cfg.x * 10


if __name__ == "__main__":
    main()
