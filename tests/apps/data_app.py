"""A test app whose result holds numpy scalars and arrays, a datetime, a path, a tuple and an
enum: all must be stored as plain, queryable data (tests/service/test_manage_results.py)."""

import enum
from datetime import datetime
from pathlib import Path

import hydra
import numpy as np
from omegaconf import DictConfig

from seml_hydra import log_scalar


class Color(enum.Enum):
    RED = "red"


@hydra.main(version_base="1.3", config_path="conf_data", config_name="config")
def main(cfg: DictConfig) -> dict:
    log_scalar("score", np.int64(7), step=np.int64(0))
    log_scalar("score", np.float32(0.5))
    return {
        "acc": np.float64(0.93),
        "n": np.int64(3),
        "flag": np.bool_(True),
        "arr": np.arange(3),
        "when": datetime(2026, 1, 2, 3, 4, 5),
        "path": Path("/data/run"),
        "pair": (1, np.float32(0.5)),
        "color": Color.RED,
        "nested": {"m": np.eye(2), "k": [np.int32(cfg.x)]},
    }


if __name__ == "__main__":
    main()
