"""Where the repository and the test apps are."""

from __future__ import annotations

from pathlib import Path

#: the repository's root (the parent of ``tests/``)
ROOT = Path(__file__).resolve().parents[2]
#: the app that keeps an experiment RUNNING until its gate file exists (``tests/apps/gate.py``),
#: as a path relative to ``examples/`` (what :func:`support.run.run_app` takes)
GATE_APP = "../tests/apps/gate.py"
