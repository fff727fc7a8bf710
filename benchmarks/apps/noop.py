"""The benchmarks' no-op Hydra app (seml-hydra and hydra-submitit-launcher run the same file).

The task records the time of its entry: with ``BENCH_ENTRY_LOG`` set it appends
``<slurm job id> <BENCH_T0> <entry time>`` to that file, where ``BENCH_T0`` is exported by the
sbatch script's ``setup`` line (the moment the Slurm task starts, before ``srun`` and Python).
With ``BENCH_CPU_LOG`` set it appends ``<slurm job id> <CPU s> <children's CPU s>`` to that
file: the task process' user + system CPU time until the task's first line (``getrusage``,
every thread of the process; the children it waited for apart).
"""

import os
import resource
import time

import hydra
from omegaconf import DictConfig


def _job() -> str:
    return (
        os.environ.get("SLURM_ARRAY_JOB_ID", "") + "_" + os.environ.get("SLURM_ARRAY_TASK_ID", "")
    )


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> int:
    entered = time.time()
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    log = os.environ.get("BENCH_ENTRY_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{_job()} {os.environ.get('BENCH_T0', 'nan')} {entered:.6f}\n")
    cpu_log = os.environ.get("BENCH_CPU_LOG")
    if cpu_log:
        cpu = own.ru_utime + own.ru_stime
        child_cpu = children.ru_utime + children.ru_stime
        with open(cpu_log, "a") as f:
            f.write(f"{_job()} {cpu:.4f} {child_cpu:.4f}\n")
    return cfg.x + cfg.y


if __name__ == "__main__":
    main()
