"""The interpolations of a composed config and what they reference, for the fast path's plan
(``launch.compose.fast``): which interpolations a swept value can change, and which are plain
string templates over keys the fast path can fill in itself (pure, but for reading OmegaConf
nodes in :func:`find_interpolations`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_KEY = re.compile(r"^(\.*)([A-Za-z0-9_\-/]+(?:\.[A-Za-z0-9_\-/]+)*)?$")
#: resolvers whose value does not depend on the config (``now`` is cached from the master config)
_CONSTANT_RESOLVERS = ("now", "oc.env")


@dataclass
class Interp:
    """An interpolation of the composed config: the paths it references (``None``: not
    understood, re-resolved for every point) and, for a plain string template over keys on an
    untyped or string node, its pieces (literal strings and referenced paths)."""

    refs: list[tuple[str, ...]] | None
    pieces: list[Any] | None
    single: bool
    string: bool  # a ``str`` node: the value is converted with ``str()``


def overlap(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """One path is a prefix of the other (keys compared as strings)."""
    n = min(len(a), len(b))
    return all(str(a[i]) == str(b[i]) for i in range(n))


def find_interpolations(
    node: Any, path: tuple[Any, ...], out: dict[tuple[Any, ...], Interp]
) -> None:
    """Record every interpolation below ``node`` (see :class:`Interp`)."""
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
            refs, pieces = interpolation_refs(child_path, text)
            if type(child) not in (AnyNode, StringNode) or "\\" in text:
                pieces = None
            single = pieces is not None and len(pieces) == 1 and not isinstance(pieces[0], str)
            out[child_path] = Interp(refs, pieces, single, type(child) is StringNode)
        elif not (child._is_none() or child._is_missing()):
            find_interpolations(child, child_path, out)


def interpolation_refs(
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
