"""A training loop for the early-stopping tests: the loss at step ``s`` (1..steps) is
``x + 1/s``, reported through ``seml_hydra.report``; it stops when told to and returns the last
loss. Every rank writes the answers it got to ``answers_rank<r>.json`` in the job's output
directory."""

import json
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import seml_hydra


@hydra.main(version_base="1.3", config_path="conf_curve", config_name="config")
def main(cfg: DictConfig) -> float:
    answers = []
    loss = float("nan")
    for step in range(1, cfg.steps + 1):
        loss = cfg.x + 1.0 / step
        stop = seml_hydra.report("loss", loss, step)
        answers.append([step, stop])
        if stop:
            break
    rank = seml_hydra.current_plan().global_rank
    out = Path(HydraConfig.get().runtime.output_dir) / f"answers_rank{rank}.json"
    out.write_text(json.dumps(answers))
    return loss


if __name__ == "__main__":
    main()
