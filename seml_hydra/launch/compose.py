"""Compose sweep points: Hydra overrides -> one resolved config per point, and back to a
``DictConfig`` on the node.

All composition goes through :func:`compose_points`. Each point's config is resolved ONCE here, in
the launcher, with ``hydra.job.num`` and ``hydra.runtime.output_dir`` already set, so every rank of
every job sees the same values.

Fast path (large sweeps). Hydra composes a point in two steps: the defaults list (config groups,
YAML loading: ~50 ms) and then the plain value overrides, applied with OmegaConf. The second step
is all that differs between the points of one combination of config-group choices. So the points
are grouped by their group overrides; for every group of two or more points the config is composed
ONCE by Hydra's ``load_sweep_config`` (with the group overrides only), and each point then gets its
value overrides through Hydra's own ``ConfigLoaderImpl._apply_overrides_to_config`` on that
composed, still unresolved config. Only what can differ is resolved again per point: the
overridden leaves and every interpolation that (transitively) references an overridden key,
``hydra.job.num``, ``hydra.runtime.output_dir``, ``hydra.overrides.task`` or
``hydra.job.override_dirname`` (an interpolation the dependency scan does not understand, e.g. a
custom resolver, is always re-resolved). Everything else is shared with the combination's resolved
base: points share unchanged sub-dicts, so treat ``SweepPoint.config``/``hydra`` as read-only.

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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

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

    Points of one launch share the sub-dicts that do not differ between them (the fast path
    copies only what changes): read them, never modify them in place.
    """

    index: int
    job_num: int
    overrides: list[str]
    config: dict[str, Any]
    hydra: dict[str, Any]

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


_PARSER: list[Any] = []
_PARSED: dict[str, Any] = {}


def parse_override(text: str) -> Any:
    """Hydra's parse of one override string (``hydra.core.override_parser.types.Override``),
    cached by string: a 10,000-point grid has only a few dozen distinct override strings, and
    Hydra's ANTLR parser costs ~0.1 ms each time. Treat the result as read-only. Raises
    ``OverrideParseException`` like Hydra."""
    parsed = _PARSED.get(text)
    if parsed is None:
        if not _PARSER:
            from hydra.core.override_parser.overrides_parser import OverridesParser

            _PARSER.append(OverridesParser.create())
        parsed = _PARSER[0].parse_overrides([text])[0]
        if len(_PARSED) < 200_000:
            _PARSED[text] = parsed
    return parsed


def compose_points(
    config_loader: Any,
    master_config: Any,
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
) -> list[SweepPoint]:
    """Compose and resolve every sweep point (the fast path is described in the module doc).

    Args:
        config_loader: ``hydra_context.config_loader``.
        master_config: the launcher's config (``Launcher.setup(config=...)``).
        job_overrides: one override list per point, as the sweeper passes them to ``launch``.
        initial_job_idx: the batch's first ``hydra.job.num``.

    Returns the points in input order.

    Raises Hydra's own errors (``ConfigCompositionException``, ``InterpolationResolutionError``...)
    for a point that does not compose or resolve; nothing has been staged at that time.
    """
    from hydra.core.hydra_config import HydraConfig

    _warm_resolver_cache(master_config)
    previous = HydraConfig.instance().cfg
    try:
        with _cached_interpolation_parse():
            composer = _Composer(config_loader, master_config)
            return composer.compose(job_overrides, initial_job_idx)
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

    cfg = config_loader.load_sweep_config(master_config, list(overrides))
    with open_dict(cfg):
        cfg.hydra.job.num = job_num
    HydraConfig.instance().set_config(cfg)
    sweep_dir = str(OmegaConf.select(cfg, "hydra.sweep.dir"))
    subdir = str(OmegaConf.select(cfg, "hydra.sweep.subdir"))
    with read_write(cfg.hydra.runtime), open_dict(cfg.hydra.runtime):
        cfg.hydra.runtime.output_dir = os.path.abspath(os.path.join(sweep_dir, subdir))
    HydraConfig.instance().set_config(cfg)
    container = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False, enum_to_str=True)
    assert isinstance(container, dict)
    hydra_node = container.pop("hydra")
    # jobs run from elsewhere (the code snapshot): output paths must not be relative
    hydra_node["sweep"]["dir"] = os.path.abspath(str(hydra_node["sweep"]["dir"]))
    return container, hydra_node


