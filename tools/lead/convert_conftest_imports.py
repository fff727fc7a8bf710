"""Rewrite test files that import helpers from ``conftest`` (or from another test file) to
import them from ``tests/support/``, where they live now.

    python tools/lead/convert_conftest_imports.py tests/service/test_new.py [...]

What it rewrites, at any indentation (inside a function too):

- ``from conftest import a, b as c`` (or ``tests.conftest``; one line or parenthesised over several): one
  ``from support.<module> import ...`` line per module that defines the names;
- ``import conftest`` / ``import conftest as x``: every ``conftest.NAME`` (``x.NAME``) becomes
  ``NAME`` and the import becomes the ``from support...`` lines of the names used;
- ``from test_<name> import A``: the same, when every name it imports is defined in
  ``tests/support/`` (a name the test module defines itself stays: move it first).

Which module defines a name is read from ``tests/support/*.py`` (its top-level functions,
classes and assignments; names starting with ``_`` are private and never imported). Then
``ruff check --select I --fix`` sorts the imports of the changed files (``.venv/bin/ruff`` or
``ruff`` on PATH, when there is one).

A name that no support module defines, or that two define, is an error: the file is left as it
was and the line says which name and where; exit status 1 when any file could not be converted.
It does not touch fixtures (pytest finds those in ``conftest.py`` without an import).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = ROOT / "tests" / "support"


def defined_names(source: str) -> set[str]:
    """The public names a module's source defines at its top level (functions, classes,
    assignment targets, including tuple targets)."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return {n for n in names if not n.startswith("_")}


def support_index(support: Path = SUPPORT) -> dict[str, list[str]]:
    """``{name: [support modules defining it]}`` (``support.<stem>``) of ``tests/support``."""
    index: dict[str, list[str]] = {}
    for path in sorted(support.glob("*.py")):
        if path.name == "__init__.py":
            continue
        for name in defined_names(path.read_text()):
            index.setdefault(name, []).append(f"support.{path.stem}")
    return index


def is_test_module(module: str) -> bool:
    """``conftest``, ``tests.conftest``, ``test_x``, ``service.test_x``: a module whose helpers
    belong in ``tests/support``."""
    parts = module.split(".")
    return "conftest" in parts or parts[-1].startswith("test_")


class ConvertError(ValueError):
    """A file that cannot be converted; the message says where and why."""


@dataclass(frozen=True)
class Edit:
    """Replace lines ``first..last`` (1-based, inclusive) with ``lines``."""

    first: int
    last: int
    lines: list[str]


def import_lines(pairs: list[tuple[str, str | None]], index: dict[str, list[str]],
                 indent: str, where: str) -> list[str]:  # fmt: skip
    """``from support.<module> import ...`` lines (``indent`` first) for ``(name, alias)``
    pairs, one line per module in module order; :class:`ConvertError` for a name no module or
    several modules define (``where``: the file and line, for the message)."""
    by_module: dict[str, list[str]] = {}
    for name, alias in pairs:
        modules = index.get(name, [])
        if len(modules) != 1:
            found = "no module" if not modules else ", ".join(modules)
            raise ConvertError(f"{where}: {name!r} is defined by {found} of tests/support")
        by_module.setdefault(modules[0], []).append(name if alias is None else f"{name} as {alias}")
    return [f"{indent}from {m} import {', '.join(names)}" for m, names in sorted(by_module.items())]


def convert_source(source: str, index: dict[str, list[str]], filename: str = "<file>") -> str:
    """``source`` with its imports of ``conftest`` and of the support helpers from test modules
    rewritten (see the module's docstring); unchanged when it has none."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits: list[Edit] = []
    renames: dict[str, str] = {}  # ``import conftest as x``: x
    for node in ast.walk(tree):
        where = f"{filename}:{getattr(node, 'lineno', '?')}"
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and is_test_module(node.module)
        ):
            pairs = [(a.name, a.asname) for a in node.names]
            indent = lines[node.lineno - 1][: node.col_offset]
            edits.append(Edit(node.lineno, node.end_lineno or node.lineno,
                              import_lines(pairs, index, indent, where)))  # fmt: skip
        elif isinstance(node, ast.Import) and any(a.name == "conftest" for a in node.names):
            if len(node.names) != 1:
                raise ConvertError(f"{where}: put `import conftest` on a line of its own first")
            renames[node.names[0].asname or "conftest"] = where
            edits.append(Edit(node.lineno, node.end_lineno or node.lineno, []))
    if renames:
        source, used = _inline_module_attributes(source, tree, set(renames))
        tree = ast.parse(source)
        lines = source.splitlines(keepends=True)
        edits = [e for e in edits if e.lines]  # the line numbers did not move: same lines
        for node in ast.walk(tree):
            if isinstance(node, ast.Import) and node.names[0].name == "conftest":
                indent = lines[node.lineno - 1][: node.col_offset]
                where = renames[node.names[0].asname or "conftest"]
                pairs = [(name, None) for name in sorted(used)]
                edits.append(Edit(node.lineno, node.end_lineno or node.lineno,
                                  import_lines(pairs, index, indent, where)))  # fmt: skip
    for edit in sorted(edits, key=lambda e: e.first, reverse=True):
        lines[edit.first - 1 : edit.last] = [line + "\n" for line in edit.lines]
    return "".join(lines)


def _inline_module_attributes(
    source: str, tree: ast.AST, modules: set[str]
) -> tuple[str, set[str]]:
    """``source`` with ``<module>.NAME`` written ``NAME`` for the names in ``modules``; the
    set of NAMEs used that way."""
    hits = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name) and n.value.id in modules]  # fmt: skip
    lines = source.splitlines(keepends=True)
    for node in sorted(hits, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        line = lines[node.lineno - 1].encode()
        start, end = node.col_offset, node.end_col_offset or node.col_offset
        lines[node.lineno - 1] = (line[:start] + node.attr.encode() + line[end:]).decode()
    return "".join(lines), {n.attr for n in hits}


def sort_imports(paths: list[Path]) -> None:
    """Sort the imports of ``paths`` with ruff (``--select I --fix``) when ruff is here."""
    ruff = ROOT / ".venv" / "bin" / "ruff"
    command = str(ruff) if ruff.exists() else shutil.which("ruff")
    if command and paths:
        subprocess.run([command, "check", "-q", "--select", "I", "--fix", *map(str, paths)],
                       cwd=ROOT, check=False)  # fmt: skip


def main(argv: list[str]) -> int:
    """Convert the files named in ``argv``; 0 when all were converted (or needed nothing)."""
    if not argv:
        print("usage: convert_conftest_imports.py TEST_FILE...", file=sys.stderr)
        return 2
    index = support_index()
    changed, failed = [], 0
    for name in argv:
        path = Path(name)
        try:
            source = path.read_text()
            new = convert_source(source, index, str(path))
        except (OSError, SyntaxError, ConvertError) as error:
            print(f"not converted: {error}", file=sys.stderr)
            failed += 1
            continue
        if new != source:
            path.write_text(new)
            changed.append(path)
            print(f"converted {path}")
    sort_imports(changed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
