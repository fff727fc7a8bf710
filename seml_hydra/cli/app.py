"""Assemble the ``seml`` command and its entry point."""

from __future__ import annotations

from . import collection_cmds, configure_cmd, global_cmds  # noqa: F401  (register the commands)
from .core import app


def main() -> None:
    """Console script ``seml``."""
    app(prog_name="seml")
