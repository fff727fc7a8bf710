"""JAX multi-process on CPU: one experiment, one JAX process per Slurm task.

Adapted from SEML's JAX example (``examples/advanced/jax_distributed``)::

    python examples/jax_distributed.py -m hydra/launcher=seml hydra.launcher.tasks_per_node=2
    python examples/jax_distributed.py -m hydra/launcher=seml hydra.launcher.nodes=2

Every rank calls ``jax.distributed.initialize()`` with no arguments: JAX detects Slurm itself
(coordinator = first node of the step, port 61440 + SLURM_JOB_ID % 4096, so two jobs never share
a port; process id and count from SLURM_PROCID / SLURM_NTASKS). The upstream example's
``SlurmCluster.get_coordinator_address()`` takes two arguments in current JAX and raises as
written. Under ``hydra/launcher=seml_local`` (no Slurm) the coordinator, process id and count
come from the rank plan instead. The experiment's result is rank 0's ``jax.process_index()``;
with ``report_dir`` every rank also writes its index and the all-gathered values.
"""

import json
import logging
import os
from pathlib import Path

import hydra
from omegaconf import DictConfig

from seml_hydra import current_plan

log = logging.getLogger(__name__)


def initialize(timeout_s: int) -> None:
    import jax

    # gloo is the CPU collectives default since jax 0.4.3x; older versions default to none
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    plan = current_plan()
    if plan.source == "slurm":
        jax.distributed.initialize(initialization_timeout=timeout_s)
    else:  # submitit's local executor: one machine, a port derived from the local job id
        jax.distributed.initialize(
            f"127.0.0.1:{61440 + int(plan.job_id) % 4096}",
            num_processes=plan.world_size,
            process_id=plan.global_rank,
            initialization_timeout=timeout_s,
        )


@hydra.main(version_base="1.3", config_path="conf_distributed", config_name="config")
def main(cfg: DictConfig) -> int:
    import jax
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    initialize(int(cfg.init_timeout_s))
    index, count = jax.process_index(), jax.process_count()
    gathered = multihost_utils.process_allgather(jnp.array([index + 1.0]))
    values = [float(v) for v in gathered.ravel()]
    log.info("process %d of %d, all-gathered %s", index, count, values)
    if cfg.report_dir:
        Path(cfg.report_dir).mkdir(parents=True, exist_ok=True)
        report = {
            "global_rank": current_plan().global_rank,
            "process_index": index,
            "process_count": count,
            "allgather": values,
            "hostname": os.uname().nodename,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),  # GPUs bound to it
        }
        path = Path(cfg.report_dir) / f"rank{current_plan().global_rank}.json"
        path.write_text(json.dumps(report))
    return index


if __name__ == "__main__":
    main()
