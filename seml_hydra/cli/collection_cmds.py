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
    confirm_if_many,
    console,
    err_console,
    shown,
)
from seml_hydra.cli.options import WITHOUT_STATES, Target, Yes, on_collection
from seml_hydra.core import states
from seml_hydra.core.ranges import format_ids as _ids
from seml_hydra.track.outputs import terminal_safe
from seml_hydra.track.query import and_


def command(name: str | None = None, **kwargs: Any) -> Any:
    """Register a command of ``seml <collection> ...`` (in the collection commands' help panel)."""
    return collection_app.command(name, rich_help_panel=COLLECTION_PANEL, **kwargs)


def _report_detect(result: Any, name: str) -> None:
    from seml_hydra.track.killed import recovered_message

    if result.recovered:
        console().print(
            recovered_message(result.recovered, f"submit them with `seml {name} start`.")
        )
    if result.warning:
        err_console().print(f"[yellow]Warning:[/] {result.warning}", markup=True)
    if result.foreign:
        from seml_hydra.track.jobs import foreign_lines

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
        from seml_hydra.track.jobs import HEARTBEAT_STALE_S

        console().print(
            f"Slurm has no record of the job(s) of {_ids(result.unsure)}, but their heartbeat "
            f"is younger than {HEARTBEAT_STALE_S:.0f} s: left RUNNING, checked again next time."
        )


def _detect(collection: Any, query: Any) -> Any:
    """``track.killed.detect_killed`` of the selected experiments, after putting back to STAGED
    those an interrupted submission left PENDING without a job
    (``launch.submit.recover_interrupted_submissions``)."""
    from seml_hydra.launch.recovery import recover_interrupted_submissions
    from seml_hydra.track.killed import detect_killed as detect

    return detect(collection, query, recover=recover_interrupted_submissions)


def _on_pending(act: Any, target: Target) -> Any:
    """``act(collection, query, strangers)`` (``manage.cancel.hold`` or ``release``) on the
    selected experiments, then say which jobs were left alone as not the collection's."""
    strangers: dict[str, Any] = {}
    done = act(target.collection, target.selection.query(), strangers)
    _report_strangers(strangers, target.name)
    return done


@command()
@on_collection()
def status(target: Target) -> None:
    """Counts and ids of the experiments per state (after detecting killed jobs)."""
    import shutil

    from rich.table import Table

    from seml_hydra.manage.inspection import status as get_status
    from seml_hydra.manage.inspection import stuck_messages
    from seml_hydra.manage.selection import malformed_message
    from seml_hydra.track.jobs import MALFORMED

    query, name = target.selection.query(), target.name
    _report_detect(_detect(target.collection, query), name)
    by_state = get_status(target.collection, query)
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
    if by_state.get(states.PENDING) and shutil.which("squeue"):
        for message in stuck_messages(target.collection, by_state[states.PENDING], name):
            console().print(f"[yellow]{shown(message)}[/]")
    if MALFORMED in by_state:
        from rich.markup import escape

        console().print(f"[yellow]{escape(malformed_message(by_state[MALFORMED]))}[/]")


@command()
@on_collection(WITHOUT_STATES)
def start(
    target: Target,
    num_experiments: Annotated[
        int, typer.Option("-n", "--num-experiments", help="Start at most this many; 0 = all.")
    ] = 0,
) -> None:
    """Submit STAGED experiments to Slurm (e.g. after `reset`), from the database alone; also
    those an interrupted submission left PENDING without a job."""
    from seml_hydra.launch.recovery import recover_interrupted_submissions
    from seml_hydra.manage.start import start as do_start
    from seml_hydra.track.killed import recovered_message

    sel, name = target.selection, target.name
    recovered = recover_interrupted_submissions(target.collection, sel.query())
    if recovered:
        console().print(recovered_message(recovered))
    arrays = do_start(target.db, name, sel.query(), limit=num_experiments)
    if not arrays:
        console().print(f"No STAGED experiments in {name} match: nothing to start.")
        return
    for array in arrays:
        console().print(
            f"Started {len(array.ids)} experiment(s) ({_ids(array.ids)}) as {array.cluster} job "
            f"{array.array_id} ({array.name}); output in {array.folder}"
        )


@command()
@on_collection()
def reset(target: Target, yes: Yes = False) -> None:
    """Put FAILED, KILLED and INTERRUPTED experiments back to STAGED (run with `start`)."""
    from seml_hydra.manage.lifecycle import reset as do_reset

    sel, coll = target.selection, target.collection
    allowed = [s for s in states.ALL if s not in states.ACTIVE]
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


@command()
@on_collection()
def cancel(target: Target, yes: Yes = False) -> None:
    """Cancel PENDING and RUNNING experiments: INTERRUPTED, and `scancel` of their array tasks
    (without -s, also finishes an earlier cancel that was interrupted before its `scancel`)."""
    from seml_hydra.manage.cancel import cancel as do_cancel

    sel, coll = target.selection, target.collection
    query = sel.query(allowed=[s for s in states.ALL if s in states.ACTIVE])
    confirm_if_many("Cancel", coll.count_documents(query), yes)
    # without -s: the whole selection, so experiments an unfinished cancel left INTERRUPTED
    # with live tasks are found too (manage.cancel acts on active ones and those only)
    result = do_cancel(coll, query if sel.filter_states else sel.query())
    _report_strangers(result.strangers, coll.name)
    _report_cancel(result)