class _NotFast(Exception):
    """This point (or combination) cannot take the fast path."""


_SCALARS = (str, int, float, bool, type(None))
JOB_NUM = ("hydra", "job", "num")
OUTPUT_DIR = ("hydra", "runtime", "output_dir")
TASK = ("hydra", "overrides", "task")
DIRNAME = ("hydra", "job", "override_dirname")
DIRNAME_CONF = ("hydra", "job", "config", "override_dirname")
SWEEP_DIR = ("hydra", "sweep", "dir")
SWEEP_SUBDIR = ("hydra", "sweep", "subdir")
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$")
_KEY = re.compile(r"^(\.*)([A-Za-z0-9_\-/]+(?:\.[A-Za-z0-9_\-/]+)*)?$")
#: resolvers whose value does not depend on the config (``now`` is cached from the master config)
_CONSTANT_RESOLVERS = ("now", "oc.env")


@dataclass
class _Split:
    """A point's overrides, sorted for the fast path (``None`` group key: full composition)."""

    group_key: tuple[str, ...] | None
    values: list[tuple[tuple[str, ...], Any]]
    task: list[str]
    app: list[Any]


class _Composer:
    """Composes the points of one launch (see the module doc)."""

    def __init__(self, config_loader: Any, master_config: Any) -> None:
        self.config_loader = config_loader
        self.master = master_config
        self.repo: Any = None
        self.group_exists: dict[str, bool] = {}
        try:
            from omegaconf import OmegaConf

            hydra_overrides = OmegaConf.to_container(master_config.hydra.overrides.hydra)
            _, self.repo = config_loader._parse_overrides_and_create_caching_repo(
                master_config.hydra.job.config_name, list(hydra_overrides)
            )
        except Exception as error:  # another Hydra version: compose everything in full
            log.debug("fast composition disabled: %s", error)

    def _is_group(self, key: str) -> bool:
        known = self.group_exists.get(key)
        if known is None:
            known = self.group_exists[key] = bool(self.repo.group_exists(key))
        return known

    def split(self, overrides: Sequence[str]) -> _Split:
        """Sort a point's overrides into group overrides (the combination key) and plain values."""
        group, values, task, app = [], [], [], []
        fast = self.repo is not None
        for text in overrides:
            try:
                override = parse_override(text)
            except Exception:  # Hydra reports it in the full composition
                return _Split(None, [], [], [])
            if not override.is_hydra_override():
                task.append(override.input_line)
                app.append(override)
            if not fast:
                continue
            key = override.key_or_group
            if override.is_sweep_override() or "$" in text:
                # an interpolation in an override string is resolved in hydra.overrides.task too
                fast = False
            elif self._is_group(key) and not isinstance(override.value(), dict):
                group.append(text)
            elif (
                override.package is None
                and not (override.is_delete() or override.is_add() or override.is_force_add())
                and not (key == "hydra" or override.is_hydra_override())
                and isinstance(override.value(), _SCALARS)
                and _PLAIN_KEY.match(key)
            ):
                values.append((tuple(key.split(".")), override))
            else:
                fast = False
        return _Split(tuple(group) if fast else None, values, task, app)

    def compose(self, job_overrides: Sequence[Sequence[str]], initial: int) -> list[SweepPoint]:
        splits = [self.split(overrides) for overrides in job_overrides]
        sizes: dict[tuple[str, ...], int] = {}
        for s in splits:
            if s.group_key is not None:
                sizes[s.group_key] = sizes.get(s.group_key, 0) + 1
        combinations: dict[tuple[str, ...], _Combination | None] = {}
        verified: set[tuple[str, ...]] = set()
        points = []
        fast_count = 0
        for index, (overrides, s) in enumerate(zip(job_overrides, splits)):
            job_num = initial + index
            result = None
            if s.group_key is not None and sizes[s.group_key] > 1:
                if s.group_key not in combinations:
                    combinations[s.group_key] = self._combination(s.group_key, job_num)
                combination = combinations[s.group_key]
                if combination is not None:
                    try:
                        result = combination.point(job_num, s)
                    except Exception as error:  # Hydra gives the error (or result) below
                        log.debug("point %d: full composition (%s)", index, error)
                if result is not None and s.group_key not in verified:
                    # the first fast point of a combination is checked against Hydra's own
                    verified.add(s.group_key)
                    full = compose_full(self.config_loader, self.master, overrides, job_num)
                    if not (_same(full[0], result[0]) and _same(full[1], result[1])):
                        log.warning(
                            "fast composition differs from Hydra's for %s: composing this "
                            "combination in full",
                            list(overrides),
                        )
                        combinations[s.group_key] = None
                        result = full
            if result is None:
                result = compose_full(self.config_loader, self.master, overrides, job_num)
            else:
                fast_count += 1
            points.append(SweepPoint(index, job_num, list(overrides), result[0], result[1]))
        last_stats.clear()
        last_stats.update(
            points=len(points),
            fast=fast_count,
            combinations=sum(c is not None for c in combinations.values()),
        )
        log.debug("composed %d points, %d by the fast path", len(points), fast_count)
        return points

    def _combination(self, group_key: tuple[str, ...], job_num: int) -> _Combination | None:
        try:
            return _Combination(self, group_key, job_num)
        except Exception as error:  # the points' full compositions report it
            log.debug("no fast path for %s: %s", list(group_key), error)
            return None


