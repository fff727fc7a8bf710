"""Runs a Hydra app's command line in this process and writes, as JSON to ``argv[1]``, what its
sweeper saw: its class, each batch's ``JobReturn``s (overrides, status, return value, job
number, task config) and how many points Hydra composed in full
(``ConfigLoaderImpl.load_sweep_config`` calls).

    python sweep_returns.py out.json app.py -m x=1,2 ...
"""

import json
import runpy
import sys

from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.plugins import Plugins
from omegaconf import OmegaConf

Plugins.instance()  # its plugin scan executes the core plugins' modules again: patch after it
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper  # noqa: E402

out_path, app = sys.argv[1], sys.argv[2]
sys.argv = [app, *sys.argv[3:]]
record: dict = {"compositions": 0}
load_sweep_config = ConfigLoaderImpl.load_sweep_config
sweep = BasicSweeper.sweep


def counting(self, *args, **kwargs):
    record["compositions"] += 1
    return load_sweep_config(self, *args, **kwargs)


def returned(ret) -> dict:
    return {
        "overrides": list(ret.overrides),
        "status": ret.status.name,
        "return_value": ret.return_value,
        "job_num": ret.hydra_cfg.hydra.job.num,
        "config": OmegaConf.to_container(ret.cfg, resolve=True),
    }


def recording(self, arguments):
    record["sweeper"] = f"{type(self).__module__}.{type(self).__name__}"
    batches = sweep(self, arguments)
    record["batches"] = [[returned(r) for r in batch] for batch in batches]
    with open(out_path, "w") as f:
        json.dump(record, f)
    return batches


ConfigLoaderImpl.load_sweep_config = counting
BasicSweeper.sweep = recording
runpy.run_path(app, run_name="__main__")
