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
    vary across the selection and the result fields. Rows are printed as they are read, in
    memory that does not grow with their number. Python: `seml_hydra.results_table`."""
    from dataclasses import replace

    from seml_hydra.core.terminal import terminal_safe
    from seml_hydra.manage.results_table import (
        chunks,
        csv_lines,
        json_lines,
        markdown_lines,
        results_stream,
        text_lines,
    )

    sel = target.selection
    table = results_stream(
        target.name,
        replace(sel, filter_states=()).query(),
        states=list(sel.filter_states) or None,  # None: COMPLETED unless -fd names a status
        sort=sort,
        descending=desc,
        widths=fmt is Format.table,
        db=target.db,
    )
    writers = {Format.csv: csv_lines, Format.markdown: markdown_lines, Format.json: json_lines}
    if fmt in writers:
        lines = writers[fmt](table.columns, table.rows())
        # what a forged document holds never drives the terminal (pieces end at a row's end)
        safe = terminal_safe if sys.stdout.isatty() else None
    else:  # every cell made safe by text_lines itself
        lines = text_lines(table.columns, table.rows(), table.widths, title=target.name)
        safe = None
    for piece in chunks(lines):
        typer.echo(safe(piece) if safe else piece, nl=False)
