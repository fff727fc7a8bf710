"""``seml <collection> <command>``: status, start, reset, cancel, delete, hold, release,
restore-sources (download-sources), detect-killed, print-fail-trace, print-output."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from seml_hydra.cli.core import (
    COLLECTION_PANEL,
    STATE_COLORS,
    collection_app,
    collection_name,
    confirm_if_many,
    console,
    err_console,
    selection,
    shown,
)
from seml_hydra.cli.options import BatchId, FilterDict, SacredId, States, Yes
from seml_hydra.core import states

command = collection_app.command


def _open(ctx: typer.Context) -> tuple[Any, Any]:
    """(database, collection) of the command line's collection."""
    from seml_hydra.manage.experiments import connect_db, get_collection, refresh_collection_cache

    db = connect_db()
    collection = get_collection(db, collection_name(ctx))
    refresh_collection_cache([collection.name], replace=False)
    return db, collection


def _ids(ids: list[int]) -> str:
    from seml_hydra.core.ranges import format_ids

    return format_ids(ids)


def _report_detect(result: Any, name: str) -> None:
    if result.recovered:
        from seml_hydra.launch.recovery import recovered_message

        console().print(recovered_message(result.recovered, name) + ".")
    if result.warning:
        err_console().print(f"[yellow]Warning:[/] {result.warning}", markup=True)
    if result.foreign:
        from seml_hydra.manage.experiments import foreign_lines

        for line in foreign_lines(result.foreign, result.cluster):
            console().print(shown(line))  # cluster names come from the documents
    if result.killed:
        console().print(
            f"Detected {len(result.killed)} killed experiment(s): {_ids(result.killed)}"
        )
    if result.interrupted:
        console().print(
            f"{len(result.interrupted)} cancelled experiment(s) ended: "
            f"{_ids(result.interrupted)} are INTERRUPTED"
        )
    if result.unsure:
        from seml_hydra.manage.experiments import HEARTBEAT_STALE_S

        console().print(
            f"Slurm has no record of the job(s) of {_ids(result.unsure)}, but their heartbeat "
            f"is younger than {HEARTBEAT_STALE_S:.0f} s: left RUNNING, checked again next time."
        )


@command(rich_help_panel=COLLECTION_PANEL)
def status(
    ctx: typer.Context,
    sacred_id: SacredId = None,
    batch_id: BatchId = None,
    filter_states: States = None,
    filter_dict: FilterDict = None,
) -> None:
    """Counts and ids of the experiments per state (after detecting killed jobs)."""
    from rich.table import Table

    from seml_hydra.manage.experiments import MALFORMED, detect_killed, malformed_message
    from seml_hydra.manage.experiments import status as get_status

    sel = selection(sacred_id, batch_id, filter_states, filter_dict)
    _, coll = _open(ctx)
    query = sel.query()
    name = collection_name(ctx)
    _report_detect(detect_killed(coll, query), name)
    by_state = get_status(coll, query)
    if not by_state:
        console().print(f"No experiments in {name} match.")
        return
    table = Table(title=f"{name}", title_justify="left")
    table.add_column("State")
    table.add_column("Count", justify="right")
    table.add_column("Ids")
    for state, ids in by_state.items():
        color = STATE_COLORS.get(state, "white")
        table.add_row(f"[{color}]{shown(state)}[/]", str(len(ids)), _ids(ids))
    table.add_row("[bold]total[/]", str(sum(map(len, by_state.values()))), "")
    console().print(table)
    if MALFORMED in by_state:
        from rich.markup import escape

        console().print(f"[yellow]{escape(malformed_message(by_state[MALFORMED]))}[/]")


@command(rich_help_panel=COLLECTION_PANEL)
def start(
    ctx: typer.Context,
    sacred_id: SacredId = None,
    batch_id: BatchId = None,
    filter_dict: FilterDict = None,
    num_experiments: Annotated[
        int, typer.Option("-n", "--num-experiments", help="Start at most this many; 0 = all.")
    ] = 0,
) -> None:
    """Submit STAGED experiments to Slurm (e.g. after `reset`), from the database alone; also
    those an interrupted submission left PENDING without a job."""
    from seml_hydra.launch.recovery import recover_interrupted_submissions, recovered_message
    from seml_hydra.manage.experiments import start as do_start

    sel = selection(sacred_id, batch_id, None, filter_dict)
    db, coll = _open(ctx)
    name = collection_name(ctx)
    recovered = recover_interrupted_submissions(coll, sel.query())
    if recovered:
        console().print(recovered_message(recovered))
    arrays = do_start(db, name, sel.query(), limit=num_experiments)
    if not arrays:
        console().print(f"No STAGED experiments in {name} match: nothing to start.")
        return
    for array in arrays:
        console().print(
            f"Started {len(array.ids)} experiment(s) ({_ids(array.ids)}) as {array.cluster} job "
            f"{array.array_id} ({array.name}); output in {array.folder}"
        )


