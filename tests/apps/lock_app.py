"""A test app whose task cannot be pickled: it closes over a lock."""

import threading

import hydra
from omegaconf import DictConfig

LOCK = threading.Lock()


@hydra.main(version_base="1.3", config_path="conf_bad", config_name="config")
def main(cfg: DictConfig) -> int:
    with LOCK:
        return 1


if __name__ == "__main__":
    main()
