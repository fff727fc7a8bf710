"""Assemble the ``seml`` command and its entry point."""

from __future__ import annotations

import sys

from seml_hydra.cli import (  # noqa: F401  (register the commands)
    collection_cmds,
    configure_cmd,
    global_cmds,
    inspect_cmds,
    results_cmd,
    sources_cmds,
    usage_cmd,
)
from seml_hydra.cli.core import app


def main() -> None:
    """Console script ``seml``. Every command has finished its writes when it returns, so the
    exit does not wait for pymongo's monitor threads (``client.skip_exit_join``). A command
    that never opened the database (``--help``, ``configure``) does not import the client
    module for that."""
    try:
        app(prog_name="seml")
    finally:
        client = sys.modules.get("seml_hydra.store.db.client")
        if client is not None:
            client.skip_exit_join()
