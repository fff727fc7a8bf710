"""A point's overrides sorted for ``launch.compose``: config-group choices (the key of the point's
combination), plain ``key=value`` overrides of existing leaves (what the fast path applies), or
anything else (the point takes Hydra's full composition)."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from seml_hydra.core.overrides import parse_override
from seml_hydra.launch.containers import to_list

log = logging.getLogger(__name__)

_SCALARS = (str, int, float, bool, type(None))
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$")
#: at most this many distinct override strings keep their classification
_KINDS_KEPT = 200_000


@dataclass
class Split:
    """A point's overrides, sorted.

    Attributes:
        group_key: the config-group overrides, in order: the point's combination; ``None``
            when the point takes the full composition (some override is neither a group
            choice nor a plain value, or Hydra's config repository is not reachable).
        values: ``(key path, parsed override)`` of each plain ``key=scalar`` override.
        task: the override strings of ``hydra.overrides.task`` (all but ``hydra.*``).
        app: the parsed overrides of ``task`` (for ``hydra.job.override_dirname``).
    """

    group_key: tuple[str, ...] | None
    values: list[tuple[tuple[str, ...], Any]]
    task: list[str]
    app: list[Any]


class Splitter:
    """Sorts the points of one launch (:meth:`split`); each distinct override string is
    classified once (a grid has few)."""

    def __init__(self, config_loader: Any, master_config: Any) -> None:
        """Reaches Hydra's caching config repository (to tell config groups from keys) through
        ``ConfigLoaderImpl._parse_overrides_and_create_caching_repo`` (Hydra 1.3); with any
        other Hydra, every point is split for the full composition."""
        self.repo: Any = None
        self.group_exists: dict[str, bool] = {}
        #: override string -> its :meth:`_classify`
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
        """Sort a point's override strings (:class:`Split`; an unparsable one: ``group_key``
        ``None`` and nothing else, Hydra reports it in the full composition)."""
        group, values, task, app = [], [], [], []
        fast = self.repo is not None
        for text in overrides:
            kind = self._kinds.get(text)
            if kind is None:
                kind = self._classify(text)
                if len(self._kinds) < _KINDS_KEPT:
                    self._kinds[text] = kind
            if kind[0] == "unparsable":
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
        ``group`` (a config-group choice), ``value`` (a plain ``key=scalar`` of an existing
        key path: no ``~``/``+``/``++``/``@pkg``, no ``hydra.*``, no sweep, no ``${...}``),
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
