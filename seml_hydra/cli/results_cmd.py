"""``seml <collection> results``: the results table (``manage.results_table``)."""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated

import typer

from seml_hydra.cli.collection_cmds import command
from seml_hydra.cli.options import Target, on_collection


class Format(str, Enum):
    """How ``results`` prints the table."""

    table = "table"
    csv = "csv"
    markdown = "markdown"
    json = "json"


@command()
@on_collection()
def results(
    target: Target,
    sort: Annotated[
        str | None,
        typer.Option(
            "--sort",
            help="Sort by this column, e.g. result.acc or config.lr (default: _id).",
            show_default=False,
        ),
    ] = None,
    desc: Annotated[bool, typer.Option("--desc", help="Sort largest first.")] = False,
    fmt: Annotated[
        Format, typer.Option("--format", "-f", help="How to print the table.")
    ] = Format.table,
) -> None:
    """One row per experiment (COMPLETED ones unless -s says otherwise): the config keys that
    vary across the selection and the result fields. Python: `seml_hydra.results_table`."""
    from dataclasses import replace

    from seml_hydra.core.terminal import terminal_safe
    from seml_hydra.manage.results_table import (
        results_table,
        to_csv,
        to_json,
        to_markdown,
        to_text,
    )

    sel = target.selection
    table = results_table(
        target.name,
        replace(sel, filter_states=()).query(),
        states=list(sel.filter_states) or None,  # None: COMPLETED unless -fd names a status
        sort=sort,
        descending=desc,
        db=target.db,
    )
    writers = {Format.csv: to_csv, Format.markdown: to_markdown, Format.json: to_json}
    if fmt in writers:
        text = writers[fmt](table.columns, table.rows)
        if sys.stdout.isatty():  # what a forged document holds never drives the terminal
            text = terminal_safe(text)
    else:  # every cell made safe by to_text itself
        text = to_text(table.columns, table.rows, title=target.name)
    typer.echo(text, nl=False)
