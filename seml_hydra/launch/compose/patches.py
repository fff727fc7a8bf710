"""Copies of a resolved container with values set along a few paths, sharing every sub-dict not
on a path (pure): how a fast point's config and ``hydra`` node are made from its combination's
resolved base (``launch.compose.fast``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar


def patch_tree(paths: Sequence[tuple[Any, ...]]) -> tuple[tuple[Any, Any], ...] | None:
    """``paths`` (a point's patched paths, in order) as nested ``(key, subtree or index into
    paths)`` pairs for :func:`apply_patches`, keys in first-seen order; ``None`` when a path
    is a prefix of another (:func:`patched` handles that)."""
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


def apply_patches(
    base: _Container, tree: tuple[tuple[Any, Any], ...], values: list[Any]
) -> _Container:
    """:func:`patched` along a :func:`patch_tree` (``values`` in the paths' order): the same
    copy of ``base``, without looking up every prefix of every path."""
    root = dict(base) if isinstance(base, dict) else list(base)
    for key, sub in tree:
        if type(sub) is int:
            root[key] = values[sub]
        else:
            root[key] = apply_patches(root[key], sub, values)
    return root


def patched(base: dict[str, Any], patches: dict[tuple[Any, ...], Any]) -> dict[str, Any]:
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
