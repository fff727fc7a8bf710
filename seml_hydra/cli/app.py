"""Assemble the ``seml`` command and its entry point."""

from __future__ import annotations

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
    exit does not wait for pymongo's monitor threads (``client.skip_exit_join``)."""
    from seml_hydra.store.db.client import skip_exit_join

    try:
        app(prog_name="seml")
    finally:
        skip_exit_join()
