"""The command tree: a root group whose first argument is a command (``list``, ``queue``,
``drop``) or a collection name followed by a collection command (``seml train status``).

Instead of a required collection argument that command-free calls fill with a dummy (SEML's
way), :class:`SemlGroup` resolves the first word itself: a root command runs as usual, any
other word is taken as the collection and the rest goes to the collection group, whose
``ctx.info_name`` is then the collection. Help shows both kinds of commands; completion offers
root commands and cached collection names in the first position.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from seml_hydra.cli.chain import Chain, split_chain
from seml_hydra.core import errors, states
from seml_hydra.core.ranges import format_ids
from seml_hydra.core.terminal import terminal_safe

#: destructive commands ask for confirmation above this many experiments (SEML's threshold)
CONFIRM_THRESHOLD = 10

ROOT_PANEL = "Commands without a collection: seml COMMAND"
COLLECTION_PANEL = "Commands on a collection: seml COLLECTION COMMAND"


class SemlGroup(TyperGroup):
    """Root group: ``seml COMMAND ...`` or ``seml COLLECTION COMMAND ...``."""

    def collection_group(self) -> Any:
        # built once: help asks for it per command, and typer builds a group in ~10 ms
        group = self.__dict__.get("_collection_group")
        if group is None:
            group = self.__dict__["_collection_group"] = typer.main.get_group(collection_app)
        return group

    def collection_listing(self) -> dict[str, Any]:
        """The collection commands as ``seml --help`` lists them: name -> a command with their
        help, panel and flags but no parameters (built once; reading every command's
        parameters, as :meth:`collection_group` does, is most of the help's own time)."""
        listing = self.__dict__.get("_collection_listing")
        if listing is None:
            commands = [*map(_listed_command, collection_app.registered_commands)]
            commands += [  # the sub-groups (description): few commands, built as typer does
                typer.main.get_group_from_info(
                    info,
                    pretty_exceptions_short=collection_app.pretty_exceptions_short,
                    suggest_commands=collection_app.suggest_commands,
                    rich_markup_mode=collection_app.rich_markup_mode,
                )
                for info in collection_app.registered_groups
            ]
            listing = self.__dict__["_collection_listing"] = {c.name: c for c in commands}
        return listing

    def list_commands(self, ctx: Any) -> list[str]:
        # a name of both (clean-db) is listed once: help shows the root command's
        both = [*super().list_commands(ctx), *self.collection_listing()]
        return list(dict.fromkeys(both))

    def get_command(self, ctx: Any, name: str) -> Any:
        # used for the root's help (and by click's default completion, which shell_complete
        # replaces); a collection command runs from collection_group, through resolve_command
        return super().get_command(ctx, name) or self.collection_listing().get(name)

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[Any, Any, list[str]]:
        name = args[0]
        if name in self.commands:
            return super().resolve_command(ctx, args)
        if name.startswith("-"):
            ctx.fail(f"No such option {name!r}.")
        group = self.collection_group()
        if name in group.commands and not ctx.resilient_parsing:
            ctx.fail(f"`{name}` works on a collection: seml COLLECTION {name} ...")
        pieces = split_chain(args[1:], group.commands)
        if len(pieces) > 1 and not ctx.resilient_parsing:  # seml COLLECTION reset start
            return name, Chain(name, group, pieces), []
        return name, group, args[1:]

    def shell_complete(self, ctx: Any, incomplete: str) -> list[Any]:
        from typer._click.shell_completion import CompletionItem

        if incomplete.startswith("-"):
            return super().shell_complete(ctx, incomplete)
        # here, not at the top: it loads store.db.client (~10 ms), which `seml --help` does not need
        from seml_hydra.track.cache import cached_collections

        items = [
            CompletionItem(name, help=self.commands[name].get_short_help_str())
            for name in sorted(self.commands)
            if name.startswith(incomplete)
        ]
        items += [
            CompletionItem(name, help="collection")
            for name in cached_collections()
            if name.startswith(incomplete) and name not in self.commands
        ]
        return items

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as error:
            message = errors.user_error_message(error)
            if message is None:
                raise
            errors.print_error(message)
            raise typer.Exit(1) from None


def _listed_command(info: Any) -> Any:
    """A ``typer.main.CommandInfo`` of ``collection_app`` as a parameterless command for the
    root's help: the name, help text, panel and flags ``typer.main.get_command_from_info``
    gives the real one."""
    import inspect

    from typer.core import TyperCommand

    help_text = info.help
    help_text = inspect.getdoc(info.callback) if help_text is None else inspect.cleandoc(help_text)
    return TyperCommand(
        name=info.name or typer.main.get_command_name(info.callback.__name__),
        help=help_text,
        short_help=info.short_help,
        hidden=info.hidden,
        deprecated=info.deprecated,
        rich_markup_mode=collection_app.rich_markup_mode,
        rich_help_panel=info.rich_help_panel,
    )


app = typer.Typer(
    cls=SemlGroup,
    name="seml",
    no_args_is_help=True,
    help="Manage the experiments the seml-hydra launcher stored in MongoDB and runs on Slurm.\n\n"
    "seml COLLECTION COMMAND works on one collection, e.g. `seml train status`.",
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode="markdown",
)


def _print_version(value: bool) -> None:
    if value:
        from seml_hydra import __version__

        typer.echo(f"seml-hydra {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "-V",
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print seml-hydra's version and exit.",
    ),
) -> None:
    """Manage the experiments the seml-hydra launcher stored in MongoDB and runs on Slurm."""


