"""Where test code lives: helpers in ``tests/support/``, fixtures and hooks in
``tests/conftest.py``, and no test file importing ``conftest`` or another test file (a reader
finds a helper by its import; pytest's module-name games are not needed to run one file)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
CONFTEST = TESTS / "conftest.py"
#: every Python file of the suite but conftest.py: test files, support modules, test apps
SUITE = sorted(p for p in TESTS.rglob("*.py") if p != CONFTEST)


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, module)`` of every absolute import anywhere in ``tree`` (inside functions too)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def forbidden_imports(source: str) -> list[str]:
    """``"line N: imports M"`` for each import of ``conftest`` or of a test module
    (``test_*``) in ``source``."""
    return [
        f"line {line}: imports {module}"
        for line, module in imported_modules(ast.parse(source))
        if "conftest" in module.split(".") or module.split(".")[-1].startswith("test_")
    ]


def is_fixture(decorator: ast.expr) -> bool:
    """``@pytest.fixture`` or ``@pytest.fixture(...)``."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return isinstance(target, ast.Attribute) and target.attr == "fixture"


def conftest_strays(source: str) -> list[str]:
    """What a conftest.py ``source`` defines besides fixtures, ``pytest_*`` hooks and private
    helpers it uses itself (``_name``, referenced in the file), one line each."""
    tree = ast.parse(source)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    used |= {a.value for a in ast.walk(tree) if isinstance(a, ast.Constant)}  # fixture names
    strays = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(is_fixture(d) for d in node.decorator_list) or node.name.startswith("pytest_"):
                continue
        names = _defined(node)
        if names and all(n.startswith("_") and n in used for n in names):
            continue
        what = ", ".join(names) or type(node).__name__
        strays.append(f"line {node.lineno}: {what}")
    return strays


def _defined(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    return []


def test_no_file_of_the_suite_imports_conftest_or_a_test_module():
    found = {
        str(path.relative_to(TESTS)): hits
        for path in SUITE
        if (hits := forbidden_imports(path.read_text()))
    }
    assert not found, f"move these helpers to tests/support/: {found}"


def test_conftest_defines_only_fixtures_hooks_and_the_private_helpers_it_uses():
    strays = conftest_strays(CONFTEST.read_text())
    assert not strays, f"tests/conftest.py: move these to tests/support/: {strays}"


def test_support_modules_define_no_fixture():
    """A fixture in a support module would be found only by the files that import it."""
    for path in sorted((TESTS / "support").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert not any(is_fixture(d) for d in node.decorator_list), (path, node.name)


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("from conftest import run_app\n", ["line 1: imports conftest"]),
        ("def f():\n    import conftest\n", ["line 2: imports conftest"]),
        ("from test_retry import Blocker\n", ["line 1: imports test_retry"]),
        ("from tests.conftest import ROOT\n", ["line 1: imports tests.conftest"]),
        ("import service.test_retry as t\n", ["line 1: imports service.test_retry"]),
        ("from support.run import run_app\nimport pytest\n", []),
    ],
)
def test_the_import_rule_sees_imports_at_any_depth(source, found):
    assert forbidden_imports(source) == found


def test_the_conftest_rule_names_public_helpers_and_unused_private_ones():
    source = (
        '"""doc"""\nimport pytest\n\n'
        "@pytest.fixture\ndef db():\n    return _make()\n\n"
        "def pytest_configure(config):\n    pass\n\n"
        "def _make():\n    return 1\n\n"
        "def run_app():\n    pass\n\n"
        "def _unused():\n    pass\n\n"
        "LIMIT = 3\n"
    )
    assert conftest_strays(source) == ["line 14: run_app", "line 17: _unused", "line 20: LIMIT"]
