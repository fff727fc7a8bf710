"""The heartbeat benchmark's chatty Hydra app (benchmarks/heartbeat_bytes.py): the task prints
``kb_per_s`` KB per second for ``seconds`` seconds (``chatter.chatter``) and returns the number
of characters printed."""

import hydra
from chatter import chatter
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf_chatty", config_name="config")
def main(cfg: DictConfig) -> int:
    return chatter(cfg.kb_per_s, cfg.seconds)


if __name__ == "__main__":
    main()