collection_app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode="markdown",
)


@collection_app.callback()
def _collection(ctx: typer.Context) -> None:
    """Commands on the collection named before the command."""
    ctx.meta["seml_collection"] = ctx.info_name or ""


def collection_name(ctx: typer.Context) -> str:
    """The collection named on the command line (``seml <collection> ...``), checked here
    (``store.db.collections.validate_collection_name``: ``InvalidCollectionName``, a user error),
    when a command uses it: ``seml <collection> <command> --help`` imports no ``store``."""
    from seml_hydra.store.db.collections import validate_collection_name

    return validate_collection_name(ctx.meta["seml_collection"])


def shown(value: Any) -> str:
    """``value`` (a collection name, a state, a comment: anything a document, the database or
    Slurm gives) as text safe to print in rich markup: no terminal escape sequences or control
    characters (``track.outputs.terminal_safe``) and no rich markup (``rich.markup.escape``)."""
    from rich.markup import escape

    return escape(terminal_safe(str(value)))


def console() -> Any:
    """A rich console on the current stdout (follows CliRunner's redirection)."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def confirm_if_many(what: str, count: int | Callable[[], int], yes: bool) -> None:
    """Ask before acting on more than ``CONFIRM_THRESHOLD`` experiments (unless ``--yes``).
    ``count``: their number, or a function counting them, called only without ``--yes`` (a
    count of 100,000 experiments is a pass over their documents that ``-y`` does not need)."""
    if yes:
        return
    count = count() if callable(count) else count
    if count > CONFIRM_THRESHOLD:
        typer.confirm(f"{what} {count} experiments?", abort=True)


def report_ids(ids: Sequence[int], done: str, none: str | None = None) -> None:
    """Say what a command did to the experiments ``ids``.

    Args:
        ids: the ``_id`` s it acted on (any order; shown as ranges by ``format_ids``).
        done: the message for them, a ``str.format`` template with ``{n}`` (how many) and
            ``{ids}`` (the ranges), e.g. ``"Reset {n} experiment(s) to STAGED: {ids}"``.
        none: the message when ``ids`` is empty, e.g. ``"No experiments to reset."``; None:
            ``done`` is printed then too (with ``{n}`` 0).
    """
    if not ids and none is not None:
        console().print(none)
        return
    console().print(done.format(n=len(ids), ids=format_ids(ids)))


STATE_COLORS = {
    states.STAGED: "cyan",
    states.PENDING: "yellow",
    states.RUNNING: "blue",
    states.RESCHEDULED: "blue",
    states.COMPLETED: "green",
    states.FAILED: "red",
    states.KILLED: "red",
    states.INTERRUPTED: "magenta",
}
