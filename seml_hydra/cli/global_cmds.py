"""``seml list``, ``seml queue``, ``seml drop``: commands without a collection."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from seml_hydra.cli.core import ROOT_PANEL, STATE_COLORS, app, console, shown
from seml_hydra.cli.options import Yes
from seml_hydra.core import states
from seml_hydra.core.ranges import format_ids
from seml_hydra.core.shell import seml_for
from seml_hydra.core.terminal import terminal_safe

command = app.command


@command("list", rich_help_panel=ROOT_PANEL)
def list_(
    pattern: Annotated[
        str | None,
        typer.Argument(help="Only collections whose name matches this regular expression."),
    ] = None,
) -> None:
    """Collections with their experiment counts per state."""
    from rich.table import Table

    from seml_hydra.manage.describe import collection_descriptions
    from seml_hydra.manage.inspection import list_collections
    from seml_hydra.manage.selection import connect_db
    from seml_hydra.track.jobs import MALFORMED

    db = connect_db()
    rows = list_collections(db, pattern)
    if not rows:
        where = f" matching {pattern!r}" if pattern else ""
        console().print(f"No experiment collections{where} in database {db.name!r}.")
        return
    present = [s for s in states.ALL if any(r.counts.get(s) for r in rows)]
    others = sorted({s for r in rows for s in r.counts} - set(states.ALL))
    table = Table(title=f"database {shown(db.name)}", title_justify="left")
    table.add_column("Collection", no_wrap=True, overflow="fold")
    for s in [*present, *others]:
        table.add_column(f"[{STATE_COLORS.get(s, 'white')}]{shown(s)}[/]", justify="right")
    table.add_column("Total", justify="right")
    descriptions = collection_descriptions(db, [r.name for r in rows])
    if descriptions:
        table.add_column("Descriptions")
    for r in rows:
        cells = [shown(r.name), *[str(r.counts.get(s, 0)) for s in [*present, *others]]]
        cells.append(str(r.total))
        if descriptions:
            cells.append(shown(", ".join(descriptions.get(r.name, []))))
        table.add_row(*cells)
    console().print(table)
    malformed = [f"{r.name} ({r.counts[MALFORMED]})" for r in rows if r.counts.get(MALFORMED)]
    if malformed:
        from rich.markup import escape

        console().print(
            "[yellow]"
            + escape(
                "Experiments with a malformed status (not a state name) in "
                f"{', '.join(malformed)}: `seml <collection> status` lists their ids."
            )
            + "[/]"
        )


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = int(seconds)
    days, s = divmod(s, 86400)
    text = f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}-{text}" if days else text


def _queue_table(rows: list[Any]) -> Any:
    from rich.table import Table

    table = Table()
    for name in ("Collection", "Job", "State", "Experiments", "Run time", "Nodes / reason"):
        table.add_column(name)
    for r in sorted(rows, key=lambda r: (r.collection or "~", r.job_id)):
        where = r.nodes if r.state == "RUNNING" else (r.reason or r.nodes or "")
        if r.state == "PENDING" and r.dependency:
            where = f"{where} ({r.dependency})" if where else r.dependency
        table.add_row(
            shown(r.collection) if r.collection else "[dim](none)[/]",
            shown(r.job_id),
            shown(r.state),
            "[yellow]none (orphan)[/]" if r.orphan else format_ids(r.exp_ids),
            _duration(r.elapsed_s),
            shown(where or ""),
        )
    return table


@command(rich_help_panel=ROOT_PANEL)
def queue(
    job_ids: Annotated[
        list[str] | None, typer.Argument(help="Only these Slurm jobs.", show_default=False)
    ] = None,
    all_jobs: Annotated[
        bool, typer.Option("--all", help="Also your jobs that belong to no collection.")
    ] = False,
    watch: Annotated[
        bool, typer.Option("-w", "--watch", help="Refresh every few seconds until Ctrl-C.")
    ] = False,
    slurm_states: Annotated[
        list[str] | None,
        typer.Option(
            "-s",
            "--states",
            help="Only jobs in these Slurm states, e.g. -s PENDING,RUNNING.",
            metavar="STATES",
            show_default=False,
        ),
    ] = None,
    interval: Annotated[float, typer.Option(help="Seconds between refreshes with --watch.")] = 2.0,
    cancel_orphans: Annotated[
        bool,
        typer.Option(
            "--cancel-orphans",
            help="Cancel the arrays of a collection that no experiment names any more (asks "
            "first).",
        ),
    ] = False,
    yes: Yes = False,
) -> None:
    """Your Slurm jobs by collection, with their experiments, run time, nodes or pending reason.

    An array whose collection has no experiment naming it (deleted while it was submitted)
    shows "none (orphan)"; --cancel-orphans cancels such arrays."""
    import re

    from seml_hydra.manage.inspection import queue as get_queue
    from seml_hydra.manage.selection import ManageError, connect_db
    from seml_hydra.slurm.parse import parse_job_id

    for job in job_ids or ():
        try:
            parse_job_id(job)
        except ValueError:
            raise ManageError(
                f"{job!r} is not a Slurm job id (e.g. 1234 or 1234_5); `seml queue` lists jobs, "
                f"`{seml_for(job)} status` shows a collection."
            ) from None
    wanted = [p for v in slurm_states or () for p in re.split(r"[,\s]+", v.upper()) if p]
    db = connect_db()

    def rows() -> list[Any]:
        return get_queue(db, job_ids, all_jobs=all_jobs, slurm_states=wanted or None)

    if cancel_orphans:
        if watch:
            raise ManageError("--cancel-orphans cancels once: leave out --watch.")
        _cancel_orphans(rows(), yes)
        return
    if not watch:
        found = rows()
        if not found:
            console().print("No jobs.")
            return
        console().print(_queue_table(found))
        orphans = sorted({r.array_id for r in found if r.orphan}, key=int)
        if orphans:
            console().print(
                f"[yellow]{len(orphans)} array(s) run no experiment: their collection names none "
                "(deleted while the launch submitted them). Cancel them with "
                "`seml queue --cancel-orphans`.[/]"
            )
        return
    import time

    from rich.live import Live

    out = console()
    try:
        if not out.is_terminal:  # a pipe or a file: one table per refresh
            while True:
                out.print(_queue_table(rows()))
                time.sleep(interval)
        with Live(_queue_table(rows()), console=out, auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                live.update(_queue_table(rows()), refresh=True)
    except KeyboardInterrupt:
        return


def _cancel_orphans(rows: list[Any], yes: bool) -> None:
    """``seml queue --cancel-orphans``: scancel the arrays of ``rows`` flagged orphan, after
    asking (unless ``yes``)."""
    from seml_hydra.manage.selection import ManageError
    from seml_hydra.slurm import client as slurm

    of = {r.array_id: r.collection for r in rows if r.orphan}
    if not of:
        console().print("No orphan arrays: every array of a collection runs its experiments.")
        return
    arrays = sorted(of, key=int)
    listing = ", ".join(f"{a} ({terminal_safe(str(of[a]))})" for a in arrays)
    if not yes:
        typer.confirm(f"Cancel Slurm array(s) {listing}, which no experiment names?", abort=True)
    try:
        slurm.scancel(arrays)
    except slurm.SlurmError as error:
        raise ManageError(f"scancel failed: {error}; nothing else was changed.") from None
    console().print(f"Cancelled {len(arrays)} orphan array(s): {shown(', '.join(arrays))}.")


@command(rich_help_panel=ROOT_PANEL)
def drop(
    pattern: Annotated[
        str, typer.Argument(help="Drop the collections whose whole name matches this regex.")
    ],
    yes: Yes = False,
) -> None:
    """Drop collections (asks first; cancels their PENDING and RUNNING experiments)."""
    from seml_hydra.manage.inspection import list_collections
    from seml_hydra.manage.lifecycle import drop as do_drop
    from seml_hydra.manage.lifecycle import matching_collections
    from seml_hydra.manage.selection import connect_db

    db = connect_db()
    names = matching_collections(db, pattern)
    if not names:
        console().print(f"No collection matches {pattern!r}.")
        return
    counts = {c.name: c.total for c in list_collections(db)}
    listing = ", ".join(f"{terminal_safe(n)} ({counts.get(n, 0)} experiments)" for n in names)
    if not yes:
        typer.confirm(f"Drop {listing}?", abort=True)
    do_drop(db, names)
    console().print(f"Dropped {', '.join(map(shown, names))}.")