class _Combination:
    """One combination of group overrides: Hydra's composed (unresolved) config, its resolved
    container, and the interpolations in it with what they reference."""

    def __init__(self, composer: _Composer, group_key: tuple[str, ...], job_num: int) -> None:
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf

        cfg = composer.config_loader.load_sweep_config(composer.master, list(group_key))
        OmegaConf.set_readonly(cfg.hydra, False)
        self.cfg = cfg
        # HydraConfig's view (``${hydra:...}``): a copy of the hydra node whose root is ``cfg``
        view = OmegaConf.masked_copy(cfg, "hydra")
        OmegaConf.set_readonly(view.hydra, False)
        view.hydra._set_parent(cfg)
        self.view = view
        self.interps: dict[tuple[Any, ...], _Interp] = {}
        _find_interpolations(cfg, (), self.interps)
        self.plans: dict[tuple[tuple[str, ...], ...], _Plan] = {}
        self.located: dict[tuple[str, ...], tuple[Any, str, Any]] = {}
        # the base container: resolved with this job number and its output dir
        HydraConfig.instance().cfg = view
        self._write_inputs(job_num, None, None)
        subdir = str(_resolved(cfg, SWEEP_SUBDIR))
        self.sweep_dir = os.path.abspath(str(_resolved(cfg, SWEEP_DIR)))
        self._write_output_dir(os.path.abspath(os.path.join(self.sweep_dir, subdir)))
        container = OmegaConf.to_container(
            cfg, resolve=True, throw_on_missing=False, enum_to_str=True
        )
        assert isinstance(container, dict)
        container["hydra"]["sweep"]["dir"] = self.sweep_dir
        self.base = container
        conf = container["hydra"]["job"]["config"]["override_dirname"]
        self.dirname_conf = (conf["kv_sep"], conf["item_sep"], list(conf["exclude_keys"]))

    def _write_inputs(self, job_num: int, task: list[str] | None, dirname: str | None) -> None:
        """Set ``hydra.job.num`` (and, when an interpolation needs them, the task overrides and
        ``override_dirname``) in the config and the view."""
        for root in (self.cfg, self.view):
            _leaf(root, JOB_NUM)._set_value(job_num)
            if task is not None:
                root.hydra.overrides._get_node("task")._set_value(task)
            if dirname is not None:
                _leaf(root, DIRNAME)._set_value(dirname)

    def _write_output_dir(self, output_dir: str) -> None:
        for root in (self.cfg, self.view):
            _leaf(root, OUTPUT_DIR)._set_value(output_dir)

    def plan(self, value_paths: tuple[tuple[str, ...], ...]) -> _Plan:
        plan = self.plans.get(value_paths)
        if plan is None:
            plan = self.plans[value_paths] = _Plan.make(self, value_paths)
        return plan

    def point(self, job_num: int, split: _Split) -> tuple[dict[str, Any], dict[str, Any]]:
        """The point's ``(app config, hydra node)``; raises for anything not provably equal
        to Hydra's composition (the caller then composes it in full)."""
        from hydra._internal.config_loader_impl import get_overrides_dirname
        from hydra.core.hydra_config import HydraConfig

        plan = self.plan(tuple(path for path, _ in split.values))
        kv_sep, item_sep, exclude = self.dirname_conf
        dirname = get_overrides_dirname(
            overrides=split.app, kv_sep=kv_sep, item_sep=item_sep, exclude_keys=exclude
        )
        saved: list[tuple[Any, Any, Any, Any]] = []
        HydraConfig.instance().cfg = self.view
        patches: dict[tuple[Any, ...], Any] = {
            JOB_NUM: job_num,
            TASK: list(split.task),
            DIRNAME: dirname,
        }
        try:
            for path, override in split.values:
                located = self.located.get(path)
                if located is None:
                    located = self.located[path] = _locate(self.cfg, path)
                parent, key, node = located
                value = override.value()
                if not plan.omegaconf and _stored_as_is(node, value):
                    # an untyped leaf keeps a primitive unchanged, and nothing OmegaConf
                    # resolves for this point reads it: no need to write it into the config
                    patches[path] = value
                    continue
                saved.append((parent, key, node, node._val))
                # what ``ConfigLoaderImpl._apply_overrides_to_config`` ends in for a plain
                # override of an existing leaf (``OmegaConf.update`` -> ``parent.key = value``),
                # without walking the path again; any error: the full composition reports it
                parent.__setattr__(key, value)
                patches[path] = _resolved(self.cfg, path)
            if plan.omegaconf:
                self._write_inputs(
                    job_num,
                    list(split.task) if plan.needs_task else None,
                    dirname if plan.needs_dirname else None,
                )
            sweep_dir = self.sweep_dir
            if SWEEP_DIR in plan.early:
                sweep_dir = os.path.abspath(str(self._evaluate(SWEEP_DIR, patches)))
                patches[SWEEP_DIR] = sweep_dir
            if SWEEP_SUBDIR in plan.early:
                subdir = patches[SWEEP_SUBDIR] = self._evaluate(SWEEP_SUBDIR, patches)
            else:
                subdir = self.base["hydra"]["sweep"]["subdir"]
            output_dir = patches[OUTPUT_DIR] = os.path.abspath(os.path.join(sweep_dir, str(subdir)))
            if plan.omegaconf:
                self._write_output_dir(output_dir)
            for path in plan.order:
                patches[path] = self._evaluate(path, patches)
        finally:
            for parent, key, node, value in reversed(saved):
                node._val = value
                parent.__dict__["_content"][key] = node
        container = _patched(self.base, patches)
        hydra_node = container.pop("hydra")
        return container, hydra_node

    def _evaluate(self, path: tuple[Any, ...], patches: dict[tuple[Any, ...], Any]) -> Any:
        """An interpolation's value for this point: computed here when it is a plain string
        template over keys (``${a.b}/${hydra:job.num}``), else resolved by OmegaConf."""
        interp = self.interps.get(path)
        if interp is not None and interp.pieces is not None:
            values = []
            for piece in interp.pieces:
                if isinstance(piece, str):
                    values.append(piece)
                    continue
                value = _lookup(self.base, patches, piece)
                if value is _UNKNOWN:
                    break
                values.append(value)
            else:
                if not interp.single:
                    return "".join(str(v) for v in values)
                if not interp.string:
                    return values[0]
                if values[0] is not None:
                    return str(values[0])
        return _resolved(self.cfg, path)


