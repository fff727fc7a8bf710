"""Small importable projects and imports in a fresh interpreter (code snapshots, bytecode)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

#: a module of :func:`module_project`: ``VALUE`` and ``where()``, the file its code names
MODULE_SOURCE = (
    "VALUE = 41\n\n\ndef where():\n    import inspect\n    return inspect.getsourcefile(where)\n"
)


def import_fresh(directory: Path, name: str) -> tuple[str, list[str]]:
    """Import ``name`` with ``directory`` first on ``sys.path`` in a fresh interpreter that
    writes bytecode; ``(its VALUE and where(), the files it compiled)``."""
    code = textwrap.dedent(
        f"""
        import builtins, sys
        compiled = []
        real = builtins.compile
        def recording(source, filename, *args, **kwargs):
            compiled.append(str(filename))
            return real(source, filename, *args, **kwargs)
        builtins.compile = recording
        sys.path.insert(0, {str(directory)!r})
        import {name} as module
        print(module.VALUE, module.where())
        print(*[f for f in compiled if f.startswith({str(directory)!r})])
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout.split("\n")
    return out[0], out[1].split()


def module_project(root: Path, source: str = MODULE_SOURCE) -> Path:
    """A project under ``root`` with the package ``pkg`` and its module ``pkg/mod.py``
    (``source``); returns ``root``."""
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "mod.py").write_text(source)
    return root
