"""Command chaining as SEML allows it: ``seml train reset -y start -n 2`` runs ``reset -y``,
then ``start -n 2``, on the same collection, and stops at the first that fails.

typer 0.29 vendors click without chain mode (``TyperGroup`` has no ``chain``; click's own
chain mode would forbid the ``description`` sub-group anyway), and SEML itself does not use it
either: its ``__main__.split_args`` splits ``sys.argv`` at command names and runs the app once
per piece. We do the same, but only for ``seml COLLECTION ...`` (the root's ``--help`` and
completion never get here) and more carefully: a word is a new command only where the current
command could not take it, i.e. not as the value of an option that takes one (``-s start``),
not as a positional argument the command still expects (``restore-sources start`` writes into
a directory ``start``, ``description set reset`` sets the description "reset"), not after
``--``, and after a sub-group (``description``) its sub-command comes first (``description
delete`` is not ``description`` + ``delete``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from typer.core import TyperCommand


def _takes_value(command: Any) -> set[str]:
    """The option names of ``command`` (a click command) that take a value."""
    out: set[str] = set()
    for param in getattr(command, "params", ()):
        if getattr(param, "param_type_name", "") != "option":
            continue
        if getattr(param, "is_flag", False) or getattr(param, "count", False):
            continue
        out.update(param.opts)
    return out


def _positionals(command: Any) -> float:
    """How many positional words ``command`` takes (``inf`` for a variadic argument)."""
    total = 0.0
    for param in getattr(command, "params", ()):
        if getattr(param, "param_type_name", "") == "argument":
            total += float("inf") if param.nargs < 0 else param.nargs
    return total


def split_chain(args: Sequence[str], commands: Mapping[str, Any]) -> list[list[str]]:
    """Split the words after ``seml COLLECTION`` into one list per chained command (pure).

    Args:
        args: the words, the first one a command name (else one piece: click reports it).
        commands: the collection group's ``{name: click command}`` (a sub-group has
            ``commands`` itself).

    Returns ``[args]`` when nothing is chained. ``["reset", "-y", "start", "-n", "2"]`` ->
    ``[["reset", "-y"], ["start", "-n", "2"]]``.
    """
    pieces: list[list[str]] = []
    command: Any = None
    values: set[str] = set()
    positionals = 0.0
    expecting_value = pending_group = rest_is_arguments = False
    for word in args:
        if pieces and rest_is_arguments:
            pieces[-1].append(word)
            continue
        if pieces and expecting_value:
            pieces[-1].append(word)
            expecting_value = False
            continue
        if pieces and word == "--":
            pieces[-1].append(word)
            rest_is_arguments = True
            continue
        if pieces and word.startswith("-") and len(word) > 1:
            pieces[-1].append(word)
            expecting_value = word in values and "=" not in word
            continue
        if pieces and pending_group:
            pieces[-1].append(word)
            command = getattr(command, "commands", {}).get(word)
            values, positionals = _takes_value(command), _positionals(command)
            pending_group = False
            continue
        if pieces and (positionals > 0 or word not in commands):
            pieces[-1].append(word)
            positionals -= 1
            continue
        pieces.append([word])  # a new command (or the first word)
        command = commands.get(word)
        values, positionals = _takes_value(command), _positionals(command)
        pending_group = hasattr(command, "commands")
    return pieces


class Chain(TyperCommand):
    """What the root resolves ``seml COLLECTION CMD1 ... CMD2 ...`` to: it runs each piece of
    :func:`split_chain` as ``seml COLLECTION <piece>`` through the collection ``group``, one
    after another, in the root's context; the first error stops the chain (it propagates: the
    root prints a user error in one line and exits 1, click a usage error with exit 2)."""

    def __init__(self, name: str, group: Any, pieces: Sequence[Sequence[str]]) -> None:
        super().__init__(name=name, add_help_option=False)
        self.group, self.pieces = group, [list(p) for p in pieces]

    def invoke(self, ctx: Any) -> None:
        for piece in self.pieces:
            with self.group.make_context(self.name, list(piece), parent=ctx.parent) as sub:
                self.group.invoke(sub)
