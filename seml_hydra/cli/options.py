"""The options shared by several commands, declared once (typer ``Annotated`` aliases)."""

from __future__ import annotations

from typing import Annotated

import typer

SacredId = Annotated[
    int | None,
    typer.Option(
        "-id",
        "--sacred-id",
        help="Only the experiment with this _id.",
        show_default=False,
    ),
]
BatchId = Annotated[
    int | None,
    typer.Option(
        "-b",
        "--batch-id",
        help="Only experiments of this batch (staged by one launch).",
        show_default=False,
    ),
]
States = Annotated[
    list[str] | None,
    typer.Option(
        "-s",
        "--states",
        help="Only experiments in these states (repeat the option or separate by commas), "
        "e.g. -s FAILED,KILLED. Each command has its own default.",
        metavar="STATES",
        show_default=False,
    ),
]
FilterDict = Annotated[
    str | None,
    typer.Option(
        "-fd",
        "--filter-dict",
        help='A MongoDB filter as a JSON or YAML mapping, e.g. \'{"config.model.name": "small"}\'.',
        metavar="DICT",
        show_default=False,
    ),
]
Yes = Annotated[
    bool,
    typer.Option("-y", "--yes", help="Do not ask for confirmation."),
]
