"""Test app that returns one environment variable of the process that runs it (the local
worker's ``--worker-gpus`` test): ``python tests/apps/env_app.py -m var=CUDA_VISIBLE_DEVICES x=1,2``.
"""

import os

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf_env", config_name="config")
def main(cfg: DictConfig) -> str | None:
    return os.environ.get(cfg.var)


if __name__ == "__main__":
    main()
