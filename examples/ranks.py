"""Every rank of a multi-task experiment reports who it is (used by the tests; also a demo).

    python examples/ranks.py -m hydra/launcher=seml hydra.launcher.nodes=2 \
        hydra.launcher.tasks_per_node=2 report_dir=$PWD/ranks tag=a,b

Each rank writes ``<report_dir>/<tag>/rank<global rank>.json`` with its facts from
``seml_hydra.current_plan()`` (ranks, world size, node, seed), the effective root log
level, the host, what it sees of Hydra's output files, and its GPUs (``CUDA_VISIBLE_DEVICES``,
``seml_hydra.local_device()``). ``fail_rank=1`` makes rank 1 raise.
The experiment's result is the primary's return value: ``{"global_rank": 0, ...}``.
"""

import json
import logging
import os
import random
import socket
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from seml_hydra import current_plan, local_device

log = logging.getLogger(__name__)


@hydra.main(version_base="1.3", config_path="conf_ranks", config_name="config")
def main(cfg: DictConfig) -> dict:
    plan = current_plan()
    hydra_cfg = HydraConfig.get()
    output_dir = Path(hydra_cfg.runtime.output_dir)
    facts = {
        "global_rank": plan.global_rank,
        "local_rank": plan.local_rank,
        "world_size": plan.world_size,
        "node_rank": plan.node_rank,
        "num_nodes": plan.num_nodes,
        "is_primary": plan.is_primary,
        "seed": plan.seed,
        "random": random.random(),  # equal on all ranks: `random` is seeded with the seed
        "root_log_level": logging.getLevelName(logging.getLogger().getEffectiveLevel()),
        "hostname": socket.gethostname(),
        "job_id": plan.job_id,
        "pid": os.getpid(),
        "cwd": os.getcwd(),
        "output_dir": str(output_dir),
        "output_subdir": hydra_cfg.output_subdir,  # None: this rank writes no .hydra/
        "hydra_dir_exists": (output_dir / ".hydra").is_dir(),
        # the GPUs Slurm gave this rank, and the one seml_hydra.local_device() picks among them
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "local_device": local_device(plan.local_rank),
    }
    # one line at each level: only the primary's INFO line may appear anywhere
    log.info("rank %d of %d: INFO from the task", plan.global_rank, plan.world_size)
    log.error("rank %d of %d: ERROR from the task", plan.global_rank, plan.world_size)
    if cfg.report_dir:
        where = Path(cfg.report_dir) / str(cfg.tag)
        where.mkdir(parents=True, exist_ok=True)
        tmp = where / f".rank{plan.global_rank}.json.tmp"
        tmp.write_text(json.dumps(facts, indent=1))
        tmp.rename(where / f"rank{plan.global_rank}.json")
    if plan.global_rank == cfg.fail_rank:
        raise RuntimeError(f"injected failure on rank {plan.global_rank}")
    return {"global_rank": plan.global_rank, "hostname": facts["hostname"], "tag": cfg.tag}


if __name__ == "__main__":
    main()
