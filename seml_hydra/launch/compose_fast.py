"""The fast path of :func:`seml_hydra.launch.compose.compose_points`: the points of one
combination of config-group choices from ONE Hydra composition.

Hydra composes a point in two steps: the defaults list (config groups, YAML loading: ~50 ms)
and then the plain value overrides, applied with OmegaConf. The second step is all that differs
between the points of one combination of config-group choices. So for every combination of two
or more points the config is composed ONCE by Hydra's ``load_sweep_config`` (with the group
overrides only: :class:`Combination`), and each point then gets its value overrides through what
Hydra's own ``ConfigLoaderImpl._apply_overrides_to_config`` ends in, on that composed, still
unresolved config (:meth:`Combination.point`). Only what can differ is resolved again per point:
the overridden leaves and every interpolation that (transitively) references an overridden key,
``hydra.job.num``, ``hydra.runtime.output_dir``, ``hydra.overrides.task`` or
``hydra.job.override_dirname`` (:class:`_Plan`; an interpolation the dependency scan does not
understand, e.g. a custom resolver, is always re-resolved). Everything else is shared with the
combination's resolved base: points share unchanged sub-dicts.

Anything this module cannot prove equal to Hydra's composition raises (:class:`NotFast`, or the
error OmegaConf raised): the caller then composes the point in full. Hydra and OmegaConf are
imported inside the functions (the launcher module is imported at every Hydra start).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from seml_hydra.core.hydra_node import JOB_ID_TOKEN
from seml_hydra.launch.containers import to_dict


class NotFast(Exception):
    """This point (or combination) cannot take the fast path."""


JOB_NUM = ("hydra", "job", "num")
OUTPUT_DIR = ("hydra", "runtime", "output_dir")
TASK = ("hydra", "overrides", "task")
DIRNAME = ("hydra", "job", "override_dirname")
DIRNAME_CONF = ("hydra", "job", "config", "override_dirname")
SWEEP_DIR = ("hydra", "sweep", "dir")
SWEEP_SUBDIR = ("hydra", "sweep", "subdir")
_KEY = re.compile(r"^(\.*)([A-Za-z0-9_\-/]+(?:\.[A-Za-z0-9_\-/]+)*)?$")
#: resolvers whose value does not depend on the config (``now`` is cached from the master config)
_CONSTANT_RESOLVERS = ("now", "oc.env")


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
class Split:
    """A point's overrides, sorted for the fast path (``None`` group key: full composition)."""

    group_key: tuple[str, ...] | None
    values: list[tuple[tuple[str, ...], Any]]
    task: list[str]
    app: list[Any]


