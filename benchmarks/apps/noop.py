"""The benchmarks' no-op Hydra app (seml-hydra and hydra-submitit-launcher run the same file).

The task records the time of its entry: with ``BENCH_ENTRY_LOG`` set it appends
``<slurm job id> <BENCH_T0> <entry time>`` to that file, where ``BENCH_T0`` is exported by the
sbatch script's ``setup`` line (the moment the Slurm task starts, before ``srun`` and Python).
"""

import os
import time

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> int:
    entered = time.time()
    log = os.environ.get("BENCH_ENTRY_LOG")
    if log:
        job = (
            os.environ.get("SLURM_ARRAY_JOB_ID", "")
            + "_"
            + os.environ.get("SLURM_ARRAY_TASK_ID", "")
        )
        with open(log, "a") as f:
            f.write(f"{job} {os.environ.get('BENCH_T0', 'nan')} {entered:.6f}\n")
    return cfg.x + cfg.y


if __name__ == "__main__":
    main()
