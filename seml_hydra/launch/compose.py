"""Compose sweep points: Hydra overrides -> one resolved config per point, and back to a
``DictConfig`` on the node.

All composition goes through :func:`compose_points`. Each point's config is resolved ONCE here, in
the launcher, with ``hydra.job.num`` and ``hydra.runtime.output_dir`` already set, so every rank of
every job sees the same values.

Fast path (large sweeps; ``seml_hydra.launch.compose_fast``). The points are grouped by their
config-group overrides; every combination of two or more points is composed ONCE by Hydra's
``load_sweep_config`` (with the group overrides only), and each point then gets its plain value
overrides on that composed config; only what can differ between the points is resolved again.
Points share the sub-dicts that do not differ: treat ``SweepPoint.config``/``hydra`` as read-only.

A point takes the full path (Hydra's ``load_sweep_config``, exactly as before) when any override is
not a plain ``key=value`` of an existing leaf: ``~key``, ``+key``, ``++key``, ``key@pkg``,
``hydra.*`` keys, dict or list values, keys below an interpolation or a list; when its group
combination has a single point; or when anything in the fast path raises (so a bad value, e.g. the
wrong type for a structured config field, gives Hydra's own error). The first point of every
combination is also composed in full and compared with its fast result: on any difference the whole
combination takes the full path.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from seml_hydra.core.documents import same
from seml_hydra.core.errors import UserError
from seml_hydra.core.overrides import parse_override
from seml_hydra.launch.compose_fast import (
    JOB_ID_INTERPOLATION,
    Combination,
    PatchOrigin,
    Split,
    mark_job_id,
    token_path,
)
from seml_hydra.launch.containers import to_dict, to_list

log = logging.getLogger(__name__)

#: counts of the last :func:`compose_points` call (tests and benchmarks read them): ``points``,
#: ``fast`` (composed by the fast path), ``combinations`` (group combinations composed by Hydra)
last_stats: dict[str, int] = {}


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
            node (``compose_fast.PatchOrigin``: the diff against the batch's base node need
            only read those paths); ``None`` for a full composition.

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
        return self.hydra["launcher"]


def _warm_resolver_cache(master_config: Any) -> None:
    """Resolve the master config once so cached resolvers (``now``) are fixed before the points
    copy the cache (Hydra's ``load_sweep_config`` calls ``OmegaConf.copy_cache``)."""
    from omegaconf import OmegaConf

    try:
        OmegaConf.to_container(master_config, resolve=True, throw_on_missing=False)
    except Exception:  # a value that only resolves per point: those points resolve it themselves
        pass


def compose_points(
    config_loader: Any,
    master_config: Any,
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
) -> list[SweepPoint]:
    """Compose and resolve every sweep point (the fast path is described in the module doc):
    :func:`iter_point_chunks` as one list.

    Args:
        config_loader: ``hydra_context.config_loader``.
        master_config: the launcher's config (``Launcher.setup(config=...)``).
        job_overrides: one override list per point, as the sweeper passes them to ``launch``.
        initial_job_idx: the batch's first ``hydra.job.num``.

    Returns the points in input order.

    Raises Hydra's own errors (``ConfigCompositionException``, ``InterpolationResolutionError``...)
    for a point that does not compose or resolve; nothing has been staged at that time.
    """
    return [
        point
        for chunk in iter_point_chunks(
            config_loader, master_config, job_overrides, initial_job_idx, max(1, len(job_overrides))
        )
        for point in chunk
    ]


def iter_point_chunks(
    config_loader: Any,
    master_config: Any,
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
    size: int,
) -> Generator[list[SweepPoint], None, None]:
    """The composed points of :func:`compose_points`, ``size`` at a time, composed lazily: a
    chunk is composed when it is asked for, so only the chunks the caller keeps are held
    (``launch.pipeline`` stages each one before it asks for the next).

    Between two chunks Hydra's ``HydraConfig`` holds the launcher's config again (a payload
    pickled meanwhile carries it, as after :func:`compose_points`); OmegaConf's parse cache
    (:func:`_cached_interpolation_parse`) stays on until the generator ends or is closed.
    Raises what :func:`compose_points` raises, from the chunk of the bad point.
    """
    from hydra.core.hydra_config import HydraConfig

    _warm_resolver_cache(master_config)
    previous = HydraConfig.instance().cfg
    try:
        with _cached_interpolation_parse():
            composer = _Composer(config_loader, master_config)
            for chunk in composer.compose(job_overrides, initial_job_idx, size):
                HydraConfig.instance().cfg = previous
                yield chunk
    finally:
        HydraConfig.instance().cfg = previous


@contextlib.contextmanager
def _cached_interpolation_parse() -> Iterator[None]:
    """OmegaConf parses an interpolation string with its ANTLR grammar every time it resolves
    it (~1 ms); the points of a sweep resolve the same few strings thousands of times. Within
    this block ``omegaconf.base.parse`` remembers the parse trees (read-only for the visitor)."""
    import omegaconf.base

    original = omegaconf.base.parse
    cache: dict[str, Any] = {}

    def parse(value: str, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs or not isinstance(value, str):
            return original(value, *args, **kwargs)
        tree = cache.get(value)
        if tree is None:
            tree = cache[value] = original(value)
        return tree

    omegaconf.base.parse = parse
    try:
        yield
    finally:
        omegaconf.base.parse = original


def compose_full(
    config_loader: Any, master_config: Any, overrides: Sequence[str], job_num: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One point by Hydra's full composition: ``(app config, hydra node)``, resolved."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict, read_write
    from omegaconf.errors import InterpolationToMissingValueError

    cfg = config_loader.load_sweep_config(master_config, list(overrides))
    with open_dict(cfg):
        cfg.hydra.job.num = job_num
    HydraConfig.instance().set_config(cfg)
    text = to_dict(cfg.hydra.sweep, resolve=False).get("dir")
    if isinstance(text, str) and JOB_ID_INTERPOLATION.search(text):
        raise JobIdError(job_id_message("hydra.sweep.dir", text))
    marked = mark_job_id(cfg)  # ${hydra.job.id} in the subdir: the job puts its id there
    try:
        sweep_dir = str(OmegaConf.select(cfg, "hydra.sweep.dir"))
        subdir = str(OmegaConf.select(cfg, "hydra.sweep.subdir"))
        with read_write(cfg.hydra.runtime), open_dict(cfg.hydra.runtime):
            cfg.hydra.runtime.output_dir = os.path.abspath(os.path.join(sweep_dir, subdir))
        HydraConfig.instance().set_config(cfg)
        container = to_dict(cfg, resolve=True, throw_on_missing=False, enum_to_str=True)
    except InterpolationToMissingValueError as error:
        if "hydra.job.id" not in str(error):
            raise
        raise JobIdError(job_id_message(str(error.full_key))) from None
    if marked:  # only the Hydra node may hold the job id's token: the config is stored as is
        found = token_path({k: v for k, v in container.items() if k != "hydra"})
        if found is not None:
            raise JobIdError(job_id_message(".".join(found)))
    assert isinstance(container, dict)
    hydra_node = container.pop("hydra")
    # jobs run from elsewhere (the code snapshot): output paths must not be relative
    hydra_node["sweep"]["dir"] = os.path.abspath(str(hydra_node["sweep"]["dir"]))
    return container, hydra_node


class JobIdError(UserError):
    """A config that needs ``${hydra.job.id}`` at staging (:func:`job_id_message`)."""


def job_id_message(key: str, text: str | None = None) -> str:
    """The refusal of ``${hydra.job.id}`` in ``key`` (unresolved ``text`` when known; pure):
    the launcher resolves every point's config at staging, before Slurm gives the job its id
    (hydra-submitit-launcher resolves it in the job). Only ``hydra.sweep.subdir`` gets the id
    in the job (``compose_fast.mark_job_id``)."""
    return (
        f"{key if text is None else f'{key}={text}'} uses ${{hydra.job.id}}, the Slurm job "
        "id, which does not exist yet when seml-hydra resolves the config (at staging); only "
        "hydra.sweep.subdir gets it in the job (e.g. hydra.sweep.subdir=${hydra.job.num}_"
        "${hydra.job.id}). Elsewhere use ${hydra.job.num} instead (unique within the sweep); "
        "the job's Slurm id is recorded in its document (hydra.job_id). Nothing was staged."
    )


_SCALARS = (str, int, float, bool, type(None))
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$")


class _Composer:
    """Composes the points of one launch (see the module doc)."""

    def __init__(self, config_loader: Any, master_config: Any) -> None:
        self.config_loader = config_loader
        self.master = master_config
        self.repo: Any = None
        self.group_exists: dict[str, bool] = {}
        #: override string -> its :meth:`_classify` (a grid has few distinct strings)
        self._kinds: dict[str, tuple[str, Any, Any]] = {}
        try:
            hydra_overrides = to_list(master_config.hydra.overrides.hydra)
            _, self.repo = config_loader._parse_overrides_and_create_caching_repo(
                master_config.hydra.job.config_name, hydra_overrides
            )
        except Exception as error:  # another Hydra version: compose everything in full
            log.debug("fast composition disabled: %s", error)

    def _is_group(self, key: str) -> bool:
        known = self.group_exists.get(key)
        if known is None:
            known = self.group_exists[key] = bool(self.repo.group_exists(key))
        return known

    def split(self, overrides: Sequence[str]) -> Split:
        """Sort a point's overrides into group overrides (the combination key) and plain values
        (each override string is classified once: :meth:`_classify`)."""
        group, values, task, app = [], [], [], []
        fast = self.repo is not None
        for text in overrides:
            kind = self._kinds.get(text)
            if kind is None:
                kind = self._classify(text)
                if len(self._kinds) < 200_000:
                    self._kinds[text] = kind
            if kind[0] == "unparsable":  # Hydra reports it in the full composition
                return Split(None, [], [], [])
            override = kind[2]
            if not override.is_hydra_override():
                task.append(override.input_line)
                app.append(override)
            if not fast:
                continue
            if kind[0] == "group":
                group.append(text)
            elif kind[0] == "value":
                values.append((kind[1], override))
            else:
                fast = False
        return Split(tuple(group) if fast else None, values, task, app)

    def _classify(self, text: str) -> tuple[str, Any, Any]:
        """``(kind, value path, parsed override)`` of one override string for :meth:`split`:
        ``group`` (a config-group choice), ``value`` (a plain ``key=scalar`` of the fast path),
        ``slow`` (anything else: full composition), ``unparsable``."""
        try:
            override = parse_override(text)
        except Exception:
            return ("unparsable", None, None)
        if self.repo is None:
            return ("slow", None, override)
        key = override.key_or_group
        if override.is_sweep_override() or "$" in text:
            # an interpolation in an override string is resolved in hydra.overrides.task too
            return ("slow", None, override)
        if self._is_group(key) and not isinstance(override.value(), dict):
            return ("group", None, override)
        if (
            override.package is None
            and not (override.is_delete() or override.is_add() or override.is_force_add())
            and not (key == "hydra" or override.is_hydra_override())
            and isinstance(override.value(), _SCALARS)
            and _PLAIN_KEY.match(key)
        ):
            return ("value", tuple(key.split(".")), override)
        return ("slow", None, override)

    def compose(
        self, job_overrides: Sequence[Sequence[str]], initial: int, size: int
    ) -> Iterator[list[SweepPoint]]:
        """The points, ``size`` at a time (see :func:`iter_point_chunks`). The combinations'
        sizes are counted first (one :meth:`split` per point, its group key kept), then every
        chunk is split again and composed."""
        sizes: dict[tuple[str, ...], int] = {}
        for overrides in job_overrides:
            key = self.split(overrides).group_key
            if key is not None:
                sizes[key] = sizes.get(key, 0) + 1
        combinations: dict[tuple[str, ...], Combination | None] = {}
        verified: set[tuple[str, ...]] = set()
        fast_count = count = 0
        last_stats.clear()
        last_stats.update(points=0, fast=0, combinations=0)
        for start in range(0, len(job_overrides), size):
            points = []
            for index in range(start, min(start + size, len(job_overrides))):
                overrides = job_overrides[index]
                s = self.split(overrides)
                job_num = initial + index
                result: tuple[dict[str, Any], dict[str, Any]] | None = None
                origin: PatchOrigin | None = None
                if s.group_key is not None and sizes[s.group_key] > 1:
                    if s.group_key not in combinations:
                        combinations[s.group_key] = self._combination(s.group_key, job_num)
                    combination = combinations[s.group_key]
                    if combination is not None:
                        try:
                            config, hydra_node, origin = combination.point(job_num, s)
                            result = (config, hydra_node)
                        except Exception as error:  # Hydra gives the error (or result) below
                            log.debug("point %d: full composition (%s)", index, error)
                    if result is not None and s.group_key not in verified:
                        # the first fast point of a combination is checked against Hydra's own
                        verified.add(s.group_key)
                        full = compose_full(self.config_loader, self.master, overrides, job_num)
                        if not (same(full[0], result[0]) and same(full[1], result[1])):
                            log.warning(
                                "fast composition differs from Hydra's for %s: composing this "
                                "combination in full",
                                list(overrides),
                            )
                            combinations[s.group_key] = None
                            result, origin = full, None
                if result is None:
                    result = compose_full(self.config_loader, self.master, overrides, job_num)
                else:
                    fast_count += 1
                points.append(
                    SweepPoint(index, job_num, list(overrides), result[0], result[1], origin)
                )
            count += len(points)
            last_stats.clear()
            last_stats.update(
                points=count,
                fast=fast_count,
                combinations=sum(c is not None for c in combinations.values()),
            )
            yield points
        log.debug("composed %d points, %d by the fast path", count, fast_count)

    def _combination(self, group_key: tuple[str, ...], job_num: int) -> Combination | None:
        try:
            return Combination(self.config_loader, self.master, group_key, job_num)
        except Exception as error:  # the points' full compositions report it
            log.debug("no fast path for %s: %s", list(group_key), error)
            return None
