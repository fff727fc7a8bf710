"""The ``seml`` companion command: manage the experiments the launcher stored.

``seml list|queue|drop ...`` work without a collection; everything else is
``seml <collection> <command> ...``. Importing this package (``seml --help``, shell
completion) loads typer and rich only; each command imports pymongo, submitit... when it runs.
"""

from __future__ import annotations

from seml_hydra.cli.app import app, main

__all__ = ["app", "main"]
