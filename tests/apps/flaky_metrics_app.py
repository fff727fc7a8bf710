"""A test app whose first attempt logs metrics and then fails, and whose next attempt (the
file ``cfg.marker`` exists then) logs other values and succeeds (tests/service/test_manage_results.py)."""

from pathlib import Path

import hydra
from omegaconf import DictConfig

from seml_hydra import log_scalar


@hydra.main(version_base="1.3", config_path="conf_data", config_name="config")
def main(cfg: DictConfig) -> float:
    marker = Path(cfg.marker)
    if not marker.exists():
        log_scalar("loss", 100.0)
        log_scalar("loss", 100.0)
        marker.touch()
        raise RuntimeError("first attempt fails")
    for _ in range(3):
        log_scalar("loss", 1.0)
    return 1.0


if __name__ == "__main__":
    main()