@command(rich_help_panel=COLLECTION_PANEL)
def reset(
    ctx: typer.Context,
    sacred_id: SacredId = None,
    batch_id: BatchId = None,
    filter_states: States = None,
    filter_dict: FilterDict = None,
    yes: Yes = False,
) -> None:
    """Put FAILED, KILLED and INTERRUPTED experiments back to STAGED (run with `start`)."""
    from seml_hydra.manage.experiments import and_
    from seml_hydra.manage.experiments import reset as do_reset

    sel = selection(sacred_id, batch_id, filter_states, filter_dict)
    allowed = [s for s in states.ALL if s not in states.ACTIVE]
    _, coll = _open(ctx)
    query = (
        sel.query(allowed=allowed)
        if sel.filter_states
        else sel.query(default_states=sorted(states.RERUNNABLE))
    )
    completed = coll.count_documents(and_(query, {"status": states.COMPLETED}))
    if completed and not yes:  # their results would be cleared
        typer.confirm(
            f"Reset {completed} COMPLETED experiment(s) and clear their results?", abort=True
        )
    confirm_if_many("Reset", coll.count_documents(query), yes)
    ids = do_reset(coll, query)
    if not ids:
        console().print("No experiments to reset.")
        return
    console().print(f"Reset {len(ids)} experiment(s) to STAGED: {_ids(ids)}")


@command(rich_help_panel=COLLECTION_PANEL)
def cancel(
    ctx: typer.Context,
    sacred_id: SacredId = None,
    batch_id: BatchId = None,
    filter_states: States = None,
    filter_dict: FilterDict = None,
    yes: Yes = False,
) -> None:
    """Cancel PENDING and RUNNING experiments: INTERRUPTED, and `scancel` of their array tasks
    (without -s, also finishes an earlier cancel that was interrupted before its `scancel`)."""
    from seml_hydra.manage.experiments import cancel as do_cancel

    sel = selection(sacred_id, batch_id, filter_states, filter_dict)
    _, coll = _open(ctx)
    query = sel.query(allowed=[s for s in states.ALL if s in states.ACTIVE])
    confirm_if_many("Cancel", coll.count_documents(query), yes)
    # without -s: the whole selection, so experiments an unfinished cancel left INTERRUPTED
    # with live tasks are found too (manage.cancel acts on active ones and those only)
    result = do_cancel(coll, query if sel.filter_states else sel.query())
    _report_strangers(result.strangers, coll.name)
    _report_cancel(result)


def _report_strangers(strangers: Any, name: str) -> None:
    """Say which jobs documents named were left alone: their comment is not the collection."""
    from seml_hydra.manage.experiments import stranger_lines

    for line in stranger_lines(strangers, name):
        console().print(line, markup=False)


def _report_foreign(foreign: Any, cluster: str | None, what: str) -> None:
    """Say which experiments of other clusters were left alone (``what``: e.g. "cancelled")."""
    from seml_hydra.core.ranges import format_ids

    for name, ids in sorted(foreign.items()):
        console().print(
            f"{len(ids)} experiment(s) run on cluster {name} ({format_ids(ids)}): not {what} "
            f"from cluster {cluster}; run the command there.",
            markup=False,
        )


def _report_cancel(result: Any) -> None:
    _report_foreign(result.foreign, result.cluster, "cancelled")
    if not result.interrupted and not result.finished:
        console().print("No PENDING or RUNNING experiments to cancel.")
        return
    done = []
    if result.interrupted:
        done.append(
            f"Cancelled {len(result.interrupted)} experiment(s) ({_ids(result.interrupted)}), "
            "now INTERRUPTED"
        )
    if result.finished:
        done.append(
            f"{'f' if done else 'F'}inished the interrupted cancel of {len(result.finished)} "
            f"INTERRUPTED experiment(s) ({_ids(result.finished)})"
        )
    tasks = ", ".join(result.cancelled_tasks) or "none"
    console().print(f"{'; '.join(done)}; Slurm tasks cancelled: {tasks}")
    if result.local_ids:
        err_console().print(
            f"[yellow]Warning:[/] experiment(s) {_ids(result.local_ids)} run with the local "
            "executor; their processes were not stopped."
        )
    if result.still_alive:
        err_console().print(
            f"[yellow]Warning:[/] Slurm still lists {', '.join(result.still_alive)}; run "
            "`status` again later."
        )


