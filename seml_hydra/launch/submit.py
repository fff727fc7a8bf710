"""Submission: staged experiment ids -> submitit array jobs (one per resource set).

Documents go to PENDING just before ``sbatch`` (so a job that starts at once can claim them),
marked with the submitting process (``slurm[0].submitting``), and back to STAGED if submission
fails; after ``sbatch`` they record ``slurm[0].array_id``, ``num_tasks`` and the sbatch options
used instead of the mark (a MongoDB outage at that moment is ridden out: ``retry.retrying``).
A submission whose process died in between is undone by the next one, which cancels the array
its sbatch may have left (``seml_hydra.launch.recovery.recover_interrupted_submissions``). The
array's ``--comment`` is the collection (``seml queue`` groups by it, as SEML does) and its job
name ``<collection>_<batch_id>``. What a launcher node becomes for sbatch (parameters, options,
validation, resource groups) is pure and lives in ``seml_hydra.launch.sbatch``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import io
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from seml_hydra.core import states
from seml_hydra.core.errors import UserError
from seml_hydra.core.paths import job_dir_problem, unsafe_files
from seml_hydra.core.scoped import temporarily
from seml_hydra.job import failfast
from seml_hydra.job.devices import GPUS_PER_TASK_VAR, LOCAL_GPUS_VAR, local_job_environment
from seml_hydra.job.runner import JobRunner
from seml_hydra.launch.after import batch_dependency
from seml_hydra.launch.marks import submission_mark
from seml_hydra.launch.recovery import cancel_orphan_arrays
from seml_hydra.launch.sbatch import (
    check_script_values,
    chunk,
    executor_arguments,
    executor_parameters,
    group_labels,
    job_name,
    option_key,
    resource_key,
    sbatch_options,
    split_array,
)
from seml_hydra.slurm.client import SlurmError, cluster_name, max_array_size, start_now
from seml_hydra.store.db.retry import retrying

log = logging.getLogger(__name__)


#: environment variables a job must not inherit from the submitting shell (design.md: submitting
#: from inside a Slurm job leaks SLURM_*; torch refuses a leaked MASTER_ADDR/RANK)
LEAKY_ENV_PREFIXES = ("SLURM_", "SBATCH_", "SUBMITIT_")
#: ... except the user's choice of cluster: ``SLURM_CONF`` points every Slurm client at a
#: cluster's slurm.conf, so sbatch must submit to the cluster squeue, scontrol and sacct ask
#: (the one ``cluster_name`` records in the documents), not to the machine's default one
KEPT_ENV_NAMES = ("SLURM_CONF",)
LEAKY_ENV_NAMES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "JAX_COORDINATOR_ADDRESS",
    "JAX_COORDINATOR_PORT",
    "JAX_NUM_PROCESSES",
    LOCAL_GPUS_VAR,
    GPUS_PER_TASK_VAR,
)


class SubmissionError(UserError):
    """sbatch (or the local executor) refused the submission; the message is for the user.
    ``submitted``: the arrays :func:`submit_groups` submitted before the one refused (they run;
    empty when nothing was submitted)."""

    submitted: list[SubmittedArray] = []  # noqa: RUF012 (set per error by submit_groups)


class ScriptValueError(SubmissionError):
    """A value stored with the experiments (``seml start`` rebuilds the launcher from them)
    would break the job script: refused before any sbatch (``sbatch.check_script_values``)."""


class UnsafeFolderError(SubmissionError):
    """The folder submitit just made for a job, or the pickle it wrote there, could be changed
    by another user (:func:`job_files_problem`): the array was cancelled before it started and
    its experiments are STAGED again."""


class JobFilesError(SubmissionError):
    """The job files (submitit's pickles and sbatch script) could not be written into the
    submitit folder (a full disk, a read-only or unwritable folder): no sbatch ran. The message
    names the folder, the system's reason and what to do (:func:`job_files_message`)."""


def job_files_message(folder: str, error: OSError) -> str:
    """The user's message for an ``OSError`` while writing the job files into ``folder`` (pure),
    e.g. ``cannot write the job files in /x: No space left on device; free space or set
    hydra.launcher.submitit_folder``."""
    reason = error.strerror or str(error) or type(error).__name__
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = "free space or set hydra.launcher.submitit_folder"
    else:
        hint = "set hydra.launcher.submitit_folder to a folder you can write"
    return f"cannot write the job files in {folder}: {reason}; {hint}"


def is_job_files_error(error: BaseException) -> bool:
    """Whether ``error``, raised by submitit's submission, comes from writing the job files
    rather than from running sbatch (pure): any ``OSError`` except the one of a missing
    ``sbatch`` executable (``FileNotFoundError`` naming it)."""
    if not isinstance(error, OSError):
        return False
    return os.path.basename(str(error.filename or "")) != "sbatch"


def absolute_path_entries(value: str) -> tuple[str, list[str]]:
    """``(PYTHONPATH with only its absolute entries, the others)`` (pure): an empty or relative
    entry means the job's working directory, which Python searches before anything of ours runs
    (``sitecustomize`` too), whatever the job later makes of its working directory."""
    entries = value.split(os.pathsep)
    kept = [e for e in entries if os.path.isabs(e)]
    return os.pathsep.join(kept), [e for e in entries if not os.path.isabs(e)]


@contextlib.contextmanager
def clean_environment(extra: Mapping[str, str] | None = None) -> Iterator[None]:
    """Temporarily drop the variables a job must not inherit (sbatch exports the environment)
    and set ``extra`` (e.g. ``seml_hydra.store.db.job_db.job_db_environment``: a secret reaches the job
    through the environment of ``sbatch`` / the local job process, never a file or a command
    line); everything is restored afterwards. ``PYTHONPATH`` loses its empty and relative
    entries (:func:`absolute_path_entries`), with a warning."""
    extra = dict(extra or {})
    saved = {
        k: v
        for k, v in os.environ.items()
        if (k.startswith(LEAKY_ENV_PREFIXES) and k not in KEPT_ENV_NAMES)
        or k in LEAKY_ENV_NAMES
        or k in extra
    }
    for key in saved:
        del os.environ[key]
    pythonpath = os.environ.get("PYTHONPATH")
    if pythonpath is not None and "PYTHONPATH" not in extra:
        kept, dropped = absolute_path_entries(pythonpath)
        if dropped:
            log.warning(
                "PYTHONPATH entries %s are relative to the job's working directory: left out "
                "of the jobs' PYTHONPATH (give them as absolute paths)",
                dropped,
            )
            saved["PYTHONPATH"] = pythonpath
            os.environ["PYTHONPATH"] = kept
    os.environ.update(extra)
    try:
        yield
    finally:
        for key in extra:
            os.environ.pop(key, None)
        os.environ.update(saved)


def finish_despite_interrupt(write: Any) -> None:
    """Call ``write()`` until it completes, even when Ctrl-C (``KeyboardInterrupt``) arrives
    meanwhile, then re-raise that interrupt. ``write`` must be safe to repeat (``$set``s)."""
    interrupted: BaseException | None = None
    while True:
        try:
            write()
            break
        except KeyboardInterrupt as error:
            interrupted = error
    if interrupted is not None:
        raise interrupted


def cancel_unrecorded_array(
    collection: Any, ids: Sequence[int], folder: str, *, since: Any
) -> None:
    """After a submission of ``ids`` was interrupted (Ctrl-C) and they are STAGED again: cancel
    the array its sbatch may have created all the same (Ctrl-C after sbatch returned, before
    submitit handed the job back), which no document records: ``recovery.cancel_orphan_arrays``
    for their batches and ``folder``, submitted since ``since`` (this submission's mark time).
    Left alone it would start at its deferred begin time and fail on experiments no longer
    PENDING. Not for an sbatch that failed (it made no array). Best effort: an error here is
    logged, never raised over the interrupt."""
    try:
        batches = set(collection.distinct("batch_id", {"_id": {"$in": list(ids)}}))
        cancel_orphan_arrays(
            collection,
            batches,
            {folder},
            since=since,
            why="created by a submission interrupted before recording it; its experiments are "
            "STAGED again",
        )
    except Exception as error:  # noqa: BLE001 (the interrupt is the one to report)
        log.warning("Could not look for an array of the interrupted submission: %s", error)


def moved_all(update: Any, ids: Sequence[int]) -> bool:
    """Whether the ``update_many`` result ``update`` (pymongo's ``UpdateResult``) of
    :func:`submit_group`'s move to PENDING modified every one of ``ids`` (pure): its filter
    matches each id at most once and the move changes every document it matches (STAGED ->
    PENDING), so a ``modified_count`` equal to the number of distinct ids means all of them.
    False for an unacknowledged write (no count)."""
    return bool(update.acknowledged) and update.modified_count == len(set(ids))


def orphaned_tasks(id_groups: Sequence[Sequence[int]], recorded: set[int]) -> list[int]:
    """The indices of the array tasks none of whose experiments ``recorded`` holds (pure): a
    ``delete`` removed every one of them between the move to PENDING and the record of the
    job, so the task would start to run nothing."""
    return [i for i, group in enumerate(id_groups) if not recorded.intersection(group)]


def cancel_orphaned(jobs: Sequence[Any], orphaned: Sequence[int], cluster: str) -> list[str]:
    """Cancel the tasks ``orphaned`` (indices into ``jobs``, submitit Jobs): on Slurm one
    ``scancel`` of the array when they are all of its tasks, else of the tasks; locally each
    job. Returns the ids given to ``scancel`` (the array's id alone for a whole array), empty
    when Slurm refused (logged as a warning: the tasks start later and run nothing)."""
    from seml_hydra.slurm.client import scancel

    if cluster != "slurm":
        for i in orphaned:
            jobs[i].cancel(check=False)
        return [str(jobs[i].job_id) for i in orphaned]
    whole = len(orphaned) == len(jobs)
    ids = [str(jobs[0].job_id).split("_")[0]] if whole else [str(jobs[i].job_id) for i in orphaned]
    try:
        scancel(ids)
    except (SlurmError, ValueError) as error:
        log.warning("Could not cancel job(s) %s: %s", ", ".join(ids), error)
        return []
    return ids


def submit_group(
    collection: Any,
    *,
    cluster: str,
    folder: str,
    params: Mapping[str, Any],
    runner: Any,
    id_groups: Sequence[Sequence[int]],
    options: Mapping[str, Any],
    job_env: Mapping[str, str] | None = None,
    cluster_name: str | None = None,
    executor_args: Mapping[str, Any] | None = None,
    per_job_env: Callable[[int], Mapping[str, str]] | None = None,
    fail_fast: Mapping[str, Any] | None = None,
) -> tuple[list[Any], list[list[int]], list[str]]:
    """Submit one resource group as one array job; returns ``(submitit Jobs, id groups,
    cancelled job ids)``: one job per group submitted, in order, which are ``id_groups`` less
    the ids this process did not move (all empty, and no sbatch, when it moved none), less the
    tasks whose experiments were deleted meanwhile (cancelled: :func:`cancel_orphaned`'s ids).

    The groups' documents are set PENDING (from STAGED) and marked as being submitted by this
    process first (:func:`submission_mark`), then submitted; on success each records its
    ``slurm[0]`` fields instead of the mark (``slurm[0].cluster``: ``cluster_name``, the Slurm
    cluster's own name, else the executor ``cluster``), on failure every one of them goes back
    to STAGED and :class:`SubmissionError` carries sbatch's message. Should this process die in
    between, the next submission of them recovers them
    (``seml_hydra.launch.recovery.recover_interrupted_submissions``).
    Only the documents this update moved are submitted and written afterwards (filtered on its
    mark's ``token``): an experiment a concurrent submission moved first is neither submitted
    twice nor has its ``slurm[0]`` overwritten. It moves only documents that name the
    ``runner``'s payload (``seml.payload_file``): one that another launch of the sweep found
    STAGED and took meanwhile (it names that launch's payload, sweep dir and batch) is that
    launch's to submit; run with this payload its job would look for another sweep dir. ``job_env`` is set in the submitting
    environment only (:func:`clean_environment`). ``executor_args`` go to submitit's
    ``AutoExecutor`` constructor (``launch.sbatch.executor_arguments``: ``slurm_python``...).
    With ``per_job_env`` (the local executor: no arrays) the jobs are submitted one by one,
    job ``i`` (of those submitted) with ``per_job_env(i)`` also set in its environment.

    A ``delete`` of the experiments after their move to PENDING (a ``delete`` while the launch
    still stages or submits) leaves the record of the job nothing to write to: the tasks none of
    whose experiments is still there (:func:`orphaned_tasks`) are cancelled before their
    deferred start (:func:`cancel_orphaned`: the whole array when every task is; a failure is
    logged), and left out of the returned jobs.
    ``fail_fast`` (``job.failfast.mark``) is written into the documents with the move to PENDING
    (before any task can claim them); without it an earlier submission's is removed.
    """
    import submitit

    all_ids = [i for group in id_groups for i in group]
    mark = submission_mark(folder)
    moved: dict[str, Any] = {"status": states.PENDING, "slurm.0.submitting": mark}
    # the old job of a re-run experiment must not be taken for its new one meanwhile
    cleared = {f"slurm.0.{k}": "" for k in JOB_RECORD_FIELDS}
    if fail_fast:
        moved[failfast.FIELD] = dict(fail_fast)
    else:
        cleared[failfast.FIELD] = ""
    update = collection.update_many(
        {"_id": {"$in": all_ids}, "status": states.STAGED, "seml.payload_file": runner.payload_id},
        {"$set": moved, "$unset": cleared},
    )
    # only what this update moved: a concurrent launch or `seml start` may have moved (and
    # submitted) some of them first; every later write is filtered on this submission's mark
    ours = {"slurm.0.submitting.token": mark["token"]}
    if not moved_all(update, all_ids):  # read back which (else: all of them, no read)
        taken = {d["_id"] for d in collection.find({"_id": {"$in": all_ids}, **ours}, {"_id": 1})}
        id_groups = [g for g in ([i for i in group if i in taken] for group in id_groups) if g]
        if not id_groups:
            return [], [], []
        all_ids = [i for group in id_groups for i in group]
    try:
        # submitit's own limit on timeout requeues stays above ours (JobRunner.max_requeues)
        executor = submitit.AutoExecutor(
            folder=folder,
            cluster=cluster,
            slurm_max_num_timeout=getattr(runner, "max_requeues", 3) + 1,
            **dict(executor_args or {}),
        )
        always_arrays(executor)
        submitted_params, deferred = deferred_start(params, cluster)
        executor.update_parameters(**submitted_params)
        stderr = io.StringIO()
        with clean_environment(job_env), contextlib.redirect_stderr(stderr):
            if per_job_env is None:
                jobs = executor.map_array(runner, [list(g) for g in id_groups])
            else:
                jobs = []
                for i, group in enumerate(id_groups):
                    with temporarily(os.environ, per_job_env(i)):
                        jobs += executor.map_array(runner, [list(group)])
    except BaseException as error:  # Ctrl-C during sbatch too: never PENDING without a job
        _back_to_staged(collection, all_ids, ours)
        if not isinstance(error, Exception):  # Ctrl-C: maybe after sbatch made the array
            if cluster == "slurm":
                cancel_unrecorded_array(collection, all_ids, folder, since=mark["time"])
            raise
        if is_job_files_error(error):
            raise JobFilesError(job_files_message(folder, error)) from None  # type: ignore[arg-type]
        message = str(error).strip() or type(error).__name__
        raise SubmissionError(message) from None
    from pymongo import UpdateMany

    records = []
    for task_id, (job, group) in enumerate(zip(jobs, id_groups)):
        array_id = str(job.job_id).split("_")[0]
        records.append(
            UpdateMany(
                {"_id": {"$in": list(group)}, **ours},
                {
                    "$set": {
                        "slurm.0.array_id": int(array_id) if array_id.isdigit() else array_id,
                        "slurm.0.task_id": task_id,
                        "slurm.0.job_id": str(job.job_id),
                        "slurm.0.num_tasks": len(jobs),
                        "slurm.0.sbatch_options": dict(options),
                        "slurm.0.cluster": cluster_name or cluster,
                        "slurm.0.output_files_template": str(job.paths.stdout),
                    },
                    "$unset": {"slurm.0.submitting": ""},
                },
            )
        )
    # the jobs exist now: their experiments must name them even if Ctrl-C comes meanwhile (a
    # recovered "interrupted submission" would be submitted a second time)
    # ... and a MongoDB outage now must not lose the record either (the writes are $sets,
    # filtered on this submission's mark: safe to repeat)
    written: list[Any] = []  # the bulk_write result of the attempt that succeeded

    def record() -> None:
        written.append(collection.bulk_write(records, ordered=False))

    finish_despite_interrupt(
        lambda: retrying(
            record,
            f"recording the submitted job(s) {', '.join(str(j.job_id) for j in jobs)}",
        )
    )
    submitted = [list(g) for g in id_groups]
    orphans: list[str] = []
    # fewer matched than moved: a delete took some (or an attempt before the last succeeded)
    if written[-1].acknowledged and written[-1].matched_count < len(all_ids):
        job_ids = [str(j.job_id) for j in jobs]
        recorded = {
            d["_id"]
            for d in collection.find(
                {"_id": {"$in": all_ids}, "slurm.0.job_id": {"$in": job_ids}}, {"_id": 1}
            )
        }
        orphaned = orphaned_tasks(submitted, recorded)
        if orphaned:
            orphans = cancel_orphaned(jobs, orphaned, cluster)
            gone = set(orphaned)
            jobs = [j for i, j in enumerate(jobs) if i not in gone]
            submitted = [g for i, g in enumerate(submitted) if i not in gone]
    problem = job_files_problem(jobs)
    if problem is not None:  # made by submitit just now, below a folder judged before
        cancel_orphaned(jobs, range(len(jobs)), cluster)
        _back_to_staged(
            collection, all_ids, {"slurm.0.job_id": {"$in": [str(j.job_id) for j in jobs]}}
        )
        raise UnsafeFolderError(
            f"hydra.launcher.submitit_folder={folder}: {problem}; another user could replace "
            "the files your jobs load there, so the array was cancelled before it started. "
            "Choose a folder of yours"
        )
    if deferred and jobs:
        start_submitted(sorted({str(job.job_id).split("_")[0] for job in jobs}))
    return jobs, submitted, orphans


#: the ``slurm[0]`` fields that name a submission's job (written once sbatch returned):
#: cleared when experiments are moved to PENDING and when they go back to STAGED
JOB_RECORD_FIELDS = ("array_id", "task_id", "job_id", "num_tasks", "output_files_template")


def _back_to_staged(collection: Any, ids: Sequence[int], ours: Mapping[str, Any]) -> None:
    """Undo :func:`submit_group`'s submission of the PENDING experiments among ``ids`` that
    ``ours`` matches (its mark, or the jobs it recorded): STAGED again, without what the
    submission wrote into them (its mark ``slurm[0].submitting``, the job fields
    :data:`JOB_RECORD_FIELDS`, the fail-fast group ``fail_fast``), so they look as before it:
    neither a recovery nor a fail-fast count takes them for part of it."""
    unset = {f"slurm.0.{k}": "" for k in (*JOB_RECORD_FIELDS, "submitting")}
    collection.update_many(
        {"_id": {"$in": list(ids)}, "status": states.PENDING, **ours},
        {"$set": {"status": states.STAGED}, "$unset": {**unset, failfast.FIELD: ""}},
    )


def job_files_problem(jobs: Sequence[Any]) -> str | None:
    """The first problem of the pickles submitit just wrote for ``jobs`` (submitit Jobs) and
    of the folders it made for them (``core.paths.unsafe_files``: another user's or writable
    by others, an ACL inherited included), or None: the folder they share is walked once,
    the job folders below it and the pickles each. Judged before the deferred start is
    brought forward: the folder was judged before submitit made what is below it."""
    return unsafe_files([job.paths.submitted_pickle for job in jobs])


def always_arrays(executor: Any) -> None:
    """Make a submitit ``AutoExecutor`` for Slurm submit one job as a one-task array
    (``--array=0-0``, job id ``<array>_0``) as it submits several: submitit 1.5.4's
    ``SlurmExecutor._internal_process_submissions`` (``slurm/slurm.py``) takes its array path
    only for more than one submission and sends a single one as a plain job, which tools that
    know only array tasks (SEML 0.5.7's ``detect_killed`` reads ``squeue -o %i`` ids with
    ``_``) take for a dead job. Nothing for another executor (``local``)."""
    from submitit.slurm.slurm import SlurmExecutor

    inner = getattr(executor, "_executor", None)
    if type(inner) is SlurmExecutor:
        inner.__class__ = _one_task_array_executor()


@functools.cache
def _one_task_array_executor() -> type:
    """submitit's ``SlurmExecutor`` whose single submissions are one-task arrays
    (:func:`always_arrays`). It adds no state, so an executor's class can be swapped to it.

    A single submission goes through submitit's plain path (``core.PicklingExecutor``: pickle,
    ``_submit_command``, the pickle moved to ``job.paths.submitted_pickle``) with
    ``map_count=1`` among the parameters, which makes ``_make_sbatch_string`` write
    ``--array=0-0%1`` and the ``%A_%a`` output paths of its array path; ``_submit_command``
    then hands back task 0 as the array path does (``SlurmJob(folder, job_id=
    f"{first_job.job_id}_{a}", tasks=...)``), so the pickle is moved to where the job
    (``JobEnvironment().job_id`` = ``<array>_<task>``) looks for it, and the sbatch script
    stays at ``<array>/<array>_submission.sh``."""
    from submitit.slurm.slurm import SlurmExecutor

    class OneTaskArraySlurmExecutor(SlurmExecutor):
        def _internal_process_submissions(self, delayed_submissions: Any) -> Any:
            if len(delayed_submissions) != 1 or "map_count" in self.parameters:
                return super()._internal_process_submissions(delayed_submissions)
            self.parameters["map_count"] = 1
            try:
                return super()._internal_process_submissions(delayed_submissions)
            finally:
                del self.parameters["map_count"]

        def _submit_command(self, command: str) -> Any:
            job = super()._submit_command(command)
            if self.parameters.get("map_count") != 1:
                return job
            # task 0 of the array, as submitit's array path names it (its sbatch script stays
            # under the array's own id, as for an array of several tasks)
            tasks = list(range(job.num_tasks))
            return self.job_class(folder=self.folder, job_id=f"{job.job_id}_0", tasks=tasks)

    return OneTaskArraySlurmExecutor


#: how long a Slurm array waits to start after sbatch unless :func:`start_submitted` lets it
#: start earlier (seconds): a launcher that dies in between delays its jobs by at most this
DEFERRED_START_S = 60


def deferred_start(params: Mapping[str, Any], cluster: str) -> tuple[dict[str, Any], bool]:
    """The submitit parameters a Slurm array is submitted with, and whether its start must be
    brought forward afterwards (pure): ``--begin=now+60`` (:data:`DEFERRED_START_S`) unless
    the user chose a ``begin`` or a ``hold`` (both then stay theirs, and nothing is changed)
    or a ``deadline`` (sbatch refuses a deadline sooner than the begin time plus the time
    limit, which the user's request alone would meet: such an array goes out undeferred).

    submitit creates each task's folder (``.submitit/%A_%a``, where ``--output`` points) only
    after sbatch returns; on an idle cluster a task can start within milliseconds, before its
    folder exists, and Slurm before 23.02 fails it without output ("Could not open stdout
    file": hydra-ecosystem/hydra#2100). A ``--begin`` in the future keeps every task waiting
    until :func:`start_submitted` moves it to now, once the folders exist and the documents
    name their jobs. Unlike ``--hold`` (which sbatch accepts even for a request no node can
    meet, leaving it pending with ``BadConstraints``), sbatch still refuses an impossible
    ``--begin`` request at once with its own message (checked on Slurm 22.05), and a
    launcher that dies before bringing the start forward leaves jobs that start by themselves
    a minute later, not held for ever. The local executor (``cluster`` not ``"slurm"``) is
    submitted as it is."""
    params = dict(params)
    extra = dict(params.get("slurm_additional_parameters") or {})
    if cluster != "slurm" or any(option_key(extra, o) for o in ("begin", "deadline", "hold")):
        return params, False
    params["slurm_additional_parameters"] = {**extra, "begin": f"now+{DEFERRED_START_S}"}
    return params, True


def start_submitted(array_ids: Sequence[str]) -> None:
    """Let the arrays :func:`deferred_start` deferred start now (``slurm.client.start_now``).
    A failure is a warning only: the arrays are submitted and recorded, and start by
    themselves at their ``--begin`` time, within :data:`DEFERRED_START_S` seconds."""
    try:
        start_now(array_ids)
    except (SlurmError, ValueError) as error:
        log.warning(
            "submitted job(s) %s wait for their start time (in %d s at most): bringing it "
            "forward failed (%s)",
            ", ".join(array_ids),
            DEFERRED_START_S,
            error,
        )


def after_previous_array(params: Mapping[str, Any], previous: str) -> dict[str, Any]:
    """The submitit parameters of a launch's array after its first, with ``array_parallelism``
    set (an array cut from a longer one at Slurm's ``MaxArraySize``, ``sbatch.split_array``, or
    another resource group's): it starts once the array before it, ``previous``, has ended
    (``afterany``: however its tasks ended), joined to the dependency the array has already
    (``after``'s, or the user's own ``additional_parameters.dependency``, which sbatch takes
    over submitit's) with ``,`` (all of them). Pure. So ``array_parallelism=k`` holds for the
    whole sweep, not ``k`` per array (Slurm's ``%k`` only throttles within one array): the
    arrays of a launch, of every resource group, run one after another. A user's dependency of
    alternatives (``?``) cannot be joined with ``,``: the array is left as it is (``k`` per
    array)."""
    params = dict(params)
    extra = dict(params.get("slurm_additional_parameters") or {})
    key = option_key(extra, "dependency")  # the user's own, maybe abbreviated (--depend)
    own = extra[key] if key is not None else params.get("slurm_dependency")
    if own is not None and "?" in str(own):
        return params
    dependency = f"{own},afterany:{previous}" if own else f"afterany:{previous}"
    if key is not None:
        params["slurm_additional_parameters"] = {**extra, key: dependency}
    else:
        params["slurm_dependency"] = dependency
    return params


def local_gpus(launcher: Mapping[str, Any], first_job: int) -> Callable[[int], dict[str, str]]:
    """``per_job_env`` of :func:`submit_group` for ``seml_local``: job ``i`` of the group is the
    submission's job ``first_job + i`` and gets its share of ``visible_gpus``
    (``seml_hydra.job.devices.local_job_environment``)."""
    return lambda i: local_job_environment(launcher, first_job + i)


@dataclass(frozen=True)
class SubmitRequest:
    """One STAGED experiment to submit: its id, the ``hydra.launcher`` node it runs with, its
    batch's payload file and batch id, and the executor (``"slurm"`` or ``"local"``)."""

    exp_id: int
    launcher: Mapping[str, Any]
    payload_id: str
    batch_id: int
    cluster: str


@dataclass
class RequestGroup:
    """Experiments that can share one array job (:class:`RequestGroups`): the group's first
    request (its launcher, payload, batch and executor stand for all of them) and every
    experiment id, in the order added."""

    first: SubmitRequest
    exp_ids: list[int]


class RequestGroups:
    """The requests of a submission grouped as they come (pure): same executor, payload, batch
    and resource set (``sbatch.resource_key``) -> one :class:`RequestGroup`; groups in
    first-seen order. The launcher adds each staged chunk's requests (:meth:`add`), so the
    submission holds ids, not one request per point."""

    def __init__(self) -> None:
        self._groups: dict[tuple[str, str, int, str], RequestGroup] = {}

    def add(self, requests: Iterable[SubmitRequest]) -> None:
        """Add ``requests`` to their groups. The resource key is computed once per launcher
        object among them (the points of a launch share their launcher nodes)."""
        keys: dict[int, tuple[Mapping[str, Any], str]] = {}  # id -> (node kept alive, key)
        for r in requests:
            known = keys.get(id(r.launcher))
            if known is None:
                known = keys[id(r.launcher)] = (r.launcher, resource_key(r.launcher))
            key = (r.cluster, r.payload_id, r.batch_id, known[1])
            group = self._groups.get(key)
            if group is None:
                self._groups[key] = RequestGroup(r, [r.exp_id])
            else:
                group.exp_ids.append(r.exp_id)

    def pop(self, exp_ids: set[int]) -> dict[int, SubmitRequest]:
        """Take the requests of ``exp_ids`` out (groups left empty go); returns ``{id: the
        first request of its group}`` (whose launcher, executor, payload and batch stand for
        it) for those that were here."""
        taken = {i: g.first for g in self._groups.values() for i in g.exp_ids if i in exp_ids}
        for key, group in list(self._groups.items()):
            group.exp_ids = [i for i in group.exp_ids if i not in exp_ids]
            if not group.exp_ids:
                del self._groups[key]
        return taken

    @property
    def groups(self) -> list[RequestGroup]:
        """The groups, in first-seen order."""
        return list(self._groups.values())

    def __len__(self) -> int:
        return sum(len(g.exp_ids) for g in self._groups.values())


def group_requests(requests: Sequence[SubmitRequest]) -> list[RequestGroup]:
    """Group requests that can share one array job: same executor, payload, batch and resource
    set (pure; groups and members in first-seen order; :class:`RequestGroups`)."""
    grouped = RequestGroups()
    grouped.add(requests)
    return grouped.groups


@dataclass
class SubmittedArray:
    """One submitted array job: its id, job name, output folder, and ``{job id: (submitit Job,
    experiment ids)}`` of its tasks; ``fail_fast``: the ``{group, max_failures}`` its
    experiments carry (``job.failfast.mark``), None without ``max_failures``."""

    array_id: str
    name: str
    folder: str
    cluster: str
    jobs: dict[str, tuple[Any, list[int]]]
    #: the job ids (the array's id alone for all of its tasks) cancelled at once because their
    #: experiments were deleted while they were submitted (``submit_group``; a failure to
    #: cancel is logged instead); ``jobs`` holds none of them
    orphans: list[str] = dataclasses.field(default_factory=list)
    fail_fast: dict[str, Any] | None = None
    #: ``(k, n, max_array_size)`` when this is the k-th of the n arrays one group was cut into
    #: at Slurm's ``MaxArraySize`` (``sbatch.split_array``), else None
    part: tuple[int, int, int] | None = None
    #: what tells its resource group from the submission's others (``sbatch.group_labels``:
    #: ``"ntasks=2"``), ``""`` when the submission has one group
    label: str = ""

    def describe(self) -> str:
        """The line the launcher prints for it: ``Submitted <n> job(s) as <cluster> job <id>
        (<name>)``, which resource group it is and why it is one of several arrays when it
        is (:func:`array_note`), and where its output goes."""
        return (
            f"Submitted {len(self.jobs)} job(s) as {self.cluster} job {self.array_id} "
            f"({self.name}{array_note(self.label, self.part)}); output in {self.folder}"
        )


def array_note(label: str, part: tuple[int, int, int] | None) -> str:
    """What the launcher's "Submitted" and ``seml start``'s "Started" lines add after the job
    name (pure): ``", <label>"`` (:attr:`SubmittedArray.label`) when the submission made
    several resource groups, then ``", array k of n: Slurm's MaxArraySize (m) allows at most m
    tasks per array"`` for the k-th of the n arrays a group was cut into
    (:attr:`SubmittedArray.part`); ``""`` for neither."""
    note = f", {label}" if label else ""
    if part is not None:
        k, n, limit = part
        note += (
            f", array {k} of {n}: Slurm's MaxArraySize ({limit}) allows at most {limit} tasks "
            "per array"
        )
    return note


def submit_requests(
    collection: Any, collection_name: str, requests: Sequence[SubmitRequest], **options: Any
) -> list[SubmittedArray]:
    """Submit STAGED experiments, one array job per group of :func:`group_requests`.

    Used by the launcher and by ``seml <collection> start`` (which rebuilds the requests from the
    documents alone). Each array's runner is a ``seml_hydra.job.runner.JobRunner`` on the group's
    payload. Slurm arrays longer than the cluster's ``MaxArraySize`` are split into several
    arrays. Raises :class:`SubmissionError` for the first group sbatch refuses (its documents
    are back to STAGED; groups submitted before it stay submitted), and before any sbatch when
    a value that would go into a job script holds a control character. ``options``: the
    keyword arguments of :func:`submit_groups`, ``db_cfg`` (pickled with the runner: no secret),
    ``launch_id``
    and ``job_env`` (the jobs' environment: the secret, if any), from
    ``seml_hydra.store.db.job_db.job_db_config`` / ``job_db_environment``. A launcher with
    ``after`` gets the Slurm dependency on that batch's arrays (``launch.after``), resolved
    now; :class:`SubmissionError` when it can no longer be satisfied. The experiments one call
    submits with the same ``max_failures`` are one fail-fast group (``job.failfast``: "one
    launch").
    """
    return submit_groups(collection, collection_name, group_requests(requests), **options)


def submit_groups(
    collection: Any,
    collection_name: str,
    groups: Sequence[RequestGroup],
    *,
    db_cfg: Mapping[str, Any] | None,
    job_env: Mapping[str, str] | None = None,
    launch_id: str | None = None,
) -> list[SubmittedArray]:
    """:func:`submit_requests` of requests already grouped (:class:`RequestGroups`: the
    launcher's, built chunk by chunk while it stages). Same arrays, errors and order.
    ``launch_id`` names the fail-fast groups of the submission (``job.failfast``; default: one
    of its own per call), for a caller that submits one launch in several calls."""
    for group in groups:  # `seml start` rebuilds launchers from documents: check them again
        try:
            first = group.first
            name = job_name(collection_name, first.batch_id, first.launcher.get("name"))
            check_script_values(first.launcher, job_name=name, sbatch=first.cluster == "slurm")
        except ValueError as error:
            raise ScriptValueError(f"{error} Nothing was submitted.") from None
    arrays: list[SubmittedArray] = []
    try:
        arrays.extend(
            _submit_arrays(
                collection,
                collection_name,
                groups,
                db_cfg,
                job_env,
                launch_id or uuid.uuid4().hex[:12],
            )
        )
    except SubmissionError as error:  # the arrays before it were submitted and run
        error.submitted = arrays
        raise
    return arrays


def _submit_arrays(
    collection: Any,
    collection_name: str,
    groups: Sequence[RequestGroup],
    db_cfg: Mapping[str, Any] | None,
    job_env: Mapping[str, str] | None,
    launch: str,
) -> Iterator[SubmittedArray]:
    """The arrays of :func:`submit_groups`, each yielded once submitted (the ones before an
    error are submitted and run)."""
    local_jobs = 0  # seml_local jobs so far: job i gets the i-th slice of visible_gpus
    max_array: int | None = None
    name_of_cluster: str | None = None
    previous: str | None = None  # the array submitted last, of any resource group
    names = [
        job_name(collection_name, g.first.batch_id, g.first.launcher.get("name")) for g in groups
    ]
    all_options = [
        sbatch_options(g.first.launcher, comment=collection_name, name=name)
        for g, name in zip(groups, names)
    ]
    labels = group_labels(all_options)  # before a dependency joins the options below
    for group, name, options, label in zip(groups, names, all_options, labels):
        first = group.first
        launcher = first.launcher
        id_groups = chunk(sorted(group.exp_ids), launcher["experiments_per_job"])
        limit_failures = launcher.get("max_failures")
        fail_fast = failfast.mark(f"{launch}-{limit_failures}", limit_failures)
        runner = JobRunner(
            db_cfg=dict(db_cfg) if db_cfg else None,
            collection=collection_name,
            payload_id=first.payload_id,
            primary_log_level=str(launcher.get("primary_log_level", "INFO")),
            other_log_level=str(launcher.get("other_log_level", "ERROR")),
            max_requeues=int(launcher.get("max_requeues", 3)),
        )
        folder = os.path.abspath(str(launcher["submitit_folder"]))
        problem = job_dir_problem("hydra.launcher.submitit_folder", folder)
        if problem is not None:  # checked at staging too; seml start and a changed tree here
            raise SubmissionError(f"{problem}; nothing was submitted")
        params = executor_parameters(launcher, comment=collection_name, name=name)
        try:
            dependency = batch_dependency(collection.database, collection_name, launcher)
        except ValueError as error:
            raise SubmissionError(
                str(error).replace("nothing was staged", "nothing was submitted")
            ) from None
        if dependency is not None:
            params["slurm_dependency"] = options["dependency"] = dependency
        limit = len(id_groups)
        if first.cluster == "slurm":
            if max_array is None:
                try:
                    max_array = max_array_size()
                    name_of_cluster = cluster_name()
                except SlurmError as error:
                    raise SubmissionError(str(error)) from None
            limit = max_array
        parts = split_array(id_groups, limit)
        for number, part in enumerate(parts, 1):
            # submitit always throttles arrays (%256 by default): unset means no limit here
            part_params = {"slurm_array_parallelism": len(part), **params}
            if previous is not None and launcher.get("array_parallelism"):
                chained = after_previous_array(part_params, previous)
                if chained == part_params:
                    log.warning(
                        "array_parallelism=%s holds per array from job %s on: its "
                        "dependency has alternatives (?), which cannot be joined with the "
                        "wait for the array before",
                        launcher.get("array_parallelism"),
                        previous,
                    )
                part_params = chained
            jobs, part, orphans = submit_group(
                collection,
                cluster=first.cluster,
                folder=folder,
                params=part_params,
                runner=runner,
                id_groups=part,
                options=options,
                job_env=job_env,
                cluster_name=name_of_cluster if first.cluster == "slurm" else None,
                executor_args=executor_arguments(launcher, first.cluster),
                per_job_env=local_gpus(launcher, local_jobs) if first.cluster == "local" else None,
                fail_fast=fail_fast,
            )
            if first.cluster == "local":
                local_jobs += len(jobs)
            if not jobs and not orphans:  # a concurrent submission took all of them
                continue
            array_id = str(jobs[0].job_id if jobs else orphans[0]).split("_")[0]
            if jobs:
                previous = array_id
            yield SubmittedArray(
                array_id=array_id,
                name=name,
                folder=folder,
                cluster=first.cluster,
                jobs={str(j.job_id): (j, list(g)) for j, g in zip(jobs, part)},
                orphans=orphans,
                fail_fast=fail_fast,
                part=(number, len(parts), limit) if len(parts) > 1 else None,
                label=label,
            )
