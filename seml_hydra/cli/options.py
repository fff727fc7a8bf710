"""The options shared by several commands, declared once (typer ``Annotated`` aliases), and
:func:`on_collection`, the decorator that gives a collection command its selector options
(``-id``, ``-b``, ``-s``, ``-fd``), builds the selection and opens the collection, so a command
is written as ``def hold(target: Target) -> None``."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from typer.models import OptionInfo

from seml_hydra.cli.core import collection_name


def optional_option(
    kind: Any, *names: str, help: str, metavar: str | None = None, **option: Any
) -> Any:
    """An option that is unset (``None``) unless given, its default not shown in help: the
    shape every selector and ``-p`` share, declared here once.

    Args:
        kind: the value's type when given, e.g. ``int`` or ``list[str]`` (a list: the option
            may repeat).
        *names: the option's names, e.g. ``"-b", "--batch-id"``.
        help: its help line.
        metavar: the value's name in help (typer's default: the type's).
        **option: further ``typer.Option`` keywords (``min``, ``max``: a range checked when
            the command line is read).

    Returns:
        An ``Annotated[kind | None, typer.Option(...)]`` alias for the command's parameter.
    """
    option = typer.Option(*names, help=help, metavar=metavar, show_default=False, **option)
    return Annotated[kind | None, option]


#: the integers MongoDB stores (BSON int64): a larger ``-id`` or ``-b`` is a usage error naming
#: the range, not pymongo's OverflowError traceback
INT64: dict[str, Any] = {"min": -(2**63), "max": 2**63 - 1}
SacredId = optional_option(
    int, "-id", "--sacred-id", help="Only the experiment with this _id.", **INT64
)
BatchId = optional_option(
    int, "-b", "--batch-id", help="Only experiments of this batch (staged by one launch).", **INT64
)
States = optional_option(
    list[str],
    "-s",
    "--states",
    help="Only experiments in these states (repeat the option or separate by commas), "
    "e.g. -s FAILED,KILLED. Each command has its own default.",
    metavar="STATES",
)
FilterDict = optional_option(
    str,
    "-fd",
    "--filter-dict",
    help='A MongoDB filter as a JSON or YAML mapping, e.g. \'{"config.model.name": "small"}\'.',
    metavar="DICT",
)
Projection = optional_option(
    list[str],
    "-p",
    "--projection",
    help="Also show these document keys (repeat the option or separate by commas), e.g. "
    "-p config.optimizer.lr.",
    metavar="KEY",
)
Yes = Annotated[
    bool,
    typer.Option("-y", "--yes", help="Do not ask for confirmation."),
]


def num_experiments_option(help_text: str, **option: Any) -> OptionInfo:
    """The ``-n/--num-experiments`` option (an ``int``, declare it ``= 0``: 0 means all) with
    the help text of the command that uses it, e.g. ``"Start at most this many; 0 = all."``,
    for an alias ``AtMost = Annotated[int, num_experiments_option(...)]`` (an alias a type
    checker reads).

    Args:
        help_text: the option's help line.
        **option: further ``typer.Option`` keywords (e.g. ``min=0``).

    Returns:
        The ``typer.Option(...)`` of the alias.
    """
    info: OptionInfo = typer.Option("-n", "--num-experiments", help=help_text, **option)
    return info


#: the selector options, in the order help shows them: parameter name -> its option
SELECTORS: dict[str, Any] = {
    "sacred_id": SacredId,
    "batch_id": BatchId,
    "filter_states": States,
    "filter_dict": FilterDict,
}
#: the selectors of a command that picks its own states (``start``, ``hold``, ``release``)
WITHOUT_STATES = ("sacred_id", "batch_id", "filter_dict")


@dataclass(frozen=True)
class Target:
    """What a collection command works on: ``db`` (the pymongo database), ``collection`` (the
    pymongo collection named on the command line, which exists), its ``name``, and
    ``selection`` (the ``seml_hydra.manage.selection.Selection`` of the selector options)."""

    db: Any
    collection: Any
    name: str
    selection: Any


def selection(
    sacred_id: int | None = None,
    batch_id: int | None = None,
    filter_states: list[str] | None = None,
    filter_dict: str | None = None,
) -> Any:
    """The ``seml_hydra.manage.selection.Selection`` of the selector options. Raises
    ``ManageError`` for an unknown state or a ``-fd`` that is not a mapping."""
    # manage (and with it pymongo's helpers, Slurm's client) only when a command runs:
    # `seml --help` and completion stay fast
    from seml_hydra.manage.selection import Selection, parse_filter_dict, parse_states

    return Selection(
        sacred_id=sacred_id,
        batch_id=batch_id,
        filter_states=tuple(parse_states(filter_states)),
        filter_dict=parse_filter_dict(filter_dict),
    )


def open_target(ctx: typer.Context, sel: Any) -> Target:
    """Connect, open the command line's collection (``store.errors.CollectionNotFound`` when
    it does not exist), create its job indexes if missing
    (``store.db.collections.ensure_job_indexes``) and add it to the completion cache."""
    from seml_hydra.manage.selection import connect_db, get_collection
    from seml_hydra.store.db.collections import ensure_job_indexes
    from seml_hydra.track.cache import refresh_collection_cache

    db = connect_db()
    collection = get_collection(db, collection_name(ctx))
    ensure_job_indexes(collection)
    refresh_collection_cache([collection.name], replace=False)
    return Target(db, collection, collection.name, sel)


def on_collection(
    selectors: Sequence[str] = tuple(SELECTORS),
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a collection command ``f(target: Target, *arguments, **options)`` (its first
    parameter, whatever its name, receives the :class:`Target`): the command
    typer sees takes the context, ``f``'s arguments, the ``selectors`` (names of
    :data:`SELECTORS`, in that order), then ``f``'s options (its parameters with a default),
    and calls ``f`` with the :class:`Target` (selection built by :func:`selection`, collection
    opened by :func:`open_target`) and its own parameters. Typer reads the new signature
    (``__signature__``, ``__annotations__``), so ``--help`` shows the selectors as if each
    command declared them."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        own = inspect.signature(func, eval_str=True)
        params = list(own.parameters.values())[1:]  # the first one receives the Target
        at = next((i for i, p in enumerate(params) if p.default is not p.empty), len(params))
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        added = [
            inspect.Parameter(n, kind, default=None, annotation=SELECTORS[n]) for n in selectors
        ]
        ctx = inspect.Parameter("ctx", kind, annotation=typer.Context)
        signature = own.replace(parameters=[ctx, *params[:at], *added, *params[at:]])

        @functools.wraps(func)
        def command(ctx: typer.Context, **kwargs: Any) -> Any:
            chosen = {name: kwargs.pop(name) for name in selectors}
            return func(open_target(ctx, selection(**chosen)), **kwargs)

        command.__signature__ = signature  # type: ignore[attr-defined]
        command.__annotations__ = {
            **{p.name: p.annotation for p in signature.parameters.values()},
            "return": own.return_annotation,
        }
        return command

    return decorate
