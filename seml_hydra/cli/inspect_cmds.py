"""``seml <collection> print-command | print-experiment | print-attempts | description
set|delete|list``."""

from __future__ import annotations

from typing import Annotated

import typer

from seml_hydra.cli.core import (
    COLLECTION_PANEL,
    collection_app,
    confirm_if_many,
    console,
    report_ids,
    shown,
)
from seml_hydra.cli.options import Projection, Target, Yes, num_experiments_option, on_collection
from seml_hydra.core.ranges import format_ids
from seml_hydra.core.terminal import terminal_safe

AtMost = Annotated[int, num_experiments_option("At most this many; 0 = all.", min=0)]


def _rule(title: str) -> None:
    from rich.markup import escape

    console().rule(escape(terminal_safe(title)), align="left")


@collection_app.command("print-command", rich_help_panel=COLLECTION_PANEL)
@on_collection()
def print_command(
    target: Target,
    unresolved: Annotated[
        bool,
        typer.Option(
            "--unresolved",
            help="The overrides as they were written, not the values the experiment ran with.",
        ),
    ] = False,
    num_experiments: AtMost = 0,
) -> None:
    """Print the shell command that runs each experiment by hand (the app with its overrides,
    in its working directory, without Slurm or the database; all states unless -s)."""
    from seml_hydra.manage.commands import commands_for

    found = commands_for(
        target.collection,
        target.selection.query(),
        unresolved=unresolved,
        limit=num_experiments,
    )
    for run in found:  # plain text: a command must be copied whole
        typer.echo(terminal_safe(f"# experiment {run.exp_id} ({run.status})"))
        typer.echo(terminal_safe(run.shell))


@collection_app.command("print-experiment", rich_help_panel=COLLECTION_PANEL)
@on_collection()
def print_experiment(
    target: Target,
    projection: Projection = None,
    fmt: Annotated[
        str,
        typer.Option("-F", "--format", help="yaml or json.", case_sensitive=False),
    ] = "yaml",
) -> None:
    """Print experiment documents, whole or only the `-p` keys, as YAML or JSON (all states
    unless -s)."""
    from seml_hydra.manage.describe import experiment_text, experiments, projection_fields

    fmt = fmt.lower()
    experiment_text({}, fmt)  # an unknown format fails before the query
    docs = experiments(
        target.collection, target.selection.query(), projection_fields(projection or ())
    )
    for doc in docs:
        _rule(f"experiment {doc.get('_id')} (batch {doc.get('batch_id')}, {doc.get('status')})")
        typer.echo(terminal_safe(experiment_text(doc, fmt)))


description_app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Set, delete or list the descriptions of experiments (SEML's `seml.description`).",
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode="markdown",
)
collection_app.add_typer(description_app, name="description", rich_help_panel=COLLECTION_PANEL)


@description_app.command("set")
@on_collection()
def description_set(
    target: Target,
    text: Annotated[str, typer.Argument(help="The description.", show_default=False)],
    no_resolve: Annotated[
        bool,
        typer.Option(
            "--no-resolve", help="Keep ${...} as text instead of resolving it per experiment."
        ),
    ] = False,
    yes: Yes = False,
) -> None:
    """Set the description of the selected experiments (all states unless -s); `${...}` is
    resolved against each experiment's document, e.g. "lr ${config.optimizer.lr}"."""
    from seml_hydra.manage.describe import set_description

    coll, query = target.collection, target.selection.query()
    confirm_if_many("Set the description of", coll.count_documents(query), yes)
    ids = set_description(coll, query, text, resolve=not no_resolve)
    report_ids(ids, "Set the description of {n} experiment(s): {ids}")


@description_app.command("delete")
@on_collection()
def description_delete(target: Target, yes: Yes = False) -> None:
    """Delete the description of the selected experiments (all states unless -s)."""
    from seml_hydra.manage.describe import delete_description

    coll, query = target.collection, target.selection.query()
    confirm_if_many("Delete the description of", coll.count_documents(query), yes)
    ids = delete_description(coll, query)
    report_ids(
        ids,
        "Deleted the description of {n} experiment(s): {ids}",
        none="None of the selected experiments has a description.",
    )


@description_app.command("list")
@on_collection()
def description_list(target: Target) -> None:
    """The descriptions of the selected experiments, with their ids, batches and states."""
    from rich.table import Table

    from seml_hydra.manage.describe import list_descriptions
    from seml_hydra.manage.selection import ManageError

    groups = list_descriptions(target.collection, target.selection.query())
    if not groups:
        raise ManageError("No experiments match the filters.")
    table = Table(title=shown(target.name), title_justify="left")
    for name in ("Description", "Ids", "Batches", "States"):
        table.add_column(name)
    for group in groups:
        table.add_row(
            shown(group.description) if group.description is not None else "[dim](none)[/]",
            format_ids(group.ids),
            format_ids(group.batch_ids),
            shown(", ".join(group.states)),
        )
    console().print(table)


@collection_app.command("print-attempts", rich_help_panel=COLLECTION_PANEL)
@on_collection()
def print_attempts(target: Target, num_experiments: AtMost = 0) -> None:
    """Show every run of the selected experiments (all states unless -s): the earlier attempts
    that `reset`, a new launch or a requeue kept (the last 20), then the current run; with
    their state, times, host, Slurm job, then how they ended (a KILLED run's reason, or the fail
    trace's last line) and each one's Slurm output file. Fits an 80-column terminal. Their
    metrics: `get_metrics(col, attempt=N)`."""
    from rich import box
    from rich.table import Table

    from seml_hydra.core.attempts import ended_lines, job_label, stop_label, time_label
    from seml_hydra.manage.inspection import attempt_histories
    from seml_hydra.manage.selection import ManageError

    found = attempt_histories(target.collection, target.selection.query(), num_experiments)
    if not found:
        raise ManageError("No experiments match the filters.")
    width = console().width
    for exp_id, entries in found:
        # no vertical rules; the long cells (host, job) fold: every row fits the terminal,
        # and how each run ended goes under the table, wrapped
        table = Table(
            title=f"experiment {shown(exp_id)}",
            title_justify="left",
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            collapse_padding=True,
        )
        for name in ("#", "Status", "Started", "Stopped"):
            table.add_column(name, no_wrap=True)
        for name in ("Host", "Job", "Kept by"):
            table.add_column(name, overflow="fold")
        for entry in entries:
            start = entry.get("start_time")
            table.add_row(
                shown(entry.get("attempt", "?")),
                shown(entry.get("status", "")) + (" [dim](now)[/]" if entry.get("current") else ""),
                shown(time_label(start)),
                shown(stop_label(start, entry.get("stop_time") or entry.get("heartbeat"))),
                shown(entry.get("host", "")),
                shown(job_label(entry)),
                shown(entry.get("moved_by", "")),
            )
        console().print(table)
        for line in ended_lines(entries, width):  # plain text: never rich markup
            typer.echo(terminal_safe(line))
        for entry in entries:  # plain text: a path must be copied whole
            if entry.get("output_file"):
                typer.echo(
                    terminal_safe(f"  #{entry.get('attempt', '?')} output: {entry['output_file']}")
                )
