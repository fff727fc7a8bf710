"""A Hydra app that logs metrics through the experiment's Sacred run (seml_hydra.log_scalar)."""

import hydra
from omegaconf import DictConfig

from seml_hydra import log_scalar


@hydra.main(version_base="1.3", config_path="conf_metrics", config_name="config")
def main(cfg: DictConfig) -> dict:
    print(f"training with lr={cfg.lr}")
    logged = [log_scalar("loss", cfg.lr / (step + 1), step) for step in range(cfg.steps)]
    return {"final_loss": cfg.lr / cfg.steps, "logged": all(logged)}


if __name__ == "__main__":
    main()
