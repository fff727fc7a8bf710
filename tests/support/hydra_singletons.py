"""Hydra's process-wide state (its ``Singleton`` instances: ConfigStore, the version base,
HydraConfig, JobRuntime, GlobalHydra; OmegaConf's resolvers) put back after a test that
changed it, as Hydra's own ``hydra_restore_singletons`` fixture does, at a fraction of the cost.

Hydra's fixture deep-copies the whole state before every test and, after it, installs that copy
and discovers every plugin again (re-executing the plugin modules): about 0.1 s of CPU a test,
most of the unit tier's time. :class:`SingletonGuard` instead records, before a test, which
objects the state is made of and what each container holds (identities, not copies: cheap), and
only when that record differs after the test installs a copy of the state as it was before. It
keeps the discovered plugins unless the test replaced them (then they are discovered again).
The copy of the state is taken once and taken again only when a test starts from a state it
has not seen (a fixture of wider scope changed it).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from types import BuiltinFunctionType, FunctionType, MethodType, ModuleType
from typing import Any

#: leaves the record does not look into: their identity in their container is what counts
_OPAQUE = (type, FunctionType, BuiltinFunctionType, MethodType, ModuleType, str, bytes, int,
           float, complex, bool, type(None))  # fmt: skip


@dataclass(frozen=True)
class StateRecord:
    """What Hydra's state is made of at one moment: ``shape``, for each container reached from
    the state, its identity and the identities of what it holds; ``alive`` keeps every object
    reached alive, so that no identity of the record is reused by a new object meanwhile;
    ``plugins``: the ``Plugins`` instance (None when there is none)."""

    shape: tuple
    alive: tuple
    plugins: Any


def record_state() -> StateRecord:
    """A :class:`StateRecord` of the state now: a walk of ``Singleton._instances`` (but the
    plugins) and OmegaConf's resolvers through dicts, lists, tuples, sets and objects'
    ``__dict__`` (classes, functions, modules and scalars are leaves). A config the
    ``ConfigStore`` holds (a ``ConfigNode``) is recorded by what it refers to, not walked into:
    Hydra hands out copies of those (``ConfigStore.load``), so only a test that reaches into
    ``ConfigStore.repo`` could change one in place, and that change would not be seen."""
    from hydra.core.config_store import ConfigNode
    from hydra.core.plugins import Plugins
    from hydra.core.singleton import Singleton
    from omegaconf.basecontainer import BaseContainer

    instances = [(k, v) for k, v in Singleton._instances.items() if k is not Plugins]
    stack: list[Any] = [BaseContainer._resolvers, *(v for _, v in instances)]
    seen: dict[int, Any] = {}
    shape: list[tuple] = [tuple((id(k), id(v)) for k, v in instances)]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen[id(obj)] = obj
        if isinstance(obj, _OPAQUE):
            continue
        if isinstance(obj, dict):
            items = list(obj.items())
            shape.append((id(obj), tuple((id(k), id(v)) for k, v in items)))
            stack.extend(k for k, _ in items)
            stack.extend(v for _, v in items)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            members = list(obj)
            shape.append((id(obj), tuple(id(v) for v in members)))
            stack.extend(members)
        elif isinstance(obj, ConfigNode):  # a stored config: Hydra hands out copies only
            fields = vars(obj)
            shape.append((id(obj), tuple((k, id(v)) for k, v in fields.items())))
            seen.update((id(v), v) for v in fields.values())
        else:
            fields = getattr(obj, "__dict__", None)
            shape.append((id(obj), type(obj), id(fields)))
            if fields is not None:
                stack.append(fields)
    return StateRecord(tuple(shape), tuple(seen.values()), Singleton._instances.get(Plugins))


class SingletonGuard:
    """Puts Hydra's state back after a test (one guard for the whole session).

    ``token = guard.before()`` before the test, ``guard.after(token)`` after it: the state is
    then as it was at ``before`` (the same content; new objects where the test changed any)."""

    def __init__(self) -> None:
        self._pristine: dict | None = None  # a copy of the state, never installed itself
        self._known: StateRecord | None = None  # a live state equal to the copy

    def before(self) -> StateRecord:
        """Discover the plugins unless they are (which registers their config sources, part of
        the state), record the state and copy it (``Singleton.get_state``) unless it is the one
        last copied or installed. Returns the record :meth:`after` compares with."""
        from hydra.core.plugins import Plugins
        from hydra.core.singleton import Singleton

        Plugins.instance()
        record = record_state()
        if self._known is None or record.shape != self._known.shape:
            self._pristine = Singleton.get_state()
            self._known = record
        return record

    def after(self, before: StateRecord) -> bool:
        """Install a copy of the state of ``before`` when the state changed since; the plugins
        of ``before`` are kept, or discovered again when the test replaced or removed them.
        Returns whether anything was put back."""
        from hydra.core.plugins import Plugins
        from hydra.core.singleton import Singleton
        from omegaconf.basecontainer import BaseContainer

        now = record_state()
        if now.shape == before.shape and now.plugins is before.plugins:
            return False
        assert self._pristine is not None, "after() without before()"
        instances = copy.deepcopy(self._pristine["instances"])
        if before.plugins is not None and now.plugins is before.plugins:
            instances[Plugins] = before.plugins
        Singleton._instances = instances
        Plugins.instance()  # discovers the plugins only when they are not there
        BaseContainer._resolvers = copy.deepcopy(self._pristine["omegaconf_resolvers"])
        self._known = record_state()
        return True