class Combination:
    """One combination of group overrides: Hydra's composed (unresolved) config, its resolved
    container, and the interpolations in it with what they reference."""

    def __init__(
        self, config_loader: Any, master_config: Any, group_key: tuple[str, ...], job_num: int
    ) -> None:
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf

        cfg = config_loader.load_sweep_config(master_config, list(group_key))
        OmegaConf.set_readonly(cfg.hydra, False)
        mark_job_id(cfg)
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
        #: (plan id, interpolation path) -> its :meth:`_steps`
        self.steps: dict[tuple[int, tuple[Any, ...]], Any] = {}
        #: a point's patched paths -> their :func:`_patch_tree`
        self.patch_trees: dict[tuple[tuple[Any, ...], ...], Any] = {}
        #: hydra paths a point patched -> their PatchOrigin (shared by the points of a plan)
        self.origins: dict[tuple[tuple[Any, ...], ...], PatchOrigin] = {}
        # the base container: resolved with this job number and its output dir
        # Hydra types it HydraConf but holds the config's view of its node, as its own
        # HydraConfig.set_config does (with an ignore of its own)
        HydraConfig.instance().cfg = view  # type: ignore[assignment]
        self._write_inputs(job_num, None, None)
        subdir = str(_resolved(cfg, SWEEP_SUBDIR))
        self.sweep_dir = os.path.abspath(str(_resolved(cfg, SWEEP_DIR)))
        self._write_output_dir(os.path.abspath(os.path.join(self.sweep_dir, subdir)))
        container = to_dict(cfg, resolve=True, throw_on_missing=False, enum_to_str=True)
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

    def point(
        self, job_num: int, split: Split
    ) -> tuple[dict[str, Any], dict[str, Any], PatchOrigin]:
        """The point's ``(app config, hydra node, its PatchOrigin)``; raises for anything not
        provably equal to Hydra's composition (the caller then composes it in full)."""
        from hydra._internal.config_loader_impl import get_overrides_dirname
        from hydra.core.hydra_config import HydraConfig

        plan = self.plan(tuple(path for path, _ in split.values))
        kv_sep, item_sep, exclude = self.dirname_conf
        dirname = get_overrides_dirname(
            overrides=split.app, kv_sep=kv_sep, item_sep=item_sep, exclude_keys=exclude
        )
        saved: list[tuple[Any, Any, Any, Any]] = []
        # Hydra types it HydraConf but holds the config's view of its node, as its own
        # HydraConfig.set_config does (with an ignore of its own)
        HydraConfig.instance().cfg = self.view  # type: ignore[assignment]
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
                sweep_dir = os.path.abspath(str(self._evaluate(SWEEP_DIR, patches, plan)))
                patches[SWEEP_DIR] = sweep_dir
            if SWEEP_SUBDIR in plan.early:
                subdir = patches[SWEEP_SUBDIR] = self._evaluate(SWEEP_SUBDIR, patches, plan)
            else:
                subdir = self.base["hydra"]["sweep"]["subdir"]
            output_dir = patches[OUTPUT_DIR] = os.path.abspath(os.path.join(sweep_dir, str(subdir)))
            if plan.omegaconf:
                self._write_output_dir(output_dir)
            for path in plan.order:
                patches[path] = self._evaluate(path, patches, plan)
        finally:
            for parent, key, node, value in reversed(saved):
                node._val = value
                parent.__dict__["_content"][key] = node
        keys = tuple(patches)
        tree = self.patch_trees.get(keys, _UNKNOWN)
        if tree is _UNKNOWN:
            tree = self.patch_trees[keys] = _patch_tree(keys)
        if tree is None:
            container = _patched(self.base, patches)
        else:
            container = _apply_patches(self.base, tree, list(patches.values()))
        hydra_node = container.pop("hydra")
        hydra_paths = tuple(path[1:] for path in patches if path[0] == "hydra")
        origin = self.origins.get(hydra_paths)
        if origin is None:
            origin = PatchOrigin(self.base["hydra"], frozenset(hydra_paths))
            self.origins[hydra_paths] = origin
        return container, hydra_node, origin

    def _evaluate(
        self, path: tuple[Any, ...], patches: dict[tuple[Any, ...], Any], plan: _Plan
    ) -> Any:
        """An interpolation's value for this point: computed here when it is a plain string
        template over keys (``${a.b}/${hydra:job.num}``), else resolved by OmegaConf. Where
        each referenced key is read from (a patch of this point, or the combination's base,
        whose value is then the same for every point) is decided once per plan and path
        (:meth:`_steps`): the points of one plan patch the same keys in the same order."""
        key = (id(plan), path)
        steps = self.steps.get(key, _UNKNOWN)
        if steps is _UNKNOWN:
            steps = self.steps[key] = self._steps(path, patches)
        if steps is not None:
            interp = self.interps[path]
            values = []
            for patched, value, rest in steps:
                if patched:
                    value = _lookup_in(patches[value], rest)
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

    def _steps(
        self, path: tuple[Any, ...], patches: dict[tuple[Any, ...], Any]
    ) -> list[tuple[bool, Any, tuple[str, ...]]] | None:
        """The pieces of the interpolation at ``path`` for :meth:`_evaluate`: ``(False,
        literal or the base's value, ())`` or ``(True, the patch's path, the rest of the
        reference below it)``; ``None`` when OmegaConf resolves it (not a template, or a
        reference the base holds no primitive at)."""
        interp = self.interps.get(path)
        if interp is None or interp.pieces is None:
            return None
        steps: list[tuple[bool, Any, tuple[str, ...]]] = []
        for piece in interp.pieces:
            if isinstance(piece, str):
                steps.append((False, piece, ()))
                continue
            for i in range(len(piece), 0, -1):
                if piece[:i] in patches:
                    steps.append((True, piece[:i], piece[i:]))
                    break
            else:
                value = _lookup_in(self.base, piece)
                if value is _UNKNOWN:
                    return None
                steps.append((False, value, ()))
        return steps


_UNKNOWN = object()


