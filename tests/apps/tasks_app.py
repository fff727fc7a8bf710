"""A test app whose launcher ``tasks_per_node`` follows its own ``ntasks`` value."""

import hydra
from omegaconf import DictConfig

from seml_hydra import current_plan


@hydra.main(version_base="1.3", config_path="conf_tasks", config_name="config")
def main(cfg: DictConfig) -> int:
    return current_plan().world_size


if __name__ == "__main__":
    main()
