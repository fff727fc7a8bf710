"""Test app for staging in chunks (``SEML_HYDRA_STAGE_CHUNK``): its config resolves
``${probe:...}`` for every point, in the launcher, while the point is composed.

python tests/apps/chunks_app.py -m hydra/launcher=seml_local x=0,1,2,3 block_at=2 gate=/tmp/g

- composing the point with ``x == block_at`` writes ``<gate>.reached`` and waits (at most
  300 s) until the file ``gate`` exists: the launcher is held between two chunks;
- composing the point with ``x == raise_at`` raises (a bad point, found in its chunk);
- the task fails for ``x == fail_at`` and returns ``x * 10`` otherwise.
"""

import os
import time

import hydra
from omegaconf import DictConfig, OmegaConf


def probe(x: int, block_at: int, raise_at: int, gate: str) -> int:
    if x == raise_at:
        raise ValueError(f"point x={x} cannot be composed")
    if x == block_at and gate:
        with open(f"{gate}.reached", "w"):
            pass
        deadline = time.monotonic() + 300
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.1)
    return x


OmegaConf.register_new_resolver("probe", probe, replace=True)


@hydra.main(version_base="1.3", config_path="conf_chunks", config_name="config")
def main(cfg: DictConfig) -> int:
    if cfg.x == cfg.fail_at:
        raise RuntimeError(f"x={cfg.x} fails")
    print(f"x={cfg.x} probe={cfg.probe}")
    return cfg.x * 10


if __name__ == "__main__":
    main()
