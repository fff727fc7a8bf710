"""``seml <collection> reload-sources`` (``manage.reload``) and ``clean-db``
(``manage.clean``): the code snapshots and the garbage GridFS keeps."""

from __future__ import annotations

from typing import Annotated

import typer

from seml_hydra.cli.collection_cmds import command
from seml_hydra.cli.core import ROOT_PANEL, app, console, shown
from seml_hydra.cli.options import Target, Yes, on_collection
from seml_hydra.core.ranges import format_ids
from seml_hydra.core.shell import seml_for


@command("reload-sources")
@on_collection()
def reload_sources(
    target: Target,
    keep_old: Annotated[
        bool,
        typer.Option("--keep-old", help="Keep the old snapshot files in GridFS."),
    ] = False,
    yes: Yes = False,
) -> None:
    """Upload the project's current files as the code snapshot of STAGED, FAILED, KILLED and
    INTERRUPTED experiments (the others keep the code they ran with); then `reset` and
    `start` run the new code. Shows the project root and the files first and asks (unless
    -y). The app script is reloaded too: jobs run the script's snapshot copy (only when it
    fails to load does the task function pickled at launch run)."""
    from seml_hydra.manage.reload import RELOADABLE, apply_reload, plan_reload

    sel, coll = target.selection, target.collection
    query = sel.query(allowed=RELOADABLE) if sel.filter_states else sel.query()
    plan = plan_reload(coll, query)
    for batch in plan.batches:
        dirs = ", ".join(shown(d) for d in batch.config_dirs) or "none"
        console().print(
            f"Batch {shown(batch.batch_id)} ({len(batch.docs)} experiment(s)): "
            f"{len(batch.files)} file(s) from the project root {shown(batch.root)} "
            f"(config dirs: {dirs})"
        )
    if not yes:
        typer.confirm("Upload them into the database as the new code snapshot?", abort=True)
    result = apply_reload(coll, plan, keep_old=keep_old)
    out = console()
    for state, ids in sorted(result.left_alone.items()):
        out.print(
            f"Left alone {len(ids)} {shown(state)} experiment(s) ({format_ids(ids)}): they keep "
            "the code they ran with."
        )
    for reloaded in result.batches:
        changed = f"{len(reloaded.changed)} new or changed" if reloaded.changed else "none changed"
        out.print(
            f"Reloaded the sources of {len(reloaded.ids)} experiment(s) "
            f"({format_ids(reloaded.ids)}) of batch {reloaded.batch_id}: "
            f"{len(reloaded.files)} file(s), {changed}"
            + (f" ({shown(', '.join(reloaded.changed))})" if reloaded.changed else "")
        )
        for rel in reloaded.missing:
            out.print(f"  {shown(rel)} is no longer in the project: left out")
        for path, reason in reloaded.skipped:
            out.print(f"  Not in the code snapshot: {shown(path)} ({shown(reason)})")
    if result.removed:
        out.print(f"Removed {len(result.removed)} old source file(s) no experiment uses.")
    out.print(
        f"Run them with `{shown(seml_for(target.name))} reset` (FAILED, KILLED, INTERRUPTED ones) "
        f"and `{shown(seml_for(target.name))} start`."
    )


@command("clean-db")
@on_collection(())
def clean_db(target: Target, yes: Yes = False) -> None:
    """Remove what no experiment of the collection references any more: code snapshot files,
    batch payloads, artifacts of deleted runs, their metrics (asks first). A launch's files
    being staged right now are kept."""
    _clean(target.db, [target.name], yes)


@app.command("clean-db", rich_help_panel=ROOT_PANEL)
def clean_db_all(yes: Yes = False) -> None:
    """Remove what no experiment references any more, in every collection, and what dropped
    collections left behind (files, metrics, id counters); asks first. `seml COLLECTION
    clean-db` cleans one collection."""
    from seml_hydra.manage.clean import every_collection
    from seml_hydra.manage.selection import connect_db

    db = connect_db()
    _clean(db, every_collection(db), yes)


def _clean(db, names: list[str], yes: bool) -> None:
    from seml_hydra.manage.clean import clean, survey

    found = survey(db, names)
    if not found:
        console().print("Nothing to clean: every file, metric and counter is referenced.")
        return
    for garbage in found:
        console().print(shown(garbage.describe()))
    if not yes:
        typer.confirm("Remove them (this cannot be undone)?", abort=True)
    removed = clean(db, names)
    if not removed:
        console().print("Nothing removed: it is referenced again (or gone already).")
    for garbage in removed:
        console().print("Removed " + shown(garbage.describe()))
