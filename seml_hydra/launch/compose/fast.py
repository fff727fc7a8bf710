"""The fast path of ``launch.compose`` (:func:`seml_hydra.launch.compose.iter_point_chunks` says
which points take it): the points of one combination of config-group choices from ONE Hydra
composition.

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
error OmegaConf raised): the caller then composes the point in full (``launch.compose.full``);
nothing here composes in full. Hydra and OmegaConf are imported inside the functions (the
launcher module is imported at every Hydra start).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from seml_hydra.launch.compose.interpolations import Interp, find_interpolations, overlap
from seml_hydra.launch.compose.job_id import mark_job_id
from seml_hydra.launch.compose.patches import apply_patches, patch_tree, patched
from seml_hydra.launch.compose.point import PatchOrigin
from seml_hydra.launch.compose.split import Split
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
        self.interps: dict[tuple[Any, ...], Interp] = {}
        find_interpolations(cfg, (), self.interps)
        self.plans: dict[tuple[tuple[str, ...], ...], _Plan] = {}
        self.located: dict[tuple[str, ...], tuple[Any, str, Any]] = {}
        #: (plan id, interpolation path) -> its :meth:`_steps`
        self.steps: dict[tuple[int, tuple[Any, ...]], Any] = {}
        #: a point's patched paths -> their :func:`patch_tree`
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
            tree = self.patch_trees[keys] = patch_tree(keys)
        if tree is None:
            container = patched(self.base, patches)
        else:
            container = apply_patches(self.base, tree, list(patches.values()))
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
                    or any(overlap(path, v) for v in value_paths)
                    or any(overlap(r, v) for r in refs for v in varying)
                ):
                    chosen.append(path)
                    varying.append(path)
                    changed = True
        for path in chosen:
            if overlap(path, DIRNAME_CONF):
                raise NotFast("override_dirname's settings depend on swept values")
            if any(overlap(path, v) and len(v) < len(path) for v in value_paths):
                raise NotFast("an interpolation below an overridden key")
            if any(overlap(path, q) and q != path for q in chosen):
                raise NotFast("nested interpolations")
        early = {p for p in chosen if p in (SWEEP_DIR, SWEEP_SUBDIR)}
        for path in early:
            refs = interps[path].refs
            if refs is None or any(overlap(r, OUTPUT_DIR) for r in refs):
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
                if not any(overlap(r, q) for r in interps[p].refs or () for q in pending if q != p)
            ]
            if not ready:
                raise NotFast("interpolation cycle")
            order.extend(ready)
            pending = [p for p in pending if p not in ready]
        omegaconf = any(interps[p].pieces is None for p in [*early, *order])

        def needs(target: tuple[str, ...]) -> bool:
            return any(
                interps[p].refs is None or any(overlap(r, target) for r in interps[p].refs or ())
                for p in chosen
            )

        return _Plan(early, order, omegaconf, needs(TASK), needs(DIRNAME))


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
