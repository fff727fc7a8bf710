"""Test app for the database outage tests: every run of a point appends one line to
``<marker_dir>/run_<x>`` (so a test counts how often a point ran), then waits for a gate file
like ``gate.py`` and returns ``10 x``.

python tests/apps/outage_app.py -m hydra/launcher=seml gate=/tmp/go marker_dir=/tmp/m x=1,2
"""

import os
import socket
import time

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf_outage", config_name="config")
def main(cfg: DictConfig) -> int:
    if cfg.marker_dir:
        with open(os.path.join(cfg.marker_dir, f"run_{cfg.x}"), "a") as f:
            f.write(f"{socket.gethostname()} {os.getpid()}\n")
    print(f"started, x={cfg.x}", flush=True)
    deadline = time.monotonic() + cfg.max_wait_s
    while cfg.gate and not os.path.exists(cfg.gate) and time.monotonic() < deadline:
        time.sleep(0.2)
    print(f"gate open, x={cfg.x}")
    return cfg.x * 10


if __name__ == "__main__":
    main()
