"""torch.distributed on CPU (gloo): one experiment, one process per Slurm task, an all-reduce.

    python examples/torch_distributed.py -m hydra/launcher=seml hydra.launcher.tasks_per_node=2
    python examples/torch_distributed.py -m hydra/launcher=seml hydra.launcher.nodes=2

Rendezvous (``env://``), set by the task from its job and its rank plan:

* ``MASTER_ADDR``: the job's first host (``scontrol show hostnames $SLURM_JOB_NODELIST``);
  127.0.0.1 under ``hydra/launcher=seml_local``;
* ``MASTER_PORT``: 10000 + job id % 20000, so concurrent jobs on a node never share a port
  (below Linux's ephemeral ports and clear of JAX's 61440-65535);
* ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``: from ``seml_hydra.current_plan()``.

Every rank all-reduces ``rank + 1``: the sum is ``n (n + 1) / 2`` on each of the ``n`` ranks.
The experiment's result is rank 0's sum; with ``report_dir`` every rank writes its own.
"""

import datetime
import json
import logging
import os
import subprocess
from pathlib import Path

import hydra
from omegaconf import DictConfig

from seml_hydra import current_plan

log = logging.getLogger(__name__)


def rendezvous_env() -> dict[str, str]:
    plan = current_plan()
    if plan.source == "slurm":
        hosts = subprocess.run(
            ["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        addr, job_number = hosts[0], int(os.environ["SLURM_JOB_ID"])
    else:  # submitit's local executor (job id = a process id) or a plain run
        addr, job_number = "127.0.0.1", int(plan.job_id or os.getpid())
    return {
        "MASTER_ADDR": addr,
        "MASTER_PORT": str(10000 + job_number % 20000),
        "RANK": str(plan.global_rank),
        "WORLD_SIZE": str(plan.world_size),
        "LOCAL_RANK": str(plan.local_rank),
    }


@hydra.main(version_base="1.3", config_path="conf_distributed", config_name="config")
def main(cfg: DictConfig) -> float:
    import torch
    import torch.distributed as dist

    os.environ.update(rendezvous_env())
    dist.init_process_group(
        backend="gloo",
        init_method="env://",
        timeout=datetime.timedelta(seconds=int(cfg.init_timeout_s)),
    )
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        value = torch.tensor([float(rank + 1)])
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        total = value.item()
        log.info("rank %d of %d: all-reduce sum %s", rank, world, total)
        if cfg.report_dir:
            Path(cfg.report_dir).mkdir(parents=True, exist_ok=True)
            report = {
                "rank": rank,
                "world_size": world,
                "all_reduce": total,
                "master": f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                "hostname": os.uname().nodename,
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),  # GPUs bound to it
            }
            (Path(cfg.report_dir) / f"rank{rank}.json").write_text(json.dumps(report))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return total


if __name__ == "__main__":
    main()
