"""Test app that returns how Python's cyclic garbage collector stands when the task starts
(``tests/service/test_job_startup.py``): ``[collector on, start-up frozen, a cycle made in
the task is collected]``. Uses ``conf_env``'s config."""

import gc
import weakref

import hydra
from omegaconf import DictConfig


class Node:
    """An object of a reference cycle."""


@hydra.main(version_base="1.3", config_path="conf_env", config_name="config")
def main(cfg: DictConfig) -> list:
    on, frozen = gc.isenabled(), gc.get_freeze_count() > 0
    cycle = Node()
    cycle.self = cycle
    alive = weakref.ref(cycle)
    del cycle
    gc.collect()
    return [on, frozen, alive() is None]


if __name__ == "__main__":
    main()
