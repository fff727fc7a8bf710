"""The Sacred observer's module is where Sacred gets imported: the package, the job's runner and
``job.observed`` import without it; ``job.observer`` imports it without setuptools'
``pkg_resources``. Each check runs in a fresh interpreter (this one may hold Sacred already)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def imported_after(code: str) -> list[str]:
    """Which of sacred / pkg_resources a fresh interpreter has imported after ``code``."""
    check = "import sys; print(*[m for m in ('sacred', 'pkg_resources') if m in sys.modules])"
    proc = subprocess.run(
        [sys.executable, "-W", "error::UserWarning", "-c", textwrap.dedent(code) + "\n" + check],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_the_package_and_the_run_code_import_without_sacred():
    assert imported_after("import seml_hydra, seml_hydra.job.runner, seml_hydra.job.observed") == []


def test_the_observer_module_imports_sacred_through_sacred_compat():
    assert imported_after("from seml_hydra.job.observer import DocumentObserver") == ["sacred"]