def _report_strangers(strangers: Any, name: str) -> None:
    """Say which jobs documents named were left alone: their comment is not the collection."""
    from seml_hydra.manage.cancel import stranger_lines

    for line in stranger_lines(strangers, name):
        console().print(line, markup=False)


def _report_foreign(foreign: Any, cluster: str | None, what: str) -> None:
    """Say which experiments of other clusters were left alone (``what``: e.g. "cancelled")."""
    for name, ids in sorted(foreign.items()):
        console().print(
            f"{len(ids)} experiment(s) run on cluster {name} ({_ids(ids)}): not {what} "
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


@command()
@on_collection()
def delete(
    target: Target,
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
    from seml_hydra.manage.lifecycle import delete as do_delete
    from seml_hydra.track.cache import refresh_collection_cache

    coll = target.collection
    query = target.selection.query()
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
    refresh_collection_cache([target.name], replace=False)
    if not result.ids:
        console().print("No experiments to delete.")
        return
    console().print(f"Deleted {len(result.ids)} experiment(s): {_ids(result.ids)}")


@command()
@on_collection(WITHOUT_STATES)
def hold(target: Target) -> None:
    """Hold the pending Slurm array tasks of PENDING experiments (`scontrol hold`)."""
    from seml_hydra.manage.cancel import hold as do_hold

    held_now, already = _on_pending(do_hold, target)
    if held_now:
        console().print(f"Held {len(held_now)} pending Slurm task(s): {', '.join(held_now)}")
    if already:
        console().print(f"Already held: {', '.join(already)}")
    if not held_now and not already:
        console().print("Nothing pending to hold.")


@command()
@on_collection(WITHOUT_STATES)
def release(target: Target) -> None:
    """Release the held Slurm array tasks of PENDING experiments (`scontrol release`)."""
    from seml_hydra.manage.cancel import release as do_release

    released = _on_pending(do_release, target)
    if released:
        console().print(f"Released {len(released)} Slurm task(s): {', '.join(released)}")
    else:
        console().print("Nothing held to release.")


TargetDir = Annotated[
    Path, typer.Argument(help="Directory to write the sources into.", show_default=False)
]


@command("download-sources", help="SEML's later name of restore-sources.")
@command("restore-sources")
@on_collection()
def restore_sources(on: Target, target: TargetDir, yes: Yes = False) -> None:
    """Write the code snapshot the selected experiments ran with into a directory (asks when
    the directory holds other files; files already restored are kept)."""
    from seml_hydra.manage.inspection import foreign_files, snapshot_for
    from seml_hydra.manage.inspection import restore_sources as do_restore
    from seml_hydra.manage.selection import ManageError

    coll = on.collection
    files = snapshot_for(coll, on.selection.query())
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


@command("detect-killed")
@on_collection(())
def detect_killed(target: Target) -> None:
    """Mark KILLED the PENDING/RUNNING experiments whose Slurm job is gone."""
    result = _detect(target.collection, None)
    _report_detect(result, target.name)
    if not (result.killed or result.interrupted or result.warning or result.recovered):
        console().print("No killed experiments detected.")


@command("print-fail-trace")
@on_collection()
def print_fail_trace(target: Target) -> None:
    """Print the fail trace of FAILED, KILLED and INTERRUPTED experiments (terminal escape
    sequences and control characters removed)."""
    from seml_hydra.manage.inspection import fail_traces

    default = [states.FAILED, states.KILLED, states.INTERRUPTED]
    traces = fail_traces(target.collection, target.selection.query(default_states=default))
    if not traces:
        console().print("No experiments match.")
    for exp_id, state, trace in traces:  # plain text: long lines must not be cropped
        _rule(exp_id, state)
        typer.echo(terminal_safe(trace.rstrip()) or "(no fail trace)")


def _rule(exp_id: Any, state: Any) -> None:
    """The heading of one experiment's text, its fields made safe to print (a document's
    status could hold escape sequences or rich markup)."""
    from rich.markup import escape

    console().rule(escape(terminal_safe(f"experiment {exp_id} ({state})")), align="left")


@command("print-output")
@on_collection()
def print_output(
    target: Target,
    tail: Annotated[
        int, typer.Option("-t", "--tail", min=0, help="Only the last N lines; 0 = all.")
    ] = 0,
) -> None:
    """Print the Slurm output file of experiments (its last MiB at most; bytes that are not
    UTF-8 show as U+FFFD; terminal escape sequences and control characters removed). Only a
    file inside the experiment's output folder that belongs to you is read."""
    from rich.markup import escape

    from seml_hydra.manage.inspection import read_outputs

    outputs = read_outputs(target.collection, target.selection.query(), tail=tail or None)
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
