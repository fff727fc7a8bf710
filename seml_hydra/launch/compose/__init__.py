"""Compose sweep points: Hydra overrides -> one resolved config per point.

The entry is :func:`iter_point_chunks`; it decides, point by point, which of two paths composes
it (its docstring says when). Each point's config is resolved ONCE here, in the launcher, with
``hydra.job.num`` and ``hydra.runtime.output_dir`` already set, so every rank of every job sees
the same values. The modules below call nothing above them:

- ``split``: a point's overrides sorted into group choices, plain values, or "full path";
- ``fast``: the fast path (a combination of group choices composed once, each point's plain
  values applied to it), with ``interpolations`` (what a swept value can change) and ``patches``
  (copies sharing unchanged sub-dicts);
- ``full``: Hydra's full composition (``load_sweep_config``) of one point;
- ``job_id`` (``${hydra.job.id}`` at staging), ``point`` (:class:`SweepPoint`, ``PatchOrigin``)
  and ``parse_cache`` (OmegaConf's parse trees kept while a chunk is composed), shared.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Sequence
from typing import Any

from seml_hydra.core.documents import same
from seml_hydra.launch.compose.fast import Combination
from seml_hydra.launch.compose.full import compose_full
from seml_hydra.launch.compose.job_id import JobIdError
from seml_hydra.launch.compose.parse_cache import cached_interpolation_parse
from seml_hydra.launch.compose.point import PatchOrigin, SweepPoint
from seml_hydra.launch.compose.split import Split, Splitter

__all__ = ["JobIdError", "SweepPoint", "iter_point_chunks", "last_stats"]

log = logging.getLogger(__name__)

#: counts of the last :func:`iter_point_chunks` call, up to its last chunk (tests and benchmarks
#: read them): ``points``, ``fast`` (composed by the fast path), ``combinations`` (group
#: combinations composed once by Hydra for the fast path)
last_stats: dict[str, int] = {}


def iter_point_chunks(
    config_loader: Any,
    master_config: Any,
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
    size: int,
) -> Generator[list[SweepPoint], None, None]:
    """Compose and resolve every sweep point, ``size`` points at a time, lazily: a chunk is
    composed when it is asked for, so only the chunks the caller keeps are held
    (``launch.pipeline`` stages each one before it asks for the next).

    Which path a point takes (:meth:`_Paths.point`):

    - the fast path (``fast.Combination``) when every override is a config-group choice or a
      plain ``key=scalar`` of an existing leaf (``split.Splitter``: no ``~key``, ``+key``,
      ``++key``, ``key@pkg``, ``hydra.*`` key, dict or list value, ``${...}``), its combination
      of group choices has two or more points in ``job_overrides`` and composes, and applying
      its values raises nothing (``fast.NotFast`` for keys below an interpolation or a list,
      nested interpolations...). The first fast point of every combination is also composed
      in full and compared: on any difference that combination takes the full path from then.
    - Hydra's full composition (``full.compose_full``) otherwise, so a bad point raises
      Hydra's own error.

    Args:
        config_loader: ``hydra_context.config_loader``.
        master_config: the launcher's config (``Launcher.setup(config=...)``).
        job_overrides: one override list per point, as the sweeper passes them to ``launch``.
        initial_job_idx: the batch's first ``hydra.job.num``.
        size: points per chunk (>= 1; the last chunk may be shorter).

    Yields lists of :class:`SweepPoint`, in input order. Points of one launch share the
    sub-dicts that do not differ between them: read them, never modify them.

    Raises Hydra's own errors (``ConfigCompositionException``,
    ``InterpolationResolutionError``...) or :class:`JobIdError` from the chunk of the first
    point that does not compose or resolve. OmegaConf's parse cache is on only while a chunk is
    composed (``parse_cache``); between two chunks, and after the last, Hydra's
    ``HydraConfig`` holds the launcher's config again and ``omegaconf`` is as it was.
    """
    from hydra.core.hydra_config import HydraConfig

    _warm_resolver_cache(master_config)
    previous = HydraConfig.instance().cfg
    last_stats.clear()
    last_stats.update(points=0, fast=0, combinations=0)
    parsed: dict[str, Any] = {}  # interpolation parse trees, kept across the chunks
    try:
        paths = _Paths(config_loader, master_config, job_overrides)
        for start in range(0, len(job_overrides), size):
            stop = min(start + size, len(job_overrides))
            with cached_interpolation_parse(parsed):
                chunk = [
                    paths.point(index, initial_job_idx + index, job_overrides[index])
                    for index in range(start, stop)
                ]
            HydraConfig.instance().cfg = previous
            last_stats.update(paths.stats(stop))
            yield chunk
        log.debug("composed %d points, %d by the fast path", len(job_overrides), paths.fast)
    finally:
        HydraConfig.instance().cfg = previous


class _Paths:
    """The path decision for the points of one launch, and what it remembers between them: the
    size of every combination, its composition (``None``: full path), and which were checked."""

    def __init__(
        self, config_loader: Any, master_config: Any, job_overrides: Sequence[Sequence[str]]
    ) -> None:
        self.config_loader = config_loader
        self.master = master_config
        self.splitter = Splitter(config_loader, master_config)
        self.sizes: dict[tuple[str, ...], int] = {}
        for overrides in job_overrides:
            key = self.splitter.split(overrides).group_key
            if key is not None:
                self.sizes[key] = self.sizes.get(key, 0) + 1
        self.combinations: dict[tuple[str, ...], Combination | None] = {}
        self.verified: set[tuple[str, ...]] = set()
        self.fast = 0

    def point(self, index: int, job_num: int, overrides: Sequence[str]) -> SweepPoint:
        """One point by the path :func:`iter_point_chunks` describes."""
        split = self.splitter.split(overrides)
        fast = self._fast(split, job_num, index)
        if fast is not None and split.group_key not in self.verified:
            # the first fast point of a combination is checked against Hydra's own
            assert split.group_key is not None
            self.verified.add(split.group_key)
            full = compose_full(self.config_loader, self.master, overrides, job_num)
            if not (same(full[0], fast[0]) and same(full[1], fast[1])):
                log.warning(
                    "fast composition differs from Hydra's for %s: composing this combination "
                    "in full",
                    list(overrides),
                )
                self.combinations[split.group_key] = None
                return SweepPoint(index, job_num, list(overrides), *full)
        if fast is None:
            full = compose_full(self.config_loader, self.master, overrides, job_num)
            return SweepPoint(index, job_num, list(overrides), *full)
        self.fast += 1
        return SweepPoint(index, job_num, list(overrides), *fast)

    def _fast(
        self, split: Split, job_num: int, index: int
    ) -> tuple[dict[str, Any], dict[str, Any], PatchOrigin] | None:
        """The point by the fast path, or ``None`` when it does not take it (the full
        composition then reports any error)."""
        key = split.group_key
        if key is None or self.sizes[key] < 2:
            return None
        if key not in self.combinations:
            try:
                self.combinations[key] = Combination(self.config_loader, self.master, key, job_num)
            except Exception as error:  # the points' full compositions report it
                log.debug("no fast path for %s: %s", list(key), error)
                self.combinations[key] = None
        combination = self.combinations[key]
        if combination is None:
            return None
        try:
            return combination.point(job_num, split)
        except Exception as error:  # Hydra gives the error (or the result) in full
            log.debug("point %d: full composition (%s)", index, error)
            return None

    def stats(self, points: int) -> dict[str, int]:
        """``last_stats`` after ``points`` points."""
        combinations = sum(c is not None for c in self.combinations.values())
        return {"points": points, "fast": self.fast, "combinations": combinations}


def _warm_resolver_cache(master_config: Any) -> None:
    """Resolve the master config once so cached resolvers (``now``) are fixed before the points
    copy the cache (Hydra's ``load_sweep_config`` calls ``OmegaConf.copy_cache``)."""
    from omegaconf import OmegaConf

    try:
        OmegaConf.to_container(master_config, resolve=True, throw_on_missing=False)
    except Exception:  # a value that only resolves per point: those points resolve it themselves
        pass
