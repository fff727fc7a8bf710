"""The launch pipeline behind :class:`seml_hydra.launch.launcher.SemlLauncher`: compose the
points -> build documents -> stage them -> submit the arrays -> wait and hand Hydra its
``JobReturn``s. Each step is its own module (``compose``, ``document``, ``stage``, ``submit``,
``wait``); this one orchestrates them (I/O at this edge). Heavy imports (pymongo, submitit,
sacred, rich) happen inside the steps.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf

from seml_hydra.core import states
from seml_hydra.core.documents import experiment_hash, sacred_key_problem, to_bson_safe
from seml_hydra.core.errors import UserError
from seml_hydra.core.overrides import parse_override
from seml_hydra.core.paths import launch_paths_problem, unsafe_import_dir
from seml_hydra.core.ranges import format_ids
from seml_hydra.core.shell import seml_for
from seml_hydra.job import failfast
from seml_hydra.launch import document
from seml_hydra.launch.after import batch_dependency
from seml_hydra.launch.compose import iter_point_chunks
from seml_hydra.launch.recovery import recover_interrupted_submissions
from seml_hydra.launch.sbatch import script_text_problem, slurm_only_fields, validate_launcher
from seml_hydra.launch.stage import (
    DELETE_CHUNK,
    Stager,
    chunked,
    fewer_collections,
    next_batch_id,
    stage_chunk_size,
)
from seml_hydra.launch.submit import (
    JobFilesError,
    RequestGroups,
    ScriptValueError,
    SubmissionError,
    SubmitRequest,
    UnsafeFolderError,
    submit_groups,
)
from seml_hydra.launch.wait import Submission, job_return_from_document, wait_for
from seml_hydra.store.db.client import connect
from seml_hydra.store.db.collections import validate_collection_name
from seml_hydra.store.db.job_db import job_db_config, job_db_environment
from seml_hydra.store.db.retry import retrying
from seml_hydra.store.db.settings import resolve_db_settings
from seml_hydra.store.masking import mask_credentials
from seml_hydra.store.payload import (
    delete_payload,
    hydra_base_for,
    pickled_payload,
    put_payload,
)
from seml_hydra.store.snapshot.gitinfo import git_info
from seml_hydra.store.snapshot.sources import (
    MANIFEST_TYPE,
    config_dirs_of,
    imported_module_files,
    left_out_line,
    new_lease,
    project_python_files,
    project_root,
    put_manifest,
    release_lease,
    script_in_snapshot,
    select_sources,
    upload_sources,
)
from seml_hydra.track.killed import recovered_message

log = logging.getLogger(__name__)

#: seconds between two checks of the scheduler for dead jobs while waiting
SLURM_CHECK_S = 15.0
#: sweepers whose use of return values works with ``wait=false`` (they only read them to
#: re-raise failures): Hydra's basic sweeper
RETURN_AGNOSTIC_SWEEPERS = (
    "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
    "hydra_plugins.seml_launcher.seml_sweeper.SemlSweeper",
)


class LaunchError(UserError):
    """A user mistake or an environment problem, reported as one clear message (no traceback)."""


#: what Slurm's commands print when they could not reach slurmctld or it could not authenticate
#: them (munge down: Slurm 22.05's messages): nothing about the request is wrong, it is to be
#: submitted again once Slurm answers
SLURM_UNAVAILABLE = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "not found: is Slurm installed",
    "Protocol authentication error",
    "Munge encode failed",
    "Invalid user credential",
)


def submission_failed_message(reason: str, collection: str) -> str:
    """The launcher's message when sbatch failed with ``reason`` (pure): Slurm could not be
    reached or used (:data:`SLURM_UNAVAILABLE`: launch again once it answers), or it refused the
    request (change the resources it refused, then launch again, which submits the STAGED
    experiments with the new options; ``seml <collection> start`` would reuse the old ones)."""
    if any(text in reason for text in SLURM_UNAVAILABLE):
        return (
            f"Slurm could not be used from here: {reason}\nThe experiment(s) not submitted stay "
            "STAGED "
            f"in collection {collection}; launch the sweep again once Slurm answers (`sinfo`), "
            f"or submit them with `{seml_for(collection)} start`."
        )
    return (
        f"sbatch refused the job: {reason}\nThe experiment(s) not submitted stay STAGED in "
        f"collection {collection}. Change the resources sbatch refused "
        "(hydra.launcher.partition, mem_gb, gres, additional_parameters... or the slurm "
        "preset) and launch the sweep again: it submits the staged experiments with the "
        f"new options (`{seml_for(collection)} start` would reuse the old ones)."
    )


def fail_fast_message(
    docs: Iterable[Mapping[str, Any]], groups: Mapping[str, int], collection: str
) -> str | None:
    """The waiting launcher's message when a fail-fast group of this launch (``groups``:
    ``{group: max_failures}``, ``job.failfast``) reached its limit among the finished ``docs``
    (pure): the failures, how many other experiments were stopped and how to read the traces,
    e.g. ``fail-fast: 2 experiments failed: ids 1, 2 (max_failures=2); stopped 6 other
    experiment(s) of this launch (INTERRUPTED): ids 3-8. See `seml c print-fail-trace -id 1`.``;
    None when no group did."""
    docs = list(docs)
    lines = []
    for group, limit in groups.items():
        mine = [d for d in docs if (d.get(failfast.FIELD) or {}).get("group") == group]
        failed = sorted(d["_id"] for d in mine if d.get("status") == states.FAILED)
        if len(failed) < limit:
            continue
        stopped = sorted(
            d["_id"]
            for d in mine
            if d.get("status") == states.INTERRUPTED and d[failfast.FIELD].get("reason")
        )
        ids = f": ids {format_ids(stopped)}" if stopped else ""
        lines.append(
            f"{failfast.reason(failed)} (max_failures={limit}); stopped {len(stopped)} other "
            f"experiment(s) of this launch (INTERRUPTED){ids}. See `{seml_for(collection)} "
            f"print-fail-trace -id {failed[0]}`."
        )
    return "\n".join(lines) or None


def submitted_note(arrays: Sequence[Any], collection: str) -> str:
    """The end of a failed submission's message when arrays were submitted before the failure
    (``SubmissionError.submitted``; pure): they run, and `seml <collection> status` follows
    them; empty when none was."""
    if not arrays:
        return ""
    ids = ", ".join(str(a.array_id) for a in arrays)
    count = sum(len(exp_ids) for a in arrays for _, exp_ids in a.jobs.values())
    return (
        f"\nThe {count} experiment(s) submitted before it (job(s) {ids}) run; this launch does "
        f"not wait for them: follow them with `{seml_for(collection)} status`."
    )


def launch_points(
    launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int, console: Any
) -> list[JobReturn]:
    """Compose, check, stage, submit and wait for the points of one ``SemlLauncher.launch``
    (``launcher``: the Hydra launcher, its ``params``, ``config``, ``hydra_context`` and
    ``task_function``); one ``JobReturn`` per point in input order. Raises ``LaunchError`` and
    the other ``UserError`` subclasses for user mistakes.

    The points stream: they are composed, checked (:func:`checked_chunk`), hashed, built and
    inserted ``stage.stage_chunk_size()`` at a time (``compose.iter_point_chunks``,
    ``stage.Stager``), and only their ids (grouped per array job) are kept for the
    submission. The first chunk is composed and checked before anything is stored (its first
    point is the batch's base Hydra node, pickled with the payload); a bad point in a later
    chunk removes the new documents again, so a sweep with a bad point stages nothing."""
    params = launcher.params
    _warn_password_on_command_line(sys.argv[1:], console)
    if not job_overrides:
        raise LaunchError(
            "the sweep has no points (an empty sweep such as x=range(0)?): nothing was staged"
        )
    sweeper = OmegaConf.select(launcher.config, "hydra.sweeper._target_")
    if not params["wait"] and sweeper not in RETURN_AGNOSTIC_SWEEPERS:
        raise LaunchError(
            f"hydra.launcher.wait=false returns submission handles, not results, but the "
            f"sweeper {sweeper} needs the tasks' return values. Use wait=true, or the basic "
            "sweeper."
        )
    collection_name = validate_collection_name(str(params["collection"]))
    check_launch_directory(launcher.executor)
    problem = script_text_problem(collection_name, sbatch_line=launcher.executor == "slurm")
    if problem is not None:
        raise LaunchError(
            f"hydra.launcher.collection={collection_name!r} {problem} (the collection is the "
            "jobs' --comment, by which seml queue and cancel find them): choose another name. "
            "Nothing was staged."
        )
    chunks = iter_point_chunks(
        launcher.hydra_context.config_loader,
        launcher.config,
        job_overrides,
        initial_job_idx,
        stage_chunk_size(),
    )
    try:
        first = checked_chunk(next(chunks), launcher.executor)
        if launcher.executor == "local":
            _warn_slurm_only_fields(first, console)
        blob = pickled_batch_payload(launcher, first[0].hydra)
        settings = resolve_db_settings(params.get("db"))
        if settings.is_embedded:
            console.print(
                f"Using the embedded MongoDB ({settings.source}); set hydra.launcher.db.url, "
                "SEML_MONGODB_URI or ~/.config/seml/mongodb.config to use your own server."
            )
        db = connect(settings)
        dependencies = DependencyCheck(db, collection_name, launcher.executor)
        dependencies.check(first)
        launch = _Launch(
            launcher, db, settings, collection_name, first, chunks, dependencies, blob, console
        )
        return launch.run(job_overrides)
    finally:
        chunks.close()


def check_launch_directory(executor: str) -> None:
    """Refuse a launch from a working directory other users can add files to
    (``core.paths.unsafe_import_dir``: ``/tmp`` itself, a 0777 folder, one an ACL opens): the
    jobs run there, and every Python they or their task start with ``-m`` or ``-c``
    (submitit's local controller, multiprocessing's workers) imports a package planted there
    before anything is checked. ``executor``: unused, every executor runs its jobs here.
    Raises ``LaunchError``."""
    problem = unsafe_import_dir(os.getcwd())
    if problem is not None:
        raise LaunchError(
            f"Not launching from here: {problem}, so another user could put a module there "
            f"that your {executor} jobs (or the Python processes they start) would import and "
            "run as you. cd to a directory of yours and launch again; nothing was staged"
        )


def checked_chunk(points: list[Any], executor: str) -> list[Any]:
    """A composed chunk with the MongoDB passwords masked (:func:`masked_hydra_node`; composed
    again per point, a URL from a config file is in clear there) and every launcher node
    checked (``sbatch.validate_launcher``, once per node object: points share their nodes;
    ``visible_gpus`` only for ``executor`` ``"local"``). Raises ``LaunchError``."""
    clean: dict[tuple[int, int], tuple[Any, Any]] = {}  # ids -> the nodes (kept alive)
    widened: dict[int, tuple[Any, Any]] = {}  # id -> (origin, with MASKED_PATHS)
    for point in points:
        # points share their launcher.db and overrides.hydra: one without a password to mask
        # tells the others
        db = (point.hydra.get("launcher") or {}).get("db")
        given = (point.hydra.get("overrides") or {}).get("hydra")
        key = (id(db), id(given))
        if key in clean:
            continue
        masked = masked_hydra_node(point.hydra)
        if masked is point.hydra:
            clean[key] = (db, given)
        elif point.origin is not None:  # copied along the masked paths too
            known = widened.get(id(point.origin))
            if known is None:
                known = widened[id(point.origin)] = (
                    point.origin,
                    point.origin.with_paths(MASKED_PATHS),
                )
            point.origin = known[1]
        point.hydra = masked
    sacred_clean: set[int] = set()  # ids of config containers without a key Sacred refuses
    for point in points:
        path = sacred_key_problem(point.config, sacred_clean)
        if path is not None:
            raise LaunchError(config_key_message(path, point.overrides))
    checked: dict[int, Any] = {}  # id -> node (kept alive while its id is a key)
    judged: set[str] = set()
    for point in points:
        check_job_dirs(point.hydra, judged)
        node = point.launcher
        if id(node) in checked:
            continue
        checked[id(node)] = node
        try:
            validate_launcher(node, executor)
        except ValueError as error:
            raise LaunchError(str(error)) from None
        if executor == "slurm" and node.get("visible_gpus"):
            raise LaunchError(
                "hydra.launcher.visible_gpus spreads this machine's GPUs over seml_local's jobs; "
                "on Slurm, Slurm assigns them (gpus_per_task, gpus_per_node); nothing was staged"
            )
    return points


def check_job_dirs(hydra: Mapping[str, Any], judged: set[str]) -> None:
    """Refuse a point whose sweep dir (``hydra.sweep.dir``, where its job writes ``.hydra/``
    and its outputs), submitit folder (the pickles its job unpickles) or ``python`` program
    another local user could redirect (``core.paths.launch_paths_problem``: another user's
    directory or link on the path, or a directory others can write without the sticky bit):
    they could swap a pickle before the job starts and run their code as you, with your
    database credentials. ``judged``: the paths found safe so far, updated. Raises
    ``LaunchError`` naming the field, the path and the part."""
    problem = launch_paths_problem(hydra, judged, os.getcwd())  # the jobs run here
    if problem is not None:
        raise LaunchError(f"{problem}; nothing was staged")


def config_key_message(path: Sequence[str], overrides: Sequence[str]) -> str:
    """The refusal of a config key Sacred would refuse in every job (pure; ``path``: from
    ``documents.sacred_key_problem``): the key, where it is, and where it came from, the
    point's override (of ``overrides``) that sets it or a value above it, else the app's
    config."""
    key, parents = path[-1], path[:-1]
    where = f" (under {'/'.join(parents)})" if parents else ""
    source = "the app's config (its config files, structured configs or defaults)"
    best = 0
    for text in overrides:
        try:
            override = parse_override(text)
        except Exception:  # Hydra parsed it before; a text it did not is not the source
            continue
        if override.package is not None:
            continue
        parts = override.key_or_group.split(".")
        if len(parts) > best and list(path[: len(parts)]) == parts:
            best, source = len(parts), f"the override {text!r}"
    return (
        f"config key {key!r}{where} comes from {source}: Sacred refuses config keys that "
        "contain '.' or start with '$' (or are its jsonpickle tags such as 'py/object'), so "
        "every job would fail. Rename the key; nothing was staged."
    )


class DependencyCheck:
    """:func:`check_dependencies` over the chunks of one launch: each ``after`` of the launch
    is checked once."""

    def __init__(self, db: Any, collection_name: str, executor: str) -> None:
        self.db, self.collection_name, self.executor = db, collection_name, executor
        self.seen: set[tuple[Any, Any]] = set()

    def check(self, points: Sequence[Any]) -> None:
        """Check the ``after`` of ``points`` not checked yet. Raises ``LaunchError``."""
        check_dependencies(self.db, self.collection_name, points, self.executor, self.seen)


def check_dependencies(
    db: Any,
    collection_name: str,
    points: Sequence[Any],
    executor: str,
    seen: set[tuple[Any, Any]] | None = None,
) -> None:
    """Refuse, before staging, points whose ``hydra.launcher.after`` names no batch, a batch
    that can no longer satisfy it (``seml_hydra.launch.after.batch_dependency``), or is given
    to the local launcher (dependencies are Slurm's). ``seen``: the ``(after, after_kind)``
    pairs already checked (updated in place). Raises ``LaunchError``."""
    seen = set() if seen is None else seen
    for point in points:
        key = (point.launcher.get("after"), point.launcher.get("after_kind"))
        if key[0] is None or key in seen:
            continue
        seen.add(key)
        if executor != "slurm":
            raise LaunchError(
                "hydra.launcher.after is a Slurm dependency: use hydra/launcher=seml (the "
                "local launcher runs its jobs at once); nothing was staged"
            )
        try:
            batch_dependency(db, collection_name, point.launcher)
        except ValueError as error:
            raise LaunchError(str(error)) from None


def pickled_batch_payload(launcher: Any, hydra_base: dict[str, Any]) -> bytes:
    """The batch payload (``store.payload.pickled_payload``), pickled now so an unpicklable
    task fails before anything is staged. ``hydra_base`` is the batch's base Hydra node (the
    first point's), stored typed for the jobs (``Payload.typed_hydra_base``). With a code
    snapshot (``hydra.launcher.snapshot``) the script's objects are pickled by name, for the
    jobs that load the script from it (``job.main_module``)."""
    from seml_hydra.core.hydra_node import typed_hydra_node

    typed = typed_hydra_node(to_bson_safe(hydra_base))
    by_name = bool((hydra_base.get("launcher") or {}).get("snapshot", True))
    return pickled_payload(launcher.task_function, launcher.hydra_context, typed, by_name)


#: the paths of a ``hydra`` node :func:`masked_hydra_node` may change
MASKED_PATHS = (("launcher", "db", "url"), ("overrides", "hydra"))


def masked_hydra_node(hydra: dict[str, Any]) -> dict[str, Any]:
    """A resolved ``hydra`` node (plain containers, a ``compose.SweepPoint.hydra``) with the
    password of MongoDB URLs masked (``masking.mask_credentials``) in ``launcher.db.url`` and
    in the strings of ``overrides.hydra``: what every point's documents, its ``.hydra/*.yaml``
    on the node and the payload's ``metadata.hydra_base`` are built from. A URL given in a
    config file (a config group such as ``+db=secret`` with ``# @package hydra.launcher``, or
    the app's primary config) is composed again for each point, after :meth:`SemlLauncher.setup`
    masked the launch's own config. The jobs still get the password, from the launcher's own
    settings (``job_db.job_db_environment``).

    Pure: returns ``hydra`` itself when nothing is to mask, else a copy of the changed path only
    (points share sub-dicts). Raises nothing."""
    out = hydra
    launcher = hydra.get("launcher")
    if isinstance(launcher, dict) and isinstance(db := launcher.get("db"), dict):
        url = db.get("url")
        if isinstance(url, str) and mask_credentials(url) != url:
            out = {**out, "launcher": {**launcher, "db": {**db, "url": mask_credentials(url)}}}
    overrides = hydra.get("overrides")
    if isinstance(overrides, dict) and isinstance(given := overrides.get("hydra"), list):
        masked = [mask_credentials(t) if isinstance(t, str) else t for t in given]
        if masked != given:
            out = {**out, "overrides": {**overrides, "hydra": masked}}
    return out


def launched_from_command_line() -> bool:
    """Whether this launch came from an app's command line (``@hydra.main``: Hydra's
    ``_run_hydra`` is on the call stack), rather than from Python code that calls Hydra with
    its own overrides (hydra-zen's ``launch(...)``, Hydra's compose API): then running the
    script again would run its whole sweep, not one point."""
    try:
        from hydra._internal.utils import _run_hydra
    except ImportError:  # another Hydra version: assume the usual command line
        return True
    code = _run_hydra.__code__
    frame: types.FrameType | None = sys._getframe()
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def _warn_slurm_only_fields(points: Sequence[Any], console: Any) -> None:
    """Say once which Slurm-only launcher fields (``sbatch.slurm_only_fields``) the points
    of a ``seml_local`` launch set: the local executor runs without them."""
    found: dict[str, None] = {}
    seen: set[int] = set()
    for point in points:
        if id(point.launcher) not in seen:
            seen.add(id(point.launcher))
            found.update(dict.fromkeys(slurm_only_fields(point.launcher)))
    if found:
        from rich.markup import escape

        names = ", ".join(f"hydra.launcher.{k}" for k in found)
        console.print(
            f"[yellow]Warning:[/] {escape(names)} only {'reach' if len(found) > 1 else 'reaches'} "
            "Slurm; seml_local runs its "
            "jobs on this machine without them (use hydra/launcher=seml to submit to Slurm)."
        )


def _warn_password_on_command_line(argv: Sequence[str], console: Any) -> None:
    if any(mask_credentials(arg) != arg for arg in argv):
        console.print(
            "[yellow]Warning:[/] a MongoDB URL on the command line carries a password, which "
            "every user of this machine can read (`ps`); put it in ~/.config/seml/mongodb.config "
            "(`seml configure`) or SEML_MONGODB_URI instead."
        )


class _Launch:
    """One launch's state, from staging to the returns (I/O at this edge)."""

    def __init__(
        self,
        launcher: Any,  # the SemlLauncher
        db: Any,
        settings: Any,
        collection_name: str,
        first: list[Any],
        rest: Iterator[list[Any]],
        dependencies: DependencyCheck,
        blob: bytes,
        console: Any,
    ) -> None:
        self.launcher = launcher
        self.params = launcher.params
        self.db = db
        self.settings = settings
        self.collection_name = collection_name
        self.collection = db[collection_name]
        self.first = first  # the first chunk, composed and checked
        self.rest = rest  # the next chunks, composed when staged
        self.dependencies = dependencies
        self.base = first[0]  # the batch's base point: its Hydra node goes with the payload
        self.blob = blob
        self.console = console
        self.requests = RequestGroups()
        self.recovered: list[int] = []
        #: re-run / re-submitted experiment id -> its launcher node, while staging
        self._launcher_of: dict[int, Any] = {}
        #: this launch's fail-fast groups, ``{group: max_failures}`` (``job.failfast``)
        self.fail_fast: dict[str, int] = {}

    # -- staging -------------------------------------------------------------------------
    def _snapshot(self, batch_id: int, lease: dict[str, Any], seml: dict[str, Any]) -> None:
        """Store the project's sources in GridFS (``seml_hydra.store.snapshot.sources``: its Python
        files, the modules imported from it and its Hydra config), each file carrying ``lease``,
        and their list once, as the launch's manifest (``sources.put_manifest``); into
        ``seml``: ``source_manifest``, and ``main_file`` (the script's path in the snapshot,
        ``sources.script_in_snapshot``) when it holds the script. Say in one line what was
        left out and why."""
        hydra = self.base.hydra
        launcher = self.base.launcher
        app_dir = os.path.dirname(os.path.abspath(sys.argv[0])) if sys.argv[0] else os.getcwd()
        root = project_root(app_dir, launcher.get("project_root"))
        max_kb = int(launcher.get("snapshot_max_file_kb", 1024))
        project, not_searched = project_python_files(root)
        files, skipped = select_sources(
            imported_module_files(), config_dirs_of(hydra), root, max_kb, project
        )
        self.console.print(left_out_line(skipped, not_searched, max_kb), markup=False)
        listed = upload_sources(self.db, self.collection_name, batch_id, files, lease)
        seml["source_manifest"] = put_manifest(
            self.db, self.collection_name, batch_id, root, listed, lease
        )
        main_file = script_in_snapshot(seml["executable"], root, listed)
        if main_file is not None:
            seml["main_file"] = main_file

    def _delete_batch_sources(self, batch_id: int) -> None:
        """Delete the snapshot files this launch stored, once no document of its batch will
        name them: their ``metadata.batch_id`` is this launch's own, fresh batch, and no other
        launch reuses a file of another batch (``upload_sources``), so nobody else holds them
        (this launch's own lease on them does not keep them)."""
        import gridfs

        fs = gridfs.GridFS(self.db)
        query = {
            "metadata.collection_name": self.collection_name,
            "metadata.batch_id": batch_id,
            "metadata.type": {"$in": ["source_file", MANIFEST_TYPE]},
        }
        for f in list(self.db["fs.files"].find(query, {"_id": 1})):
            fs.delete(f["_id"])

    def stage(self) -> Any:
        self.launcher._staging_started = True
        # the payload and the snapshot files carry this launch's lease until the documents
        # naming them are stored: a concurrent delete/drop leaves them alone meanwhile
        lease = new_lease()
        try:
            return self._stage_leased(lease)
        finally:
            from pymongo.errors import PyMongoError

            try:
                release_lease(self.db, lease["id"])
            except PyMongoError:  # the database is away: the lease expires (sources.LEASE_S)
                log.warning("Could not release lease %s of the staged files", lease["id"])

    def _stage_leased(self, lease: dict[str, Any]) -> Any:
        """:meth:`stage` once the GridFS files it stores are protected by ``lease``."""
        payload_id = put_payload(
            self.db, self.collection_name, self.blob, to_bson_safe(self.base.hydra), lease
        )
        self.payload_id = payload_id
        batch_id = next_batch_id(self.db, self.collection_name)
        seml = document.seml_doc(
            self.base, payload_id=payload_id, executor=self.launcher.executor, argv=sys.argv
        )
        if not launched_from_command_line():
            seml["launched_from_python"] = True  # print-command has no command line to give
        if self.base.launcher.get("snapshot", True):
            self._snapshot(batch_id, lease, seml)
        docs = document.LaunchDocs(
            collection_name=self.collection_name,
            base_hydra=self.base.hydra,
            seml=seml,
            git=git_info(seml["working_dir"]),
            add_time=datetime.now(timezone.utc),
            base_origin=self.base.origin,
        )
        stager = Stager(
            self.db, self.collection_name, batch_id, bool(self.params.get("force")), self._recover
        )
        try:
            chunk: list[Any] | None = self.first
            self.first = []
            while chunk is not None:
                self._stage_chunk(stager, docs, chunk)
                chunk = next(self.rest, None)
                if chunk is not None:
                    checked_chunk(chunk, self.launcher.executor)
                    self.dependencies.check(chunk)
            result = stager.finish()
        except BaseException:
            stager.undo()
            delete_payload(self.db, payload_id)
            self._delete_batch_sources(batch_id)
            self.launcher._staging_started = False  # undone: Ctrl-C says nothing was stored
            raise
        if result.taken:  # another launch staged some of the points: should it die before
            # its sbatch, this launch submits them (only what is still STAGED is moved), with
            # that launch's payload and batch, as that launch would have
            ours = self.requests.pop(set(result.taken))
            self.requests.add(
                SubmitRequest(t.exp_id, r.launcher, t.payload_id, t.batch_id, r.cluster)
                for r, t in ((ours[i], t) for i, t in result.taken.items() if i in ours)
                if t.payload_id is not None
            )
        for exp_id in [*result.rerun_ids, *result.resubmit_ids]:
            self.requests.add([self._request(self._launcher_of[exp_id], exp_id, batch_id)])
        self._launcher_of = {}
        if not result.to_submit and not result.concurrent:  # no job will need the payload
            delete_payload(self.db, payload_id)
            self._delete_batch_sources(batch_id)  # nor this batch's snapshot: no document names it
        if self.recovered:
            self.console.print(recovered_message(self.recovered))
        self._say_staged(result)
        from seml_hydra.track.cache import refresh_collection_cache

        refresh_collection_cache([self.collection_name], replace=False)  # shell completion
        return result

    def _request(self, launcher: Any, exp_id: int, batch_id: int) -> SubmitRequest:
        return SubmitRequest(exp_id, launcher, self.payload_id, batch_id, self.launcher.executor)

    def _stage_chunk(self, stager: Stager, docs: document.LaunchDocs, points: list[Any]) -> None:
        """Hash (once), build and insert one chunk (``stage.Stager.add_chunk``); its new
        experiments join :attr:`requests`, and the launcher node of each existing one it
        re-runs or re-submits is kept until :meth:`stage` knows which were."""
        safe = [to_bson_safe(p.config) for p in points]
        hashes = [experiment_hash(c, p.launcher) for c, p in zip(safe, points)]
        seeds = document.draw_seeds([p.config for p in points])

        def make_document(offset: int, exp_id: int) -> dict[str, Any]:
            return document.make_document(
                docs,
                points[offset],
                exp_id=exp_id,
                batch_id=stager.batch_id,
                seed=seeds[offset],
                safe_config=safe[offset],
                config_hash=hashes[offset],
            )

        def refresh_existing(offset: int) -> dict[str, Any]:
            point = points[offset]
            return document.refreshed_fields(docs, point, stager.batch_id)

        before = len(stager.ids)
        updates_before = set(stager.updates)
        new_ids = stager.add_chunk(hashes, make_document, refresh_existing)
        new = set(new_ids)
        requests = []
        for offset, exp_id in enumerate(stager.ids[before:]):
            if exp_id in new:
                new.discard(exp_id)  # a repeat of the point maps to the same id
                requests.append(self._request(points[offset].launcher, exp_id, stager.batch_id))
            elif exp_id in stager.updates and exp_id not in updates_before:
                self._launcher_of.setdefault(exp_id, points[offset].launcher)
        self.requests.add(requests)

    def _recover(self, hashes: Sequence[str]) -> None:
        """Points an earlier launch left PENDING without a job (it died during sbatch) are
        STAGED again, so this launch submits them (``recovery.recover_interrupted_submissions``);
        called per chunk, before the chunk's duplicates are looked up."""
        self.recovered.extend(
            recover_interrupted_submissions(
                self.collection, {"config_hash": {"$in": sorted(set(hashes))}}
            )
        )

    def _say_staged(self, result: Any) -> None:
        from rich.markup import escape

        where = (
            f"collection [bold]{escape(self.collection_name)}[/] "
            f"({escape(self.settings.describe())})"
        )
        if result.new_ids:
            self.console.print(
                f"Staged {len(result.new_ids)} new experiment(s) in {where}, batch "
                f"{result.batch_id}: ids {format_ids(result.new_ids)}"
            )
        if result.rerun_ids:
            self.console.print(
                f"Re-running {len(result.rerun_ids)} earlier failed/killed/interrupted "
                f"experiment(s): ids {format_ids(result.rerun_ids)}"
            )
        if result.resubmit_ids:
            self.console.print(
                f"Submitting {len(result.resubmit_ids)} experiment(s) that were already staged: "
                f"ids {format_ids(result.resubmit_ids)}"
            )
        repeats = len(result.ids) - len(set(result.ids))
        if repeats:  # two points of this launch with one config hash: one experiment
            self.console.print(
                f"{repeats} point(s) repeat another point of this launch: run once, "
                "each gets its result"
            )
        if result.concurrent:
            self.console.print(
                f"{len(result.concurrent)} point(s) were staged at the same moment by another "
                "launch of this sweep: waiting for its experiment(s), not running them again "
                "(submitted here if that launch has not submitted them yet): "
                f"ids {format_ids(result.concurrent)}"
            )
        for status, ids in sorted(result.awaited.items()):
            verb = "returning" if status == "COMPLETED" else "waiting for"
            self.console.print(
                f"Skipped {len(ids)} point(s) already in the collection as {status} "
                f"({verb} them): ids {format_ids(ids)}"
            )

    # -- submission ------------------------------------------------------------------------
    def submit(self) -> dict[str, tuple[Any, list[int]]]:
        """Submit the experiments :meth:`stage` grouped per array job (:attr:`requests`)."""
        try:
            arrays = submit_groups(
                self.collection,
                self.collection_name,
                self.requests.groups,
                db_cfg=job_db_config(self.settings, self.params.get("db")),
                job_env=job_db_environment(self.settings, self.params.get("db")),
            )
        except JobFilesError as error:
            self._report(error.submitted)
            raise LaunchError(
                f"{error}\nThe experiment(s) not submitted stay STAGED in collection "
                f"{self.collection_name}; launch the sweep again once the folder can be written."
                + submitted_note(error.submitted, self.collection_name)
            ) from None
        except (ScriptValueError, UnsafeFolderError) as error:
            raise LaunchError(
                f"{error}\nThe experiment(s) stay STAGED in collection {self.collection_name}."
            ) from None
        except SubmissionError as error:
            self._report(error.submitted)
            raise LaunchError(
                submission_failed_message(str(error), self.collection_name)
                + submitted_note(error.submitted, self.collection_name)
            ) from None
        jobs = self._report(arrays)
        self._say_deleted(jobs)
        return jobs

    def _report(self, arrays: Sequence[Any]) -> dict[str, tuple[Any, list[int]]]:
        """Print one line per submitted array (and per array cancelled at once: its experiments
        were deleted meanwhile); returns their ``{job id: (job, ids)}``."""
        jobs: dict[str, tuple[Any, list[int]]] = {}
        for array in arrays:
            jobs.update(array.jobs)
            if array.jobs:
                self.console.print(array.describe(), markup=False)
            if array.orphans:
                self.console.print(
                    f"Cancelled {array.cluster} job(s) {', '.join(array.orphans)} at once: "
                    "its experiments were deleted while this launch submitted them.",
                    style="red",
                    markup=False,
                )
            if array.fail_fast:
                self.fail_fast[array.fail_fast["group"]] = array.fail_fast["max_failures"]
        return jobs

    def _say_deleted(self, jobs: dict[str, tuple[Any, list[int]]]) -> None:
        """Say which experiments this launch meant to submit were deleted under it (a
        ``delete`` while it staged or submitted): those no job of ``jobs`` runs and no
        document holds any more. Costs a read only when some were not submitted here."""
        submitted = {i for _, ids in jobs.values() for i in ids}
        missing = [i for g in self.requests.groups for i in g.exp_ids if i not in submitted]
        if not missing:
            return
        there: set[int] = set()
        for part in chunked(sorted(set(missing)), DELETE_CHUNK):
            there.update(d["_id"] for d in self.collection.find({"_id": {"$in": part}}, {"_id": 1}))
        gone = sorted(set(missing) - there)
        if gone:
            self.console.print(
                f"{len(gone)} experiment(s) of this launch were deleted from collection "
                f"{self.collection_name} while it staged or submitted them: ids "
                f"{format_ids(gone)}; nothing runs them.",
                style="red",
                markup=False,
            )

    # -- run --------------------------------------------------------------------------------
    def _statuses(self, ids: Sequence[int]) -> dict[int, str]:
        """``{_id: status}`` of experiments ``ids``, read :data:`stage.DELETE_CHUNK` ids at a
        time; equal statuses share one string."""
        names: dict[str, str] = {}
        out: dict[int, str] = {}
        for part in chunked(sorted(set(ids)), DELETE_CHUNK):
            for d in self.collection.find({"_id": {"$in": part}}, {"status": 1}):
                status = str(d.get("status", "UNKNOWN"))
                out[d["_id"]] = names.setdefault(status, status)
        return out

    def _submissions(
        self, job_overrides: Sequence[Sequence[str]], result: Any, jobs: dict[str, Any]
    ) -> list[JobReturn]:
        """The returns of a launch that does not wait: one ``Submission`` handle per point."""
        ids = result.ids
        job_of = {i: job_id for job_id, (_, group) in jobs.items() for i in group}
        status_of = self._statuses(ids)
        returns = []
        for overrides, exp_id in zip(job_overrides, ids):
            # no DictConfig per point (~1 ms each): the basic sweepers read return values only
            ret = JobReturn(
                overrides=overrides if isinstance(overrides, list) else list(overrides),
                cfg=None,
            )
            ret.status = JobStatus.COMPLETED
            ret._return_value = Submission(
                self.collection_name,
                exp_id,
                result.batch_id,
                job_of.get(exp_id),
                status_of.get(exp_id, "DELETED"),
            )
            returns.append(ret)
        self.console.print(
            f"Not waiting (wait=false). Follow with `{seml_for(self.collection_name)} status`.",
            markup=False,
        )
        return returns

    def _make_sweep_dir(self) -> None:
        """Create ``hydra.sweep.dir`` as Hydra's basic launcher does: sweepers write there
        after the launch (Optuna's ``optimization_results.yaml``) even when every point was
        in the collection already and no job made it. Raises ``LaunchError``."""
        sweep_dir = str(self.base.hydra["sweep"]["dir"])
        try:
            os.makedirs(sweep_dir, exist_ok=True)
        except OSError as error:
            raise LaunchError(
                f"cannot create the sweep dir {sweep_dir}: {error.strerror}; set "
                "hydra.sweep.dir to a directory you can write"
            ) from None

    def run(self, job_overrides: Sequence[Sequence[str]]) -> list[JobReturn]:
        """Stage, submit and wait (or not); one ``JobReturn`` per point of ``job_overrides``
        (the sweeper's list: each return carries its point's overrides)."""
        with fewer_collections():
            result = self.stage()
            jobs = self.submit()
            self._make_sweep_dir()
            if not self.params["wait"]:
                return self._submissions(job_overrides, result, jobs)
        ids = result.ids
        wait_for(
            self.collection,
            ids,
            poll_interval_s=float(self.params["poll_interval_s"]),
            jobs=jobs if self.launcher.executor == "local" else {},
            console=self.console,
            collection_name=self.collection_name,
            slurm_check_s=SLURM_CHECK_S if shutil.which("squeue") else None,
            fail_fast=self.fail_fast,
        )
        docs = retrying(
            lambda: {d["_id"]: d for d in self.collection.find({"_id": {"$in": ids}})},
            "reading the results",
        )
        stopped = fail_fast_message(docs.values(), self.fail_fast, self.collection_name)
        if stopped is not None:
            raise LaunchError(stopped)
        base = self.base.hydra
        returns = []
        for overrides, exp_id in zip(job_overrides, ids):
            doc = docs.get(exp_id) or {
                "_id": exp_id,
                "hydra": {"overrides": list(overrides)},
                "status": "DELETED",
                "fail_trace": [
                    "the experiment was deleted from the collection while the launcher waited"
                ],
            }
            ret = job_return_from_document(
                doc, hydra_base_for(self.db, doc, base, self.payload_id), self.collection_name
            )
            returns.append(ret)
        if self.launcher.executor == "slurm":  # asked far more than used: say so, once
            from seml_hydra.track.usage import group_usage, underused_line

            # only what ended while this launch waited: points skipped as COMPLETED ran in an
            # earlier launch, which told it then; points it found RUNNING (left by wait=false
            # or Ctrl-C) ended here, and no launch has told them
            done_before = set(result.awaited.get("COMPLETED", ()))
            line = underused_line(
                group_usage([d for i, d in docs.items() if i not in done_before], {}),
                self.collection_name,
            )
            if line is not None:
                from rich.markup import escape

                self.console.print(escape(line))
        return returns
