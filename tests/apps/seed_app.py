"""A test app that returns what its cfg holds and the seed it runs with
(tests/service/test_config_seed.py: the stored ``config.seed`` never reaches the task's cfg
unless the app's config has its own ``seed`` key)."""

import hydra
from omegaconf import DictConfig, OmegaConf

from seml_hydra import current_plan


@hydra.main(version_base="1.3", config_path="conf_seed", config_name="config")
def main(cfg: DictConfig) -> dict:
    return {"cfg": OmegaConf.to_container(cfg), "plan_seed": current_plan().seed}


if __name__ == "__main__":
    main()