def _lookup_in(value: Any, rest: tuple[str, ...]) -> Any:
    """The resolved primitive value at ``rest`` below ``value`` (``_UNKNOWN`` if not a plain
    primitive reachable through dicts, or missing)."""
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
    def make(combination: Combination, value_paths: tuple[tuple[str, ...], ...]) -> _Plan:
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
                raise NotFast("override_dirname's settings depend on swept values")
            if any(_overlap(path, v) and len(v) < len(path) for v in value_paths):
                raise NotFast("an interpolation below an overridden key")
            if any(_overlap(path, q) and q != path for q in chosen):
                raise NotFast("nested interpolations")
        early = {p for p in chosen if p in (SWEEP_DIR, SWEEP_SUBDIR)}
        for path in early:
            refs = interps[path].refs
            if refs is None or any(_overlap(r, OUTPUT_DIR) for r in refs):
                raise NotFast("the sweep dir depends on the output dir")
        if SWEEP_SUBDIR in early and SWEEP_DIR in early:
            raise NotFast("both sweep dir and subdir vary")
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
                raise NotFast("interpolation cycle")
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


#: ``${hydra.job.id}`` or ``${hydra:job.id}`` in an unresolved string
JOB_ID_INTERPOLATION = re.compile(r"\$\{\s*hydra\s*[.:]\s*job\.id\s*\}")


def mark_job_id(cfg: Any) -> bool:
    """Set ``hydra.job.id`` of a composed, unresolved config to ``JOB_ID_TOKEN`` when its
    ``hydra.sweep.subdir`` uses ``${hydra.job.id}`` (hydra-submitit-launcher's
    ``${hydra.job.num}_${hydra.job.id}``): the Slurm job id exists only in the job, which puts
    it in the token's place (``core.hydra_node.with_job_id``). Returns whether it did."""
    from omegaconf import open_dict, read_write

    text = to_dict(cfg.hydra.sweep, resolve=False).get("subdir")
    if not (isinstance(text, str) and JOB_ID_INTERPOLATION.search(text)):
        return False
    with read_write(cfg.hydra), open_dict(cfg.hydra):
        cfg.hydra.job.id = JOB_ID_TOKEN
    return True


def token_path(value: Any, path: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """The path of the first string of a resolved container that holds ``JOB_ID_TOKEN``, or
    None (pure)."""
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return path if isinstance(value, str) and JOB_ID_TOKEN in value else None
    for key, item in items:
        found = token_path(item, (*path, str(key)))
        if found is not None:
            return found
    return None


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
            raise NotFast(f"{'.'.join(path)} is not below plain dicts")
    node = parent._get_node(path[-1]) if isinstance(parent, DictConfig) else None
    if not isinstance(node, ValueNode):
        raise NotFast(f"{'.'.join(path)} is not an existing leaf")
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
            raise NotFast("below an interpolation")
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


def _patch_tree(paths: Sequence[tuple[Any, ...]]) -> tuple[tuple[Any, Any], ...] | None:
    """``paths`` (a point's patched paths, in order) as nested ``(key, subtree or index into
    paths)`` pairs for :func:`_apply_patches`, keys in first-seen order; ``None`` when a path
    is a prefix of another (:func:`_patched` handles that)."""
    root: dict[Any, Any] = {}
    for index, path in enumerate(paths):
        node = root
        for key in path[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                return None
        if path[-1] in node:
            return None
        node[path[-1]] = index

    def freeze(node: dict[Any, Any]) -> tuple[tuple[Any, Any], ...]:
        return tuple((k, v if isinstance(v, int) else freeze(v)) for k, v in node.items())

    return freeze(root)


#: a container of a config: a mapping or a list
_Container = TypeVar("_Container", dict[str, Any], list[Any])


def _apply_patches(
    base: _Container, tree: tuple[tuple[Any, Any], ...], values: list[Any]
) -> _Container:
    """:func:`_patched` along a :func:`_patch_tree` (``values`` in the paths' order): the same
    copy of ``base``, without looking up every prefix of every path."""
    root = dict(base) if isinstance(base, dict) else list(base)
    for key, sub in tree:
        if type(sub) is int:
            root[key] = values[sub]
        else:
            root[key] = _apply_patches(root[key], sub, values)
    return root


def _patched(base: dict[str, Any], patches: dict[tuple[Any, ...], Any]) -> dict[str, Any]:
    """A copy of ``base`` with ``patches`` set, copying only the containers on their paths (the
    rest is shared with ``base``)."""
    root = dict(base)
    copied: dict[tuple[Any, ...], Any] = {(): root}
    for path, value in patches.items():
        node: dict[str, Any] | list[Any] = root
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
