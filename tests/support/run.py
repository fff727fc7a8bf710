"""Running what a user runs: an app or a sweep in a subprocess, the ``seml`` command
in-process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.paths import GATE_APP, ROOT


def run_python(
    *argv: str, cwd: Path, env: dict | None = None, timeout: float = 300, check: bool = False
):
    """``python *argv`` (this interpreter) in ``cwd``, ``env`` added to the environment; with
    ``check`` the test fails when it does not exit 0 (showing its output). Returns the
    CompletedProcess (text output); ``timeout`` in seconds."""
    proc = subprocess.run(
        [sys.executable, *argv],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def run_app(
    app: str | Path,
    *args: str,
    cwd: Path,
    env: dict | None = None,
    timeout: float = 300,
    check: bool = False,
):
    """Run an app in a subprocess (:func:`run_python`): ``app`` is a path relative to
    ``examples/`` (an example app, ``"../tests/apps/gate.py"``) or an absolute one."""
    app_path = str(ROOT / "examples" / app)
    return run_python(app_path, *args, cwd=cwd, env=env, timeout=timeout, check=check)


def run_points(n: int, *args: str, cwd: Path, env: dict | None = None):
    """``examples/fail.py`` swept over ``x=0..n-1`` on Slurm (``hydra/launcher=seml``), no point
    failing (``fail_on=-1``), ``args`` added (:func:`run_app`): more points than the testbed's
    MaxArraySize (8) make several arrays."""
    values = ",".join(str(i) for i in range(n))
    return run_app(
        "fail.py", "-m", "hydra/launcher=seml", "fail_on=-1", f"x={values}", *args, cwd=cwd, env=env
    )


def launch_gate(tmp_path: Path, *overrides: str, check: bool = True):
    """Launch a sweep of :data:`support.paths.GATE_APP` on the Slurm testbed without waiting for
    it (``hydra.launcher.wait=false``) in ``tmp_path``, with Hydra ``overrides`` (``x=...``, the
    ``gate=`` file, launcher fields); see :func:`run_app` for ``check``."""
    return run_app(
        GATE_APP,
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.wait=false",
        *overrides,
        cwd=tmp_path,
        check=check,
    )


def start_app(path: str, *args: str, cwd: Path) -> subprocess.Popen:
    """Start an app (a path relative to the repository) with ``args`` in the background, its
    output piped as text; the caller kills it if it is still running at the end."""
    return subprocess.Popen(
        [sys.executable, str(ROOT / path), *args],
        cwd=cwd,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def seml_ok(*args: str) -> str:
    """The output of the ``seml`` command ``args`` run in-process (typer's ``CliRunner``); the
    test fails when it does not exit 0."""
    from typer.testing import CliRunner

    from seml_hydra.cli import app

    result = CliRunner().invoke(app, list(args), prog_name="seml")
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output
