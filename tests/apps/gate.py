"""Test app that waits for a gate file before it returns (keeps an experiment RUNNING).

python tests/apps/gate.py -m hydra/launcher=seml gate=/tmp/go x=1,2 [+marker=/tmp/starts]

With ``+marker=FILE`` every start of the task appends a line (pid, host, x) to FILE; with
``+fail_below=N`` the points with ``x < N`` raise (the first points of a sweep crash): at
once, or with ``+fail_gate=FILE`` once FILE exists.
"""

import os
import socket
import time

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf_gate", config_name="config")
def main(cfg: DictConfig) -> int:
    if cfg.get("marker"):
        with open(cfg.marker, "a") as starts:
            starts.write(f"{os.getpid()} {socket.gethostname()} {cfg.x}\n")
    deadline = time.monotonic() + cfg.max_wait_s
    if cfg.get("fail_below") is not None and cfg.x < cfg.fail_below:
        while cfg.get("fail_gate") and not os.path.exists(cfg.fail_gate):
            if time.monotonic() > deadline:
                return -1  # the test gave up: end without a failure
            time.sleep(0.2)
        raise ValueError(f"x == {cfg.x} < fail_below")
    while cfg.gate and not os.path.exists(cfg.gate) and time.monotonic() < deadline:
        time.sleep(0.2)
    print(f"gate open, x={cfg.x}")
    return cfg.x * 10


if __name__ == "__main__":
    main()