_UNKNOWN = object()


def _lookup(base: dict[str, Any], patches: dict[tuple[Any, ...], Any], ref: tuple[str, ...]) -> Any:
    """The point's resolved primitive value at ``ref`` (``_UNKNOWN`` if not a plain primitive
    reachable through dicts, or missing)."""
    value: Any = _UNKNOWN
    rest: tuple[str, ...] = ()
    for i in range(len(ref), 0, -1):
        if ref[:i] in patches:
            value, rest = patches[ref[:i]], ref[i:]
            break
    if value is _UNKNOWN:
        value, rest = base, ref
    for key in rest:
        if not isinstance(value, dict) or key not in value:
            return _UNKNOWN
        value = value[key]
    if isinstance(value, bool) or value is None or type(value) in (str, int, float):
        return _UNKNOWN if value == "???" else value
    return _UNKNOWN


@dataclass
class _Interp:
    """An interpolation of the composed config: the paths it references (``None``: not
    understood, re-resolved for every point) and, for a plain string template over keys on an
    untyped or string node, its pieces (literal strings and referenced paths)."""

    refs: list[tuple[str, ...]] | None
    pieces: list[Any] | None
    single: bool
    string: bool  # a ``str`` node: the value is converted with ``str()``


@dataclass
class _Plan:
    """What to re-resolve per point for one set of overridden keys."""

    early: set[tuple[Any, ...]]  # hydra.sweep.dir/subdir when they vary (output_dir needs them)
    order: list[tuple[Any, ...]]  # the other varying interpolations, dependencies first
    omegaconf: bool  # some of them are resolved by OmegaConf: write the inputs into the config
    needs_task: bool
    needs_dirname: bool

    @staticmethod
    def make(combination: _Combination, value_paths: tuple[tuple[str, ...], ...]) -> _Plan:
        interps = combination.interps
        varying: list[tuple[Any, ...]] = [JOB_NUM, OUTPUT_DIR, TASK, DIRNAME, *value_paths]
        chosen: list[tuple[Any, ...]] = []
        changed = True
        while changed:
            changed = False
            for path, interp in interps.items():
                if path in chosen:
                    continue
                refs = interp.refs
                if (
                    refs is None
                    or any(_overlap(path, v) for v in value_paths)
                    or any(_overlap(r, v) for r in refs for v in varying)
                ):
                    chosen.append(path)
                    varying.append(path)
                    changed = True
        for path in chosen:
            if _overlap(path, DIRNAME_CONF):
                raise _NotFast("override_dirname's settings depend on swept values")
            if any(_overlap(path, v) and len(v) < len(path) for v in value_paths):
                raise _NotFast("an interpolation below an overridden key")
            if any(_overlap(path, q) and q != path for q in chosen):
                raise _NotFast("nested interpolations")
        early = {p for p in chosen if p in (SWEEP_DIR, SWEEP_SUBDIR)}
        for path in early:
            refs = interps[path].refs
            if refs is None or any(_overlap(r, OUTPUT_DIR) for r in refs):
                raise _NotFast("the sweep dir depends on the output dir")
        if SWEEP_SUBDIR in early and SWEEP_DIR in early:
            raise _NotFast("both sweep dir and subdir vary")
        # dependencies first
        order: list[tuple[Any, ...]] = []
        pending = [p for p in chosen if p not in early and p not in value_paths]
        while pending:
            ready = [
                p
                for p in pending
                if not any(_overlap(r, q) for r in interps[p].refs or () for q in pending if q != p)
            ]
            if not ready:
                raise _NotFast("interpolation cycle")
            order.extend(ready)
            pending = [p for p in pending if p not in ready]
        omegaconf = any(interps[p].pieces is None for p in [*early, *order])

        def needs(target: tuple[str, ...]) -> bool:
            return any(
                interps[p].refs is None or any(_overlap(r, target) for r in interps[p].refs or ())
                for p in chosen
            )

        return _Plan(early, order, omegaconf, needs(TASK), needs(DIRNAME))


