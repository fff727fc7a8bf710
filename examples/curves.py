"""A training loop with known learning curves, stopped early by the launch's pruner.

Curve ``config`` of family ``family`` is ``loss(s) = final + gap * s**-rate`` at step
``s = 1..steps`` (its parameters drawn from a random generator seeded by family and index,
:func:`curve`); every step is reported through ``seml_hydra.report``, which says when to stop.

    python examples/curves.py -m hydra/launcher=seml hydra.launcher.array_parallelism=4 \\
        'hydra.launcher.pruner={rule: asha, metric: loss, max_step: 27}' 'config=range(27)'

``benchmarks/pruning.py`` runs it for the early-stopping benchmark.
"""

import random
import time

import hydra
from omegaconf import DictConfig

import seml_hydra


def curve(config: int, family: int = 0) -> tuple[float, float, float]:
    """``(final, gap, rate)`` of curve ``config`` of ``family``: the loss tends to ``final``
    (uniform in 0.1..1.0) from ``final + gap`` at step 1 (gap uniform in 0.2..1.5) with a power
    ``rate`` (uniform in 0.3..1.2): curves cross, the best at step 1 is not always the best at
    the end."""
    rng = random.Random(f"curves:{family}:{config}")
    return rng.uniform(0.1, 1.0), rng.uniform(0.2, 1.5), rng.uniform(0.3, 1.2)


def loss(config: int, step: int, family: int = 0) -> float:
    """The loss of curve ``config`` of ``family`` at ``step`` (1, 2, ...)."""
    final, gap, rate = curve(config, family)
    return final + gap * step**-rate


@hydra.main(version_base="1.3", config_path="conf_curves", config_name="config")
def main(cfg: DictConfig) -> float:
    value = float("nan")
    for step in range(1, cfg.steps + 1):
        time.sleep(cfg.step_s)
        value = loss(cfg.config, step, cfg.family)
        if seml_hydra.report("loss", value, step):
            break  # stopped early: the experiment ends COMPLETED with `pruned`
    return value


if __name__ == "__main__":
    main()
