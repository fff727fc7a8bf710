"""The package's import graph: no cycles between its modules, counting every import (at module
top and inside functions), and the sub-packages import only those below them."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "seml_hydra"

#: sub-package -> the sub-packages it may import (besides itself); the README's tour
ORDER = ["core", "slurm", "store", "job", "track", "launch", "manage", "cli"]
ALLOWED = {name: set(ORDER[:i]) for i, name in enumerate(ORDER)}
#: modules outside the sub-packages: the package itself, the launcher config, the old names
TOP_LEVEL = {"seml_hydra", "seml_hydra.config", "seml_hydra._compat"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every in-package module ``path`` imports, anywhere in the file."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        found |= {t for t in targets if t in known and t != name}
    return found


@functools.cache
def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imports_of(name, path, known) for name, path in found.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the directed graph ``edges`` as a list of nodes, or None (pure)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_one_and_only_when_there_is_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_package_has_no_import_cycle():
    edges = graph()
    # a package's __init__ is imported with each of its modules: not an edge back
    edges = {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in edges.items()}
    assert find_cycle(edges) is None


def sub_package(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ALLOWED) else None


def test_sub_packages_import_only_those_below_them():
    wrong = []
    for name, targets in graph().items():
        if name in TOP_LEVEL:
            continue
        here = sub_package(name)
        for target in targets:
            there = sub_package(target)
            if there and there != here and there not in ALLOWED[here]:
                wrong.append(f"{name} -> {target}")
    assert wrong == []


#: packages whose docstring lists their parts lowest first, each importing only those before it
LAYERED = [
    "seml_hydra.store",
    "seml_hydra.store.server",
    "seml_hydra.store.db",
    "seml_hydra.store.snapshot",
]


def listed_parts(docstring: str) -> list[str]:
    """The parts a package's docstring lists, in order: its ``- ``name`` `` / ``- ``name/`` ``
    lines (pure)."""
    return re.findall(r"(?m)^- ``(\w+)/?``", docstring)


def test_listed_parts_reads_modules_and_sub_packages_in_order():
    assert listed_parts("Intro.\n\n- ``errors``  a.\n- ``server/`` b\n  - ``x`` no\n") == [
        "errors",
        "server",
    ]


@pytest.mark.parametrize("package", LAYERED)
def test_layered_packages_list_every_part_and_import_only_those_before_it(package):
    found = modules()
    init = found[package]
    order = listed_parts(ast.get_docstring(ast.parse(init.read_text())) or "")
    depth = package.count(".") + 1
    parts = {n.split(".")[depth] for n in found if n.startswith(package + ".")}
    assert sorted(order) == sorted(parts), "the docstring lists every module and sub-package"
    rank = {part: i for i, part in enumerate(order)}
    wrong = []
    for name, targets in graph().items():
        if not name.startswith(package + "."):
            continue
        here = name.split(".")[depth]
        for target in targets:
            if target.startswith(package + ".") and target.split(".")[depth] != here:
                there = target.split(".")[depth]
                if rank[there] > rank[here]:
                    wrong.append(f"{name} -> {target}")
    assert wrong == []
