"""``reload-sources``: fix the code of staged or failed experiments without staging them again
(SEML's ``seml <collection> reload-sources``).

The project's current files replace the code snapshot (a new manifest, ``seml.source_manifest``;
documents of earlier versions had the list itself, ``seml.source_files``) of the selected
STAGED, FAILED, KILLED and INTERRUPTED experiments; ``reset`` + ``start`` then run the new code.
Which files, and from where, is what the launch chose (``store.snapshot.sources``), worked out again from
what the documents record: the project root of the app (``seml.executable``'s directory, or
``seml.working_dir``, and the launch's ``hydra.launcher.project_root``, from the base Hydra node
stored with the batch payload), the project's Python files (``sources.project_python_files``),
the modules of the old snapshot as they are now plus the other ``.py`` files beside them (a
module the fix adds), and the YAML files of the app's config
directories. Unlike SEML, nothing of the app is imported or run to find them.

The root and config directories come from the batch payload, which whoever can write the
database can forge (pointing them at a user's home, say): :func:`plan_reload` works out the
files without writing, refuses a config directory outside the project root, and the command
shows the root and the number of files and asks before :func:`apply_reload` uploads them.

What it cannot change: the task function itself when it is defined in the app script. It was
pickled by value into the batch payload at launch (cloudpickle, ``store.payload``), so the job
runs that version; what it calls in the project's modules comes from the snapshot.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from seml_hydra.core import states
from seml_hydra.core.ranges import format_ids
from seml_hydra.manage.lifecycle import delete_orphan_sources
from seml_hydra.manage.selection import ManageError
from seml_hydra.store.payload import hydra_base
from seml_hydra.store.snapshot.node import SourceSnapshotError, load_snapshot
from seml_hydra.store.snapshot.sources import (
    DEFAULT_MAX_FILE_KB,
    SourceFile,
    config_dirs_of,
    new_lease,
    project_python_files,
    project_root,
    put_manifest,
    release_lease,
    select_sources,
    upload_sources,
)
from seml_hydra.track.query import and_, select

#: the states whose code may be replaced: no job runs them, and no result came from it
RELOADABLE = (states.STAGED, states.FAILED, states.KILLED, states.INTERRUPTED)


@dataclass
class LeftOut:
    """The batch ``batch_id`` and what its new code snapshot leaves out, the same in its
    :class:`BatchPlan` and its :class:`BatchReload`: ``missing`` (old snapshot files no longer
    in the project) and ``skipped`` (``(path, reason)`` left out for their size). Keyword-only
    (after the fields of the subclass in its constructor)."""

    batch_id: Any
    missing: list[str] = field(default_factory=list, kw_only=True)
    skipped: list[tuple[str, str]] = field(default_factory=list, kw_only=True)


@dataclass
class BatchReload(LeftOut):
    """What :func:`reload_sources` did to one batch: ``batch_id``, the experiment ``ids`` whose
    snapshot it replaced, ``files`` (the new snapshot's relative paths), ``changed`` (paths new
    or with other content than before), and ``missing`` / ``skipped`` of its plan
    (:class:`LeftOut`)."""

    ids: list[Any]
    files: list[str]
    changed: list[str]


@dataclass
class ReloadResult:
    """``batches`` (:class:`BatchReload`), ``left_alone`` (``{state: ids}`` of selected
    experiments in other states) and ``removed`` (old GridFS file ids deleted)."""

    batches: list[BatchReload] = field(default_factory=list)
    left_alone: dict[str, list[Any]] = field(default_factory=dict)
    removed: list[Any] = field(default_factory=list)


def split_reloadable(
    docs: Iterable[Mapping[str, Any]],
) -> tuple[list[Mapping[str, Any]], dict[str, list[Any]]]:
    """``(reloadable documents, {other state: ids})`` of ``docs`` (pure)."""
    ok: list[Mapping[str, Any]] = []
    other: dict[str, list[Any]] = {}
    for doc in docs:
        state = states.ALIASES.get(str(doc.get("status")), str(doc.get("status")))
        if state in RELOADABLE:
            ok.append(doc)
        else:
            other.setdefault(state, []).append(doc["_id"])
    return ok, other


def refusal(other: Mapping[str, Sequence[Any]]) -> str:
    """The one line refusing a selection with only experiments in ``other`` states (pure)."""
    parts = [f"{len(ids)} {state} ({format_ids(ids)})" for state, ids in sorted(other.items())]
    return (
        f"reload-sources replaces the code of {', '.join(RELOADABLE)} experiments only; the "
        f"selected ones are {', '.join(parts)}."
    )


def module_candidates(old_paths: Iterable[str], root: Path) -> tuple[list[str], list[str]]:
    """The ``.py`` files to snapshot again under ``root``: the old snapshot's modules
    (``old_paths``, POSIX relative paths) that still exist, and the other ``.py`` files of their
    directories. Returns ``(absolute paths, old paths that no longer exist)``."""
    found: set[str] = set()
    missing = []
    for rel in old_paths:
        if not rel.endswith(".py"):
            continue
        path = root.joinpath(*PurePosixPath(rel).parts)
        if not path.is_file():
            missing.append(rel)
        if path.parent.is_dir():
            found.update(str(p) for p in path.parent.glob("*.py") if p.is_file())
    return sorted(found), missing


@dataclass
class BatchPlan(LeftOut):
    """What :func:`plan_reload` will upload for one batch: ``batch_id``, its reloadable
    ``docs``, the project ``root`` and ``config_dirs`` (absolute, inside ``root``) the files
    come from, ``files`` (``store.snapshot.sources.SourceFile``), and ``missing`` / ``skipped``
    (:class:`LeftOut`)."""

    docs: list[Mapping[str, Any]]
    root: Path
    config_dirs: list[Path]
    files: list[SourceFile]


@dataclass
class ReloadPlan:
    """``batches`` (:class:`BatchPlan`) and ``left_alone`` (``{state: ids}`` of selected
    experiments in other states): what ``reload-sources`` shows before it asks."""

    batches: list[BatchPlan] = field(default_factory=list)
    left_alone: dict[str, list[Any]] = field(default_factory=dict)


def plan_reload(collection: Any, query: Mapping[str, Any]) -> ReloadPlan:
    """Work out, without writing anything, which files :func:`apply_reload` would upload for
    the selected reloadable experiments, batch by batch (see the module docstring). The root
    and config dirs come from the batch payload, which anyone who can write the database can
    forge: the command shows them and asks before :func:`apply_reload`.

    Raises:
        ManageError: nothing matches; only experiments in other states match; one has no
            integer ``batch_id`` (a forged or garbled document); a batch has no
            code snapshot (launched with ``snapshot=false``) or its payload is gone; its
            project is not on this machine or has none of the files; a config dir is not
            inside the project root.
    """
    docs = select(collection, query, {"_id": 1, "batch_id": 1, "status": 1, "seml": 1})
    if not docs:
        raise ManageError(f"No experiments in {collection.name} match.")
    ok, other = split_reloadable(docs)
    if not ok:
        raise ManageError(refusal(other))
    no_batch = [d["_id"] for d in ok if type(d.get("batch_id")) is not int]
    if no_batch:
        raise ManageError(
            f"Experiment(s) {', '.join(map(str, no_batch))} of {collection.name} have no batch "
            "id (a forged or garbled document) and reload-sources reloads batch by batch: "
            "select the others (-b <batch>), or delete these and launch their points again. "
            "Nothing was changed."
        )
    by_batch: dict[Any, list[Mapping[str, Any]]] = {}
    for doc in ok:
        by_batch.setdefault(doc.get("batch_id"), []).append(doc)
    db = collection.database
    batches = [_plan(db, batch_id, batch) for batch_id, batch in sorted(by_batch.items())]
    return ReloadPlan(batches, other)


def apply_reload(collection: Any, plan: ReloadPlan, keep_old: bool = False) -> ReloadResult:
    """Upload the files of ``plan`` (:func:`plan_reload`) and make them the code snapshot of
    its experiments still in a reloadable state.

    Args:
        collection: the pymongo collection.
        plan: what :func:`plan_reload` found.
        keep_old: keep the old snapshot files in GridFS; otherwise those no experiment names any
            more are deleted (``manage.lifecycle.delete_orphan_sources``: COMPLETED experiments
            of the batch keep theirs, and a launch's leased files are never touched).

    Returns:
        A :class:`ReloadResult`.
    """
    db = collection.database
    result = ReloadResult(left_alone=plan.left_alone)
    old_ids: set[str] = set()
    for batch in plan.batches:
        old = {
            str(rel): str(fid) for d in batch.docs for rel, fid in _snapshot_files(db, d["seml"])
        }
        lease = new_lease()
        try:
            new = upload_sources(db, collection.name, batch.batch_id, batch.files, lease)
            manifest = put_manifest(db, collection.name, batch.batch_id, batch.root, new, lease)
            ids = [d["_id"] for d in batch.docs]
            collection.update_many(
                and_({"_id": {"$in": ids}}, {"status": {"$in": list(RELOADABLE)}}),
                {"$set": {"seml.source_manifest": manifest}, "$unset": {"seml.source_files": ""}},
            )
        finally:
            release_lease(db, lease["id"])
        new_ids = {str(fid) for _, fid in new}
        old_ids.update(fid for fid in old.values() if fid not in new_ids)
        old_ids.update(
            str(d["seml"]["source_manifest"])
            for d in batch.docs
            if d["seml"].get("source_manifest") is not None
        )
        changed = [rel for rel, fid in new if old.get(rel) != str(fid)]
        result.batches.append(
            BatchReload(
                batch.batch_id,
                ids,
                [rel for rel, _ in new],
                changed,
                missing=batch.missing,
                skipped=batch.skipped,
            )
        )
    if not keep_old and old_ids:
        result.removed = delete_orphan_sources(db, collection.name, old_ids)
    return result


def reload_sources(
    collection: Any, query: Mapping[str, Any], keep_old: bool = False
) -> ReloadResult:
    """:func:`apply_reload` of :func:`plan_reload` without asking (raises what they raise)."""
    return apply_reload(collection, plan_reload(collection, query), keep_old)


def _snapshot_files(db: Any, seml: Mapping[str, Any]) -> list[list[Any]]:
    """The files of a document's code snapshot (``store.snapshot.node.load_snapshot``: its launch's
    manifest, or its own list); ``[]`` when it has none. Raises :class:`ManageError` when its
    manifest is gone."""
    try:
        found = load_snapshot(db, seml)
    except SourceSnapshotError as error:
        raise ManageError(f"Cannot reload the sources: {error}.") from None
    return found.files if found is not None else []


def outside_root(config_dirs: Iterable[Path], root: Path) -> list[Path]:
    """The ``config_dirs`` (absolute, resolved) that are neither ``root`` (resolved) nor
    inside it (pure)."""
    return [d for d in config_dirs if d != root and root not in d.parents]


def _plan(db: Any, batch_id: Any, batch: list[Mapping[str, Any]]) -> BatchPlan:
    """The :class:`BatchPlan` of one batch (raises as :func:`plan_reload`)."""
    seml = batch[0].get("seml") or {}
    ids = format_ids([d["_id"] for d in batch])
    old = [str(entry[0]) for entry in _snapshot_files(db, seml) if entry]
    if not old:
        raise ManageError(
            f"Experiment(s) {ids} (batch {batch_id}) have no code snapshot (launched with "
            "hydra.launcher.snapshot=false): there are no sources to reload."
        )
    if not seml.get("payload_file"):
        raise ManageError(
            f"Experiment(s) {ids} (batch {batch_id}) have no batch payload: SEML staged them; "
            "reload their sources with SEML's own reload-sources."
        )
    try:
        base = hydra_base(db, str(seml["payload_file"]))
    except Exception:  # the payload is gone or the id is no ObjectId: nothing can run them
        raise ManageError(
            f"The batch payload of experiment(s) {ids} (batch {batch_id}) is gone; stage them "
            "again with the launcher."
        ) from None
    launcher = base.get("launcher") or {}
    executable = seml.get("executable") or ""
    app_dir = os.path.dirname(executable) if executable else seml.get("working_dir") or "."
    root = project_root(app_dir, launcher.get("project_root"))
    if not root.is_dir():
        raise ManageError(f"The project of batch {batch_id} ({root}) is not on this machine.")
    config_dirs = [Path(d).expanduser().resolve() for d in config_dirs_of(base)]
    outside = outside_root(config_dirs, root)
    if outside:
        raise ManageError(
            f"The config dir {outside[0]} of batch {batch_id} is not inside its project root "
            f"{root}: reload-sources uploads nothing from outside the project."
        )
    modules, missing = module_candidates(old, root)
    files, skipped = select_sources(
        modules,
        config_dirs,
        root,
        int(launcher.get("snapshot_max_file_kb", DEFAULT_MAX_FILE_KB)),
        project_python_files(root)[0],
    )
    if not files:
        raise ManageError(
            f"None of the code snapshot's files of batch {batch_id} are in {root} any more."
        )
    return BatchPlan(batch_id, batch, root, config_dirs, files, missing=missing, skipped=skipped)
