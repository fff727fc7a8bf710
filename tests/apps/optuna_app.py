"""An Optuna objective: ``(x - 0.3)^2`` plus 1 when ``kind=b``; a float, or a ``numpy.float64``
with ``as_numpy=true`` (what numpy-based objectives return).

python tests/apps/optuna_app.py -m hydra/sweeper=optuna hydra/launcher=seml_local \
    'hydra.sweeper.params.x=interval(-1,1)'
"""

import hydra
import numpy
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf_optuna", config_name="config")
def main(cfg: DictConfig) -> float:
    value = (float(cfg.x) - 0.3) ** 2 + (1.0 if cfg.kind == "b" else 0.0)
    return numpy.float64(value) if cfg.as_numpy else value


if __name__ == "__main__":
    main()
