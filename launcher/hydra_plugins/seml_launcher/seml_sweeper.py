"""``hydra/sweeper=seml``: Hydra's basic sweeper without the second composition of every point
(``seml_hydra.launch.sweeper.LauncherValidates``: the same points in the same order, validated
by the seml-hydra launcher, or through the fast composition with any other launcher).

With ``hydra/launcher=seml`` or ``seml_local`` Hydra's default basic sweeper gets the same by
itself (the launcher adopts it at setup); naming this sweeper matters with other launchers.
"""

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

from seml_hydra.launch.sweeper import LauncherValidates

from . import sweeper_config  # noqa: F401  (registers hydra/sweeper=seml)


class SemlSweeper(LauncherValidates, BasicSweeper):
    """``hydra/sweeper=seml`` (see ``seml_hydra.launch.sweeper.LauncherValidates``)."""
