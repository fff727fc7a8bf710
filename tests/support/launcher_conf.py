"""``hydra.launcher`` nodes as Hydra passes them, for the pure tests of the sbatch mapping,
the launcher's fields and its dependencies."""

from __future__ import annotations

import pytest


def launcher(**changes) -> dict:
    """A ``hydra.launcher`` node (``SemlLauncherConf`` as a dict) with ``changes`` applied."""
    import dataclasses

    from seml_hydra.config import SemlLauncherConf

    node = dataclasses.asdict(SemlLauncherConf())
    node.update(changes)
    return node


def refusal(**changes) -> str:
    """The message of the ``ValueError`` with which ``launch.sbatch.validate_launcher`` refuses
    :func:`launcher` ``(**changes)``; the test fails when the node is accepted."""
    from seml_hydra.launch.sbatch import validate_launcher

    with pytest.raises(ValueError) as error:
        validate_launcher(launcher(**changes))
    return str(error.value)
