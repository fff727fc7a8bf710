"""A test app that needs two runs: it saves its progress when Slurm signals a timeout (opted in
through ``seml_hydra.on_requeue``) and finishes after the requeue. ``opt_in=false`` does not opt in."""

import json
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from seml_hydra import on_requeue, requeues


@hydra.main(version_base="1.3", config_path="conf_resume", config_name="config")
def main(cfg: DictConfig) -> dict:
    state_file = Path(HydraConfig.get().runtime.output_dir) / "state.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {"runs": 0}
    state["runs"] += 1
    if cfg.opt_in:
        on_requeue(lambda: state_file.write_text(json.dumps(state)))
    print("started", flush=True)  # (the test signals the job after this line)
    if requeues() == 0:
        time.sleep(cfg.sleep_s)  # Slurm signals (and the hook saves) while we wait here
    return {"runs": state["runs"], "requeues": requeues()}


if __name__ == "__main__":
    main()