@command(rich_help_panel=COLLECTION_PANEL)
def delete(
    ctx: typer.Context,
    sacred_id: SacredId = None,
    batch_id: BatchId = None,
    filter_states: States = None,
    filter_dict: FilterDict = None,
    cancel_first: Annotated[
        bool,
        typer.Option(
            "--cancel/--no-cancel",
            help="Cancel the PENDING/RUNNING experiments' Slurm tasks before deleting them.",
        ),
    ] = True,
    yes: Yes = False,
) -> None:
    """Delete experiments (all states by default; running ones are cancelled first)."""
    from seml_hydra.manage.experiments import delete as do_delete
    from seml_hydra.manage.experiments import refresh_collection_cache

    sel = selection(sacred_id, batch_id, filter_states, filter_dict)
    db, coll = _open(ctx)
    query = sel.query()
    confirm_if_many("Delete", coll.count_documents(query), yes)
    result = do_delete(coll, query, cancel_first=cancel_first)
    if result.cancel:
        _report_foreign(result.cancel.foreign, result.cancel.cluster, "cancelled (only deleted)")
        _report_strangers(result.cancel.strangers, coll.name)
    cancelled = result.cancel.cancelled_tasks if result.cancel else []
    if cancelled:  # only tasks Slurm still listed: those already gone are not "cancelled"
        console().print(f"Cancelled {len(cancelled)} Slurm task(s) first: {', '.join(cancelled)}")
    if result.cancel and result.cancel.still_alive:
        err_console().print(
            f"[yellow]Warning:[/] Slurm still lists {', '.join(result.cancel.still_alive)}; "
            "their experiments are deleted, so they will find nothing to run."
        )
    refresh_collection_cache([collection_name(ctx)], replace=False)
    if not result.ids:
        console().print("No experiments to delete.")
        return
    console().print(f"Deleted {len(result.ids)} experiment(s): {_ids(result.ids)}")


@command(rich_help_panel=COLLECTION_PANEL)
def hold(
    ctx: typer.Context,
    sacred_id: SacredId = None,
    batch_id: BatchId = None,
    filter_dict: FilterDict = None,
) -> None:
    """Hold the pending Slurm array tasks of PENDING experiments (`scontrol hold`)."""
    from seml_hydra.manage.experiments import hold as do_hold

    sel = selection(sacred_id, batch_id, None, filter_dict)
    _, coll = _open(ctx)
    strangers: dict[str, Any] = {}
    held_now, already = do_hold(coll, sel.query(), strangers)
    _report_strangers(strangers, coll.name)
    if held_now:
        console().print(f"Held {len(held_now)} pending Slurm task(s): {', '.join(held_now)}")
    if already:
        console().print(f"Already held: {', '.join(already)}")
    if not held_now and not already:
        console().print("Nothing pending to hold.")


@command(rich_help_panel=COLLECTION_PANEL)
def release(
    ctx: typer.Context,
    sacred_id: SacredId = None,
    batch_id: BatchId = None,
    filter_dict: FilterDict = None,
) -> None:
    """Release the held Slurm array tasks of PENDING experiments (`scontrol release`)."""
    from seml_hydra.manage.experiments import release as do_release

    sel = selection(sacred_id, batch_id, None, filter_dict)
    _, coll = _open(ctx)
    strangers: dict[str, Any] = {}
    released = do_release(coll, sel.query(), strangers)
    _report_strangers(strangers, coll.name)
    if released:
        console().print(f"Released {len(released)} Slurm task(s): {', '.join(released)}")
    else:
        console().print("Nothing held to release.")


TargetDir = Annotated[
    Path, typer.Argument(help="Directory to write the sources into.", show_default=False)
]


