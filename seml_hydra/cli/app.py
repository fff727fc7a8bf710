"""Assemble the ``seml`` command and its entry point."""

from __future__ import annotations

from . import collection_cmds, configure_cmd, global_cmds  # noqa: F401  (register the commands)
from .core import app


def main() -> None:
    """Console script ``seml``.

    A command that touched MongoDB would otherwise idle ~0.5 s at interpreter exit: pymongo's
    atexit hook joins its monitor threads, which sleep in 0.5 s steps. Every command has
    finished its writes when it returns, so the hook is dropped and the (daemon) monitor threads
    end with the interpreter.
    """
    import sys

    try:
        app(prog_name="seml")
    finally:
        # pymongo >= 4.9 internals; without them the hook simply stays
        hook = getattr(sys.modules.get("pymongo.synchronous.monitor"), "_shutdown_resources", None)
        if hook is not None:
            import atexit

            atexit.unregister(hook)
