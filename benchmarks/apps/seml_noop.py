"""The same no-op task as a SEML 0.5.7 experiment (``seml <collection> add`` resolves its config
through Sacred)."""

from seml import Experiment

ex = Experiment()


@ex.config
def config():
    x = 0  # noqa: F841
    y = 0  # noqa: F841
    lr = 0.1  # noqa: F841
    name = "bench"  # noqa: F841
    data = {"n": 100, "noise": 0.1}  # noqa: F841


@ex.automain
def run(x: int, y: int, lr: float, name: str, data: dict) -> int:
    return x + y
