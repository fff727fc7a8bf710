"""A two-rank test app whose rank 1 fails late (tests/service/test_rank_race.py): after rank 0's
task ended. Rank 1 watches the experiment's document (``SEML_MONGODB_URI``, collection
``late_rank_app``): once rank 0 recorded its end and waits (``rank_ends``) it fails at once;
if rank 0 saved COMPLETED instead, it waits for the ``gate`` file (the test creates it when the
launcher has returned) and fails then, so the launcher has seen COMPLETED for sure."""

import os
import time

import hydra
import pymongo
from omegaconf import DictConfig

from seml_hydra import current_plan


def rank0_waits_or_completed(collection) -> str | None:
    doc = collection.find_one({}, {"status": 1, "rank_ends": 1}) or {}
    if any(e.get("rank") == 0 for e in doc.get("rank_ends") or []):
        return "waits"
    return "completed" if doc.get("status") == "COMPLETED" else None


@hydra.main(version_base="1.3", config_path="conf_late", config_name="config")
def main(cfg: DictConfig) -> int:
    plan = current_plan()
    if plan.global_rank == 0:
        return 0
    url = os.environ["SEML_MONGODB_URI"]
    collection = pymongo.MongoClient(url).get_default_database()["late_rank_app"]
    deadline = time.monotonic() + cfg.max_wait_s
    seen = None
    while seen is None and time.monotonic() < deadline:
        seen = rank0_waits_or_completed(collection)
        time.sleep(0.1)
    while seen == "completed" and not os.path.exists(cfg.gate) and time.monotonic() < deadline:
        time.sleep(0.1)
    raise RuntimeError(f"late failure on rank {plan.global_rank} (rank 0: {seen})")


if __name__ == "__main__":
    main()
