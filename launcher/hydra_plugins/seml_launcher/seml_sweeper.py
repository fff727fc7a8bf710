"""``hydra/sweeper=seml``: Hydra's basic sweeper without the second composition of every point.

The basic sweeper composes each point once to validate it (``validate_batch_is_legal``) and the
launcher composes it again: ~50 ms per point each time, 20 minutes of Hydra for 10,000 points.
This sweeper generates the same points in the same order (it is a ``BasicSweeper``) and
validates differently:

- with a seml-hydra launcher (``hydra/launcher=seml`` or ``seml_local``) it does not validate:
  the launcher composes and resolves every point (``seml_hydra.launch.compose.iter_point_chunks``)
  before it stages anything, and a point that does not compose raises Hydra's own error there,
  so nothing is staged or submitted for a sweep with a bad point;
- with any other launcher it validates every point with ``iter_point_chunks`` (one Hydra
  composition per combination of config-group choices where it can), which raises the same
  errors.
"""

from collections.abc import Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

from . import sweeper_config  # noqa: F401  (registers hydra/sweeper=seml)


class SemlSweeper(BasicSweeper):
    """A ``BasicSweeper`` whose batch validation does not compose every point in full."""

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        from seml_hydra.launch.launcher import SemlLauncher

        if isinstance(self.launcher, SemlLauncher):
            return  # the launcher composes, validates and raises before staging anything
        from seml_hydra.launch.compose import iter_point_chunks

        assert self.hydra_context is not None and self.config is not None
        chunks = iter_point_chunks(self.hydra_context.config_loader, self.config, batch, 0, 1000)
        for _ in chunks:  # each chunk is dropped once composed: only the errors matter
            pass