@command(
    "download-sources",
    rich_help_panel=COLLECTION_PANEL,
    help="SEML's later name of restore-sources.",
)
@command("restore-sources", rich_help_panel=COLLECTION_PANEL)
def restore_sources(
    ctx: typer.Context,
    target: TargetDir,
    sacred_id: SacredId = None,
    batch_id: BatchId = None,
    filter_states: States = None,
    filter_dict: FilterDict = None,
    yes: Yes = False,
) -> None:
    """Write the code snapshot the selected experiments ran with into a directory (asks when
    the directory holds other files; files already restored are kept)."""
    from seml_hydra.manage.experiments import ManageError, foreign_files, snapshot_for
    from seml_hydra.manage.experiments import restore_sources as do_restore

    sel = selection(sacred_id, batch_id, filter_states, filter_dict)
    _, coll = _open(ctx)
    files = snapshot_for(coll, sel.query())
    if target.exists() and not target.is_dir():
        raise ManageError(f"{target} exists and is not a directory; name a directory.")
    foreign = foreign_files(coll, files, target) if not yes else []
    if foreign:  # a restore of this very snapshot there before (even interrupted) does not ask
        typer.confirm(
            f"{target} is not empty: {len(foreign)} file(s) there are not this snapshot's (such "
            f"as {foreign[0].relative_to(target.resolve())}); write the sources into it anyway?",
            abort=True,
        )
    written = do_restore(coll, files, target)
    kept = len(files) - len(written)
    if not written:
        console().print(
            f"The {kept} source file(s) in {target} are already the snapshot's: nothing to write."
        )
    else:
        console().print(
            f"Restored {len(written)} source file(s) into {target}"
            + (f" ({kept} already there)" if kept else "")
        )


@command("detect-killed", rich_help_panel=COLLECTION_PANEL)
def detect_killed(ctx: typer.Context) -> None:
    """Mark KILLED the PENDING/RUNNING experiments whose Slurm job is gone."""
    from seml_hydra.manage.experiments import detect_killed as do_detect

    _, coll = _open(ctx)
    result = do_detect(coll)
    _report_detect(result, collection_name(ctx))
    if not (result.killed or result.interrupted or result.warning or result.recovered):
        console().print("No killed experiments detected.")


@command("print-fail-trace", rich_help_panel=COLLECTION_PANEL)
def print_fail_trace(
    ctx: typer.Context,
    sacred_id: SacredId = None,
    batch_id: BatchId = None,
    filter_states: States = None,
    filter_dict: FilterDict = None,
) -> None:
    """Print the fail trace of FAILED, KILLED and INTERRUPTED experiments (terminal escape
    sequences and control characters removed)."""
    from seml_hydra.manage.experiments import fail_traces, terminal_safe

    sel = selection(sacred_id, batch_id, filter_states, filter_dict)
    _, coll = _open(ctx)
    default = [states.FAILED, states.KILLED, states.INTERRUPTED]
    traces = fail_traces(coll, sel.query(default_states=default))
    if not traces:
        console().print("No experiments match.")
    for exp_id, state, trace in traces:  # plain text: long lines must not be cropped
        _rule(exp_id, state)
        typer.echo(terminal_safe(trace.rstrip()) or "(no fail trace)")


def _rule(exp_id: Any, state: Any) -> None:
    """The heading of one experiment's text, its fields made safe to print (a document's
    status could hold escape sequences or rich markup)."""
    from rich.markup import escape

    from seml_hydra.manage.experiments import terminal_safe

    console().rule(escape(terminal_safe(f"experiment {exp_id} ({state})")), align="left")


@command("print-output", rich_help_panel=COLLECTION_PANEL)
def print_output(
    ctx: typer.Context,
    sacred_id: SacredId = None,
    batch_id: BatchId = None,
    filter_states: States = None,
    filter_dict: FilterDict = None,
    tail: Annotated[
        int, typer.Option("-t", "--tail", min=0, help="Only the last N lines; 0 = all.")
    ] = 0,
) -> None:
    """Print the Slurm output file of experiments (its last MiB at most; bytes that are not
    UTF-8 show as U+FFFD; terminal escape sequences and control characters removed). Only a
    file inside the experiment's output folder that belongs to you is read."""
    from rich.markup import escape

    from seml_hydra.manage.experiments import read_outputs, terminal_safe

    sel = selection(sacred_id, batch_id, filter_states, filter_dict)
    _, coll = _open(ctx)
    outputs = read_outputs(coll, sel.query(), tail=tail or None)
    if not outputs:
        console().print("No experiments match.")
    for out in outputs:
        _rule(out.exp_id, out.status)
        if out.text is None:
            about = terminal_safe(f"{out.problem}{f': {out.path}' if out.path else ''}")
            console().print(f"[dim]{escape(about)}[/]")
            continue
        if out.skipped and not tail:
            console().print(f"[dim](its first {out.skipped} bytes are left out)[/]")
        typer.echo(terminal_safe(out.text))
