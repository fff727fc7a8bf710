"""What ``launch.compose`` hands on: a composed, resolved sweep point (:class:`SweepPoint`) and,
for a point of the fast path, where its ``hydra`` node was copied from (:class:`PatchOrigin`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, eq=False)
class PatchOrigin:
    """Where a fast point's ``hydra`` node comes from: ``base`` (its combination's resolved
    ``hydra`` node) copied along ``paths`` only (keys below ``hydra``), with new values set
    there; everything else is ``base``'s own objects. Two nodes of one ``base`` differ only
    along the union of their paths (``core.documents.diff_along``). Compared by identity:
    the points of one plan share one."""

    base: dict[str, Any]
    paths: frozenset[tuple[Any, ...]]

    def with_paths(self, paths: Sequence[tuple[Any, ...]]) -> PatchOrigin:
        """This origin with ``paths`` copied too (a node changed after composition, e.g. a
        masked password)."""
        return PatchOrigin(self.base, self.paths.union(paths))


@dataclass
class SweepPoint:
    """One composed, resolved sweep point.

    Attributes:
        index: position in the launch's ``job_overrides`` (JobReturns come back in this order).
        job_num: ``hydra.job.num`` (``initial_job_idx + index``).
        overrides: the point's task overrides as given by the sweeper.
        config: the resolved app config, plain containers, without the ``hydra`` key.
        hydra: the resolved ``hydra`` node, plain containers.
        origin: for a point of the fast path, how ``hydra`` was made from its combination's
            node (:class:`PatchOrigin`: the diff against the batch's base node need only read
            those paths); ``None`` for a full composition.

    Points of one launch share the sub-dicts that do not differ between them (the fast path
    copies only what changes): read them, never modify them in place.
    """

    index: int
    job_num: int
    overrides: list[str]
    config: dict[str, Any]
    hydra: dict[str, Any]
    origin: PatchOrigin | None = None

    @property
    def launcher(self) -> dict[str, Any]:
        """The point's own ``hydra.launcher`` node (resources may differ per point)."""
        launcher: dict[str, Any] = self.hydra["launcher"]
        return launcher
