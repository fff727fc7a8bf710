"""A Hydra app with a callback: ``on_job_start``/``on_job_end`` leave a mark file per job in
``mark_dir`` (tests/service/test_callbacks.py)."""

import os
from pathlib import Path

import hydra
from hydra.experimental.callback import Callback


class Marks(Callback):
    """Writes ``start_<x>`` (the job's working dir) and ``end_<x>`` (its return value)."""

    def on_job_start(self, config, **kwargs):
        Path(config.mark_dir, f"start_{config.x}").write_text(os.getcwd())

    def on_job_end(self, config, job_return, **kwargs):
        Path(config.mark_dir, f"end_{config.x}").write_text(repr(job_return.return_value))


@hydra.main(version_base=None, config_path="conf_callbacks", config_name="config")
def main(cfg):
    return cfg.x * 2


if __name__ == "__main__":
    main()