def _overlap(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """One path is a prefix of the other (keys compared as strings)."""
    n = min(len(a), len(b))
    return all(str(a[i]) == str(b[i]) for i in range(n))


def _find_interpolations(
    node: Any, path: tuple[Any, ...], out: dict[tuple[Any, ...], _Interp]
) -> None:
    """Record every interpolation below ``node`` (see :class:`_Interp`)."""
    from omegaconf import AnyNode, DictConfig, ListConfig, StringNode

    if isinstance(node, DictConfig):
        keys: Any = node.keys()
    elif isinstance(node, ListConfig):
        keys = range(len(node))
    else:
        return
    for key in keys:
        child = node._get_node(key)
        child_path = (*path, key)
        if child._is_interpolation():
            text = str(child._value())
            refs, pieces = _interpolation_refs(child_path, text)
            if type(child) not in (AnyNode, StringNode) or "\\" in text:
                pieces = None
            single = pieces is not None and len(pieces) == 1 and not isinstance(pieces[0], str)
            out[child_path] = _Interp(refs, pieces, single, type(child) is StringNode)
        elif not (child._is_none() or child._is_missing()):
            _find_interpolations(child, child_path, out)


def _interpolation_refs(
    path: tuple[Any, ...], text: str
) -> tuple[list[tuple[str, ...]] | None, list[Any] | None]:
    """The config paths an interpolation string references (``None`` when unsure: nested
    interpolations, resolvers other than ``now``/``oc.env``/``hydra``, list indices...), and the
    string as pieces (``None`` unless only keys and ``${hydra:key}`` are interpolated)."""
    refs: list[tuple[str, ...]] = []
    pieces: list[Any] | None = []
    position = 0
    start = text.find("${")
    while start != -1:
        end = text.find("}", start)
        if end == -1:
            return None, None
        if pieces is not None and start > position:
            pieces.append(text[position:start])
        inner = text[start + 2 : end].strip()
        if "$" in inner or "{" in inner or "[" in inner:
            return None, None
        ref: tuple[str, ...] | None = None
        if ":" in inner:
            name, _, argument = inner.partition(":")
            name = name.strip()
            if name in _CONSTANT_RESOLVERS:
                pieces = None
            elif name == "hydra":
                match = _KEY.match(argument.strip())
                if not match or match.group(1) or not match.group(2):
                    return None, None
                ref = ("hydra", *match.group(2).split("."))
            else:
                return None, None
        else:
            match = _KEY.match(inner)
            if not match:
                return None, None
            dots, key = match.group(1), match.group(2) or ""
            if not dots:
                if not key:
                    return None, None
                ref = tuple(key.split("."))
            else:
                if len(dots) > len(path):
                    return None, None
                base = tuple(str(k) for k in path[: len(path) - len(dots)])
                ref = (*base, *key.split(".")) if key else base
        if ref is not None:
            refs.append(ref)
            if pieces is not None:
                pieces.append(ref)
        position = end + 1
        start = text.find("${", position)
    if pieces is not None and position < len(text):
        pieces.append(text[position:])
    return refs, pieces


def _leaf(cfg: Any, path: tuple[str, ...]) -> Any:
    node = cfg
    for key in path:
        node = node._get_node(key)
    return node


def _locate(cfg: Any, path: tuple[str, ...]) -> tuple[Any, str, Any]:
    """``(parent, key, value node)`` of an existing leaf reached through plain dicts only."""
    from omegaconf import DictConfig, ValueNode

    parent = cfg
    for key in path[:-1]:
        parent = parent._get_node(key)
        if (
            not isinstance(parent, DictConfig)
            or parent._is_interpolation()
            or parent._is_none()
            or parent._is_missing()
        ):
            raise _NotFast(f"{'.'.join(path)} is not below plain dicts")
    node = parent._get_node(path[-1]) if isinstance(parent, DictConfig) else None
    if not isinstance(node, ValueNode):
        raise _NotFast(f"{'.'.join(path)} is not an existing leaf")
    return parent, path[-1], node


def _stored_as_is(node: Any, value: Any) -> bool:
    """``parent.key = value`` would store ``value`` unchanged in this untyped leaf (OmegaConf's
    ``AnyNode`` keeps primitives as they are); not for read-only nodes, ``None`` in a
    non-optional node or the missing marker, which OmegaConf treats specially."""
    from omegaconf import AnyNode

    return (
        type(node) is AnyNode
        and type(value) in (str, int, float, bool)
        and value != "???"
        and not node._get_flag("readonly")
    )


def _resolved(cfg: Any, path: tuple[Any, ...]) -> Any:
    """The value at ``path`` as ``OmegaConf.to_container(resolve=True, throw_on_missing=False,
    enum_to_str=True)`` gives it."""
    from enum import Enum

    from omegaconf import Container, OmegaConf, ValueNode

    parent = cfg
    for key in path[:-1]:
        parent = parent._get_node(key)
        if parent._is_interpolation():
            raise _NotFast("below an interpolation")
    key = path[-1]
    node = parent._get_node(key)
    if isinstance(node, ValueNode) and not node._is_interpolation():
        if node._is_missing():
            return "???"
        value = node._value()
        return value.name if isinstance(value, Enum) else value
    if isinstance(node, Container) and not node._is_interpolation():
        return OmegaConf.to_container(node, resolve=True, throw_on_missing=False, enum_to_str=True)
    if node._is_missing():
        return "???"
    value = parent[key]
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True, throw_on_missing=False, enum_to_str=True)
    if isinstance(value, Enum):
        return value.name
    return value


