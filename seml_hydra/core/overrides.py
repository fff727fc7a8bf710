"""Hydra override strings: Hydra's parse of one (cached), and a point's overrides as the nested
``config_unresolved`` dict of its document.

Hydra itself is imported on the first parse only (this module is imported at every Hydra start
and on every rank, through the documents and the launcher)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


#: override string -> its :func:`_nested_entry`, for scalar values (a grid repeats them)
_NESTED: dict[str, tuple[list[str], str, Any]] = {}
_SCALARS = (str, int, float, bool, type(None))


def _nested_entry(override: Any) -> tuple[list[str], str, Any]:
    """``(parent keys, leaf key, value)`` of one parsed override in ``config_unresolved``."""
    value = None if override.is_delete() else override.value()
    if not isinstance(value, (str, int, float, bool, list, dict, type(None))):
        value = str(value)
    *parents, leaf = override.key_or_group.split(".")
    return parents, leaf, value


def overrides_to_nested(overrides: Sequence[str]) -> dict[str, Any]:
    """Turn Hydra override strings into the nested ``config_unresolved`` dict.

    ``["model=small", "optimizer.lr=0.1", "+extra=[1,2]", "~drop"]`` ->
    ``{"model": "small", "optimizer": {"lr": 0.1}, "extra": [1, 2], "drop": None}``. Values are
    parsed by Hydra's override grammar (:func:`parse_override`); a ``group@package`` key is
    stored under ``group``.

    Raises ``hydra.errors.OverrideParseException`` on a malformed override (Hydra has already
    rejected those before a launcher runs).
    """
    nested: dict[str, Any] = {}
    for text in overrides:
        known = _NESTED.get(text)
        if known is None:
            known = _nested_entry(parse_override(text))
            if len(_NESTED) < 200_000 and type(known[2]) in _SCALARS:
                _NESTED[text] = known  # a scalar can be shared by the documents
        parents, leaf, value = known
        node = nested
        for key in parents:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):  # "a=1 a.b=2": keep the first, stringly
                break
        else:
            node[leaf] = value
    return nested
