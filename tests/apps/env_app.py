"""Test app that returns one environment variable of the process that runs it (the local
worker's ``--worker-gpus`` test): ``python tests/apps/env_app.py -m var=CUDA_VISIBLE_DEVICES x=1,2``.

With ``pair=true`` it returns ``[that variable, cfg.where]``: ``where`` is
``${oc.env:SEML_HYDRA_TEST_WHERE,unset}`` in its config, so the result shows where the app
config's ``${oc.env:...}`` was resolved (at staging or in the job).
"""

import os

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf_env", config_name="config")
def main(cfg: DictConfig) -> str | list | None:
    if cfg.pair:
        return [os.environ.get(cfg.var), cfg.where]
    return os.environ.get(cfg.var)


if __name__ == "__main__":
    main()