def _patched(base: dict[str, Any], patches: dict[tuple[Any, ...], Any]) -> dict[str, Any]:
    """A copy of ``base`` with ``patches`` set, copying only the containers on their paths (the
    rest is shared with ``base``)."""
    root = dict(base)
    copied: dict[tuple[Any, ...], Any] = {(): root}
    for path, value in patches.items():
        node = root
        for depth in range(len(path) - 1):
            prefix = path[: depth + 1]
            child = copied.get(prefix)
            if child is None:
                original = node[path[depth]]
                child = dict(original) if isinstance(original, dict) else list(original)
                node[path[depth]] = child
                copied[prefix] = child
            node = child
        node[path[-1]] = value
    return root


def _same(a: Any, b: Any) -> bool:
    """Equal with equal types all the way down (``1``, ``1.0`` and ``True`` differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def escape_interpolations(value: Any) -> Any:
    """Escape ``${`` in the strings of a resolved container, so building a ``DictConfig`` from it
    does not interpolate a second time (a value resolved from ``\\${HOME}`` is the literal
    ``${HOME}``). Backslashes before ``${`` are doubled first, as OmegaConf's grammar wants."""
    if isinstance(value, dict):
        return {k: escape_interpolations(v) for k, v in value.items()}
    if isinstance(value, list):
        return [escape_interpolations(v) for v in value]
    if isinstance(value, str) and "${" in value:
        return re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", value)
    return value


def typed_hydra_node(hydra_node: dict[str, Any]) -> Any:
    """``hydra_node`` as a ``DictConfig`` typed as Hydra's ``HydraConf`` (merged onto the
    structured schema, struct mode off: Hydra's composed node carries keys beyond the schema).
    ~20 ms; the launcher builds it once per batch (``Payload.typed_hydra_base``)."""
    from hydra.conf import HydraConf
    from omegaconf import OmegaConf

    hydra_cfg = OmegaConf.structured(HydraConf)
    OmegaConf.set_struct(hydra_cfg, False)
    hydra_cfg.merge_with(escape_interpolations(hydra_node))
    return hydra_cfg


def _patched_hydra_node(typed_base: Any, diff: list[dict[str, Any]]) -> Any:
    """``typed_base`` (a typed Hydra ``DictConfig``, changed in place) with the leaves of
    ``diff`` (``documents.dict_diff``) set or deleted."""
    for entry in diff:
        *parents, leaf = entry["path"]
        node = typed_base
        for key in parents:
            if key not in node:
                node[key] = {}
            node = node[key]
        if entry.get("delete"):
            del node[leaf]
        else:
            node[leaf] = escape_interpolations(entry["value"])
    return typed_base


def job_config(
    config: dict[str, Any],
    hydra_node: dict[str, Any],
    job_id: str | None,
    *,
    typed_base: Any = None,
    base_node: dict[str, Any] | None = None,
) -> Any:
    """Rebuild the ``DictConfig`` that Hydra's ``run_job`` expects from a stored point.

    ``hydra`` must be typed as Hydra's ``HydraConf`` (``HydraConfig.set_config`` asserts it).
    Given ``typed_base`` (:func:`typed_hydra_node` of ``base_node``, a fresh copy: it is changed
    in place), only the leaves where ``hydra_node`` differs from ``base_node`` are set on it
    (~1 ms instead of ~20 ms); when that fails the node is merged onto the schema from scratch.
    ``job_id`` becomes ``hydra.job.id`` (Slurm's ``<array>_<task>``).
    """
    from omegaconf import OmegaConf, flag_override, open_dict

    hydra_cfg = None
    if typed_base is not None and base_node is not None:
        from seml_hydra.core.documents import dict_diff

        try:
            hydra_cfg = _patched_hydra_node(typed_base, dict_diff(base_node, hydra_node))
        except Exception:  # a change the typed node refuses: build it from scratch below
            hydra_cfg = None
    if hydra_cfg is None:
        hydra_cfg = typed_hydra_node(hydra_node)
    if job_id is not None:
        hydra_cfg.job.id = job_id
    cfg = OmegaConf.create(escape_interpolations(config))
    # the node is ours alone: attached without OmegaConf's deep copy, as Hydra's config loader
    # attaches its composed ``hydra`` node (``_internal/config_loader_impl.py``)
    with open_dict(cfg), flag_override(cfg, "no_deepcopy_set_nodes", True):
        cfg.hydra = hydra_cfg
    return cfg
