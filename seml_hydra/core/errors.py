"""The one base class of every error a user can cause and fix.

A user error is a mistake in the input (a bad override, an unknown collection, a wrong id) or an
environment problem the user can act on (MongoDB or Slurm unreachable, a file that cannot be
written). The launcher and the ``seml`` command catch :class:`UserError` and print its message as
one line, without a traceback, and exit with status 1; any other exception is a bug and keeps its
traceback. Each layer's error (``LaunchError``, ``DatabaseError``, ``ManageError``,
``SlurmError``, ``SubmissionError``, ``SourceSnapshotError``, ``TunnelError``...) derives from it.
"""

from __future__ import annotations

from typing import Any


class UserError(Exception):
    """An error the user can fix; its message says what was wrong and what to do."""


def user_error_message(error: BaseException) -> str | None:
    """The one-line message to show for ``error``, or None when it is a bug (to re-raise).

    Args:
        error: any exception.

    Returns:
        ``str(error)`` for a :class:`UserError`; ``"MongoDB: <error>"`` for an error raised by
        pymongo/gridfs/bson (the server refused something: an environment problem); None for
        everything else. The text is plain (not escaped for rich markup).
    """
    if isinstance(error, UserError):
        return str(error)
    module = type(error).__module__ or ""
    if module.startswith(("pymongo", "gridfs", "bson")):
        return f"MongoDB: {error}"
    return None


def err_console() -> Any:
    """A rich console on the current stderr (warnings and errors): no highlighting, long lines
    not cut."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def print_error(message: str) -> None:
    """Print ``Error: <message>`` on stderr, ``Error:`` in bold red (rich markup in
    ``message`` is not interpreted): how the launcher and the ``seml`` command show a user
    error (:func:`user_error_message`)."""
    from rich.markup import escape

    err_console().print(f"[bold red]Error:[/] {escape(message)}", markup=True)
