"""``seml <collection> <command>``: status, start, reset, cancel, delete, hold, release,
restore-sources (download-sources), detect-killed, print-fail-trace, print-output
(print-command, print-experiment and description: ``cli.inspect_cmds``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from seml_hydra.cli.core import (
    COLLECTION_PANEL,
    STATE_COLORS,
    collection_app,
    confirm_if_many,
    console,
    report_ids,
    shown,
)
from seml_hydra.cli.options import (
    WITHOUT_STATES,
    Projection,
    Target,
    Yes,
    num_experiments_option,
    on_collection,
)
from seml_hydra.core import states
from seml_hydra.core.errors import err_console
from seml_hydra.core.ranges import format_ids as _ids
from seml_hydra.core.shell import seml_for
from seml_hydra.core.terminal import terminal_safe


def command(name: str | None = None, **kwargs: Any) -> Any:
    """Register a command of ``seml <collection> ...`` (in the collection commands' help panel)."""
    return collection_app.command(name, rich_help_panel=COLLECTION_PANEL, **kwargs)


def _report_detect(result: Any, name: str) -> None:
    from seml_hydra.track.killed import recovered_message

    if result.recovered:
        console().print(
            recovered_message(result.recovered, f"submit them with `{seml_for(name)} start`.")
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
    (``launch.submit.recover_interrupted_submissions``). That recovery (and its import of the
    launcher's submission code) is skipped when no selected experiment carries a submission
    mark (``slurm.0.submitting``, a sparse index): it would find nothing to recover."""
    from seml_hydra.track.killed import detect_killed as detect
    from seml_hydra.track.query import and_

    marked = and_(query or {}, {"slurm.0.submitting": {"$exists": True}})
    if collection.find_one(marked, {"_id": 1}) is None:
        return detect(collection, query)
    from seml_hydra.launch.recovery import recover_interrupted_submissions

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
def status(target: Target, projection: Projection = None) -> None:
    """Counts and ids of the experiments per state (after detecting killed jobs), with their
    descriptions and the values of the `-p` keys, and why pending jobs do not start."""
    import shutil

    from rich.table import Table

    from seml_hydra.manage.describe import group_rows, projection_fields
    from seml_hydra.manage.selection import malformed_message
    from seml_hydra.manage.status_view import pruned_ids, status_table, stuck_messages
    from seml_hydra.track.jobs import MALFORMED

    query, name = target.selection.query(), target.name
    keys = projection_fields(projection or ())
    _report_detect(_detect(target.collection, query), name)
    groups, arrays = status_table(target.collection, query, keys)  # index keys, else 1 aggregate
    rows = group_rows(groups, keys)
    if not rows:
        console().print(f"No experiments in {name} match.")
        return
    described = any(r.descriptions for r in rows)
    table = Table(title=f"{name}", title_justify="left")
    table.add_column("State")
    table.add_column("Count", justify="right")
    table.add_column("Ids")
    if described:
        table.add_column("Descriptions")
    for key in keys:
        table.add_column(shown(key))
    for row in rows:
        color = STATE_COLORS.get(row.state, "white")
        cells = [f"[{color}]{shown(row.state)}[/]", str(len(row.ids)), _ids(row.ids)]
        if described:
            cells.append(shown(", ".join(row.descriptions)))
        cells += [shown(", ".join(row.values[key])) for key in keys]
        table.add_row(*cells)
        pruned = pruned_ids(target.collection, query) if row.state == states.COMPLETED else []
        if pruned:  # stopped early (seml_hydra.report): part of the COMPLETED count
            table.add_row(f"[{color}]  of which pruned[/]", str(len(pruned)), _ids(pruned))
    table.add_row("[bold]total[/]", str(sum(len(r.ids) for r in rows)), "")
    console().print(table)
    if any(r.state == states.INTERRUPTED for r in rows):
        from seml_hydra.manage.status_view import fail_fast_stops

        for reason, ids in fail_fast_stops(target.collection, query):
            console().print(f"[yellow]{_ids(ids)} stopped by {shown(reason)}[/]")
    if arrays and shutil.which("squeue"):
        for message in stuck_messages(arrays, name):
            console().print(f"[yellow]{shown(message)}[/]")
    malformed = [r.ids for r in rows if r.state == MALFORMED]
    if malformed:
        from rich.markup import escape

        console().print(f"[yellow]{escape(malformed_message(malformed[0]))}[/]")


WorkerGpus = Annotated[
    str | None,
    typer.Option(
        "--worker-gpus",
        help='GPU ids this worker uses (CUDA_VISIBLE_DEVICES), e.g. "0,1".',
        show_default=False,
    ),
]
StealSlurm = Annotated[
    bool,
    typer.Option(
        "--steal-slurm",
        help="With --local: also take PENDING experiments whose Slurm array task has not "
        "started (that task is removed from the array).",
    ),
]
StartAtMost = Annotated[int, num_experiments_option("Start at most this many; 0 = all.")]
RunAtMost = Annotated[int, num_experiments_option("Run at most this many; 0 = all.")]


@command()
@on_collection(WITHOUT_STATES)
def start(
    target: Target,
    num_experiments: StartAtMost = 0,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            help="Run the one experiment -id N here in the foreground (no Slurm), output to "
            "the terminal; recorded in its document like any run.",
        ),
    ] = False,
    post_mortem: Annotated[
        bool,
        typer.Option("--post-mortem", help="With --debug/--local: open pdb on an exception."),
    ] = False,
    local: Annotated[
        bool,
        typer.Option(
            "--local",
            help="Run the STAGED experiments one after another in this process (a worker, "
            "e.g. inside an salloc), each claimed atomically.",
        ),
    ] = False,
    worker_gpus: WorkerGpus = None,
    steal_slurm: StealSlurm = False,
    max_failures: Annotated[
        int | None,
        typer.Option(
            "--max-failures",
            help="Fail-fast: once N of the experiments submitted now ended FAILED, stop the "
            "others (INTERRUPTED, running ones cancelled). Default: each launch's "
            "hydra.launcher.max_failures.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Submit STAGED experiments to Slurm (e.g. after `reset`), from the database alone; also
    those an interrupted submission left PENDING without a job. With --debug or --local, run
    them here instead."""
    from seml_hydra.manage.local import check_options

    check_options(
        debug=debug,
        local=local,
        post_mortem=post_mortem,
        worker_gpus=worker_gpus,
        sacred_id=target.selection.sacred_id,
        steal_slurm=steal_slurm,
        max_failures=max_failures,
    )
    if debug:
        return _debug(target, post_mortem)
    if local:
        return _work(target, num_experiments, worker_gpus, post_mortem, steal_slurm)
    from seml_hydra.launch.recovery import recover_interrupted_submissions
    from seml_hydra.launch.submit import array_note
    from seml_hydra.manage.start import fail_fast_lines
    from seml_hydra.manage.start import start as do_start
    from seml_hydra.track.killed import recovered_message

    sel, name = target.selection, target.name
    recovered = recover_interrupted_submissions(target.collection, sel.query())
    if recovered:
        console().print(recovered_message(recovered))
    arrays = do_start(
        target.db, name, sel.query(), limit=num_experiments, max_failures=max_failures
    )
    if not arrays:
        console().print(f"No STAGED experiments in {name} match: nothing to start.")
        return
    for array in arrays:
        console().print(
            f"Started {len(array.ids)} experiment(s) ({_ids(array.ids)}) as {array.cluster} job "
            f"{array.array_id} ({array.name}{array_note(array.label, array.part)}); output in {array.folder}"
        )
    for line in fail_fast_lines(arrays, max_failures):
        console().print(line)


def _debug(target: Target, post_mortem: bool) -> None:
    """``start --debug``: run the selected STAGED experiment in the foreground; exit 1 when it
    fails."""
    import os

    from seml_hydra.core.scoped import temporarily
    from seml_hydra.job.worker import local_job_environment, run_local
    from seml_hydra.manage.local import debug_document

    doc = debug_document(target.collection, target.selection.query(), target.name)
    console().print(f"Running experiment {doc['_id']} of {target.name} here (--debug)")
    with temporarily(os.environ, local_job_environment(os.getpid())):
        outcome = run_local(target.db, target.name, doc, pid=os.getpid(), post_mortem=post_mortem)
    console().print(f"Experiment {doc['_id']}: {outcome}", markup=False)
    if outcome != states.COMPLETED:
        raise typer.Exit(1)


def _work(
    target: Target, limit: int, gpus: str | None, post_mortem: bool, steal_slurm: bool
) -> None:
    """``start --local`` / ``launch-worker``: run STAGED experiments until none is left or
    ``limit`` ran; exit 1 when none could be run or one failed."""
    from seml_hydra.job.worker import run_worker
    from seml_hydra.manage.local import SlurmStealer, check_runnable

    query = target.selection.query()
    check_runnable(target.collection, query, target.name, steal_slurm=steal_slurm)
    steal = SlurmStealer(target.collection, target.name) if steal_slurm else None

    def started(exp_id: Any) -> None:
        console().print(f"Worker: running experiment {exp_id} of {target.name}")

    report = run_worker(
        target.db,
        target.name,
        query,
        limit=limit,
        gpus=gpus,
        post_mortem=post_mortem,
        on_start=started,
        steal=steal,
    )
    if steal is not None and steal.cancelled:
        console().print(
            f"Removed {len(steal.cancelled)} Slurm task(s) from their array: "
            f"{', '.join(steal.cancelled)}"
        )
    for problem in steal.problems if steal is not None else []:
        err_console().print(f"Warning: {problem}", markup=False)
    failed = [i for i, outcome in report.ran if outcome != states.COMPLETED]
    console().print(
        f"Worker done: ran {len(report.ran)} experiment(s)"
        + (f" ({_ids([i for i, _ in report.ran])})" if report.ran else "")
        + (f", {len(failed)} FAILED ({_ids(failed)})" if failed else "")
    )
    if failed or not report.ran:
        raise typer.Exit(1)


@command("launch-worker")
@on_collection(WITHOUT_STATES)
def launch_worker(
    target: Target,
    num_experiments: RunAtMost = 0,
    worker_gpus: WorkerGpus = None,
    post_mortem: Annotated[
        bool, typer.Option("--post-mortem", help="Open pdb on an exception.")
    ] = False,
    steal_slurm: StealSlurm = False,
) -> None:
    """Run STAGED experiments one after another in this process (SEML's launch-worker; the
    same as `start --local`)."""
    _work(target, num_experiments, worker_gpus, post_mortem, steal_slurm)


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
    from seml_hydra.track.query import and_

    completed = coll.count_documents(and_(query, {"status": states.COMPLETED}))
    if completed and not yes:  # their results would be cleared
        typer.confirm(
            f"Reset {completed} COMPLETED experiment(s) and clear their results?", abort=True
        )
    confirm_if_many("Reset", coll.count_documents(query), yes)
    done = do_reset(coll, query)
    report_ids(
        done.ids, "Reset {n} experiment(s) to STAGED: {ids}", none="No experiments to reset."
    )
    if done.moved:  # their runs stay readable: print-attempts, get_metrics(attempt=...)
        report_ids(done.moved, "Moved {n} attempt(s) into the history (see print-attempts): {ids}")


@command()
@on_collection()
def cancel(target: Target, yes: Yes = False) -> None:
    """Cancel PENDING and RUNNING experiments: INTERRUPTED, and `scancel` of their array tasks
    (without -s, also finishes an earlier cancel that was interrupted before its `scancel`)."""
    from seml_hydra.manage.cancel import cancel as do_cancel

    sel, coll = target.selection, target.collection
    query = sel.query(allowed=[s for s in states.ALL if s in states.ACTIVE])
    confirm_if_many("Cancel", lambda: coll.count_documents(query), yes)
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
    confirm_if_many("Delete", lambda: coll.count_documents(query), yes)
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
    report_ids(result.ids, "Deleted {n} experiment(s): {ids}", none="No experiments to delete.")


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
def print_fail_trace(target: Target, projection: Projection = None) -> None:
    """Print the fail trace of FAILED, KILLED and INTERRUPTED experiments, with their
    description and the values of the `-p` keys (terminal escape sequences and control
    characters removed)."""
    from seml_hydra.manage.describe import projection_fields
    from seml_hydra.manage.inspection import fail_traces
    from seml_hydra.manage.selection import ManageError

    default = [states.FAILED, states.KILLED, states.INTERRUPTED]
    query = target.selection.query(default_states=default)
    traces = fail_traces(target.collection, query, projection_fields(projection or ()))
    if not traces:
        raise ManageError("No experiments match the filters.")
    for trace in traces:  # plain text: long lines must not be cropped
        _rule(trace.exp_id, trace.status, trace.values)
        if trace.description:
            typer.echo(terminal_safe(f"Description: {trace.description}"))
        typer.echo(terminal_safe(trace.trace.rstrip()) or "(no fail trace)")


def _rule(exp_id: Any, state: Any, values: Sequence[tuple[str, str]] = ()) -> None:
    """The heading of one experiment's text (``key=value`` of each projected value after it),
    its fields made safe to print (a document's status could hold escape sequences or rich
    markup)."""
    from rich.markup import escape

    extra = "".join(f" {key}={value}" for key, value in values)
    console().rule(escape(terminal_safe(f"experiment {exp_id} ({state}){extra}")), align="left")


@command("print-output")
@on_collection()
def print_output(
    target: Target,
    head: Annotated[
        int, typer.Option("-H", "--head", min=0, help="Only the first N lines; 0 = all.")
    ] = 0,
    tail: Annotated[
        int, typer.Option("-t", "--tail", min=0, help="Only the last N lines; 0 = all.")
    ] = 0,
    slurm: Annotated[
        bool,
        typer.Option(
            "-sl", "--slurm", help="The job's Slurm output file instead of the experiment's output."
        ),
    ] = False,
) -> None:
    """Print the output of experiments: what each printed (Sacred's captured output, or the
    output file SEML wrote), or with `--slurm` its job's Slurm output file (its last MiB at
    most, with `--head` its first; bytes that are not UTF-8 show as U+FFFD; terminal escape
    sequences and control characters removed). Only a file inside the experiment's output
    folder that belongs to you is read."""
    from rich.markup import escape

    from seml_hydra.manage.inspection import read_outputs
    from seml_hydra.manage.selection import ManageError

    outputs = read_outputs(
        target.collection,
        target.selection.query(),
        tail=tail or None,
        head=head or None,
        slurm=slurm,
    )
    if not outputs:
        raise ManageError("No experiments match the filters.")
    for out in outputs:
        _rule(out.exp_id, out.status)
        if out.text is None:
            about = terminal_safe(f"{out.problem}{f': {out.path}' if out.path else ''}")
            console().print(f"[dim]{escape(about)}[/]")
            continue
        if out.skipped and not tail:
            console().print(f"[dim](its first {out.skipped} bytes are left out)[/]")
        if out.incomplete:
            console().print(
                "[yellow](incomplete: the run's last output was never saved to MongoDB; its "
                "job's output file has it: add --slurm)[/]"
            )
        typer.echo(terminal_safe(out.text))
