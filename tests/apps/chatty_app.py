"""A test app whose task prints ``chars`` characters (in lines of 100) and returns 1."""

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf_chatty", config_name="config")
def main(cfg: DictConfig) -> int:
    line = "y" * 99
    for _ in range(cfg.chars // 100):
        print(line)
    print("last line")
    return 1


if __name__ == "__main__":
    main()
