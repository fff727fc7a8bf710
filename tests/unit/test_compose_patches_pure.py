"""``launch.compose.patches`` (pure): a copy along a planned patch tree equals the copy along
every path's prefixes, shares the sub-dicts it does not patch and leaves the base as it was."""

from __future__ import annotations

import pytest

from seml_hydra.launch.compose.patches import apply_patches, patch_tree, patched


@pytest.mark.parametrize(
    "paths",
    [
        [("a",), ("b", "c"), ("b", "d", "e")],
        [("b", "d", "e"), ("a",), ("b", "c")],
        [("l", 1), ("a",)],  # into a list
        [("new",), ("b", "new")],  # keys the base lacks, added in this order
    ],
)
def test_patches_along_a_planned_tree_equal_the_prefix_walk(paths):
    base = {"a": 1, "b": {"c": 2, "d": {"e": 3, "f": [4]}, "g": {"h": 5}}, "l": [0, 1, 2]}
    patches = {path: f"v{i}" for i, path in enumerate(paths)}
    tree = patch_tree(list(patches))
    out = apply_patches(base, tree, list(patches.values()))
    expected = patched(base, patches)
    assert out == expected and list(out) == list(expected)
    assert list(out["b"]) == list(expected["b"])  # key order too
    assert out["b"]["g"] is base["b"]["g"]  # unpatched sub-dicts stay shared
    assert base["a"] == 1 and base["l"] == [0, 1, 2]  # the base is not changed


def test_a_patch_below_another_is_left_to_the_prefix_walk():
    assert patch_tree([("a",), ("a", "b")]) is None
    assert patch_tree([("a", "b"), ("a",)]) is None
