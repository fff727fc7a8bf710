"""Submission: staged experiment ids -> submitit array jobs (one per resource set).

Documents go to PENDING just before ``sbatch`` (so a job that starts at once can claim them),
marked with the submitting process (``slurm[0].submitting``), and back to STAGED if submission
fails; after ``sbatch`` they record ``slurm[0].array_id``, ``num_tasks`` and the sbatch options
used instead of the mark (a MongoDB outage at that moment is ridden out: ``retry.retrying``).
A submission whose process died in between is undone by the next one, which cancels the array
its sbatch may have left
(:func:`recover_interrupted_submissions`). The array's ``--comment`` is the collection (``seml
queue`` groups by it, as SEML does) and its job name ``<collection>_<batch_id>``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import socket
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from seml_hydra.core import states
from seml_hydra.core.errors import UserError
from seml_hydra.core.processes import process_alive, process_start

log = logging.getLogger(__name__)


def _launcher_fields() -> tuple[str, ...]:
    import dataclasses

    from seml_hydra.config import SemlLauncherConf

    return tuple(f.name for f in dataclasses.fields(SemlLauncherConf))


#: the fields of ``hydra.launcher`` (``seml_hydra.config.SemlLauncherConf``)
LAUNCHER_FIELDS = _launcher_fields()
#: generic submitit executor keys (applied to the Slurm and the local executor)
GENERIC_KEYS = (
    "nodes",
    "tasks_per_node",
    "cpus_per_task",
    "gpus_per_node",
    "mem_gb",
    "timeout_min",
)
#: Slurm-only launcher fields, passed to submitit as ``slurm_<key>``
SLURM_KEYS = (
    "signal_delay_s",
    "partition",
    "qos",
    "account",
    "constraint",
    "exclude",
    "gres",
    "setup",
    "array_parallelism",
)
#: sbatch options the launcher sets itself; users must not set them through additional_parameters
RESERVED_SBATCH_OPTIONS = ("comment", "job-name", "job_name", "array", "output", "error")
#: environment variables a job must not inherit from the submitting shell (design.md: submitting
#: from inside a Slurm job leaks SLURM_*; torch refuses a leaked MASTER_ADDR/RANK)
LEAKY_ENV_PREFIXES = ("SLURM_", "SBATCH_", "SUBMITIT_")
LEAKY_ENV_NAMES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "JAX_COORDINATOR_ADDRESS",
    "JAX_COORDINATOR_PORT",
    "JAX_NUM_PROCESSES",
)


class SubmissionError(UserError):
    """sbatch (or the local executor) refused the submission; the message is for the user."""


class JobFilesError(SubmissionError):
    """The job files (submitit's pickles and sbatch script) could not be written into the
    submitit folder (a full disk, a read-only or unwritable folder): no sbatch ran. The message
    names the folder, the system's reason and what to do (:func:`job_files_message`)."""


def job_files_message(folder: str, error: OSError) -> str:
    """The user's message for an ``OSError`` while writing the job files into ``folder`` (pure),
    e.g. ``cannot write the job files in /x: No space left on device; free space or set
    hydra.launcher.submitit_folder``."""
    import errno

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


#: launcher fields whose text is written into the sbatch script (``#SBATCH --<option>=<value>``)
SCRIPT_TEXT_FIELDS = ("partition", "qos", "account", "constraint", "exclude", "gres")


def control_character(text: str) -> str | None:
    """The first control character of ``text`` (code point below 0x20 - null, tab, newline,
    carriage return... - or 0x7f, DEL), or None (pure)."""
    return next((c for c in text if ord(c) < 0x20 or ord(c) == 0x7F), None)


def script_values(launcher: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(field, text)`` of every launcher value that reaches the sbatch script (pure):
    :data:`SCRIPT_TEXT_FIELDS`, ``submitit_folder`` (the ``--output`` path), each ``setup``
    line (``setup[i]``) and each ``additional_parameters`` key and value. ``None`` is left out
    (never sent); other values as ``str()``, as submitit writes them."""
    out = [(key, str(launcher[key])) for key in SCRIPT_TEXT_FIELDS if launcher.get(key) is not None]
    if launcher.get("submitit_folder") is not None:
        out.append(("submitit_folder", str(launcher["submitit_folder"])))
    setup = launcher.get("setup")
    if isinstance(setup, str):
        setup = [setup]
    for i, line in enumerate(setup or ()):
        out.append((f"setup[{i}]", str(line)))
    for key, value in (launcher.get("additional_parameters") or {}).items():
        out.append(("additional_parameters (an option name)", str(key)))
        if value is not None:
            out.append((f"additional_parameters.{key}", str(value)))
    return out


def check_script_values(launcher: Mapping[str, Any], *, job_name: str | None = None) -> None:
    """Refuse a launcher whose values would break the sbatch script.

    submitit writes each option as one ``#SBATCH --<key>=<value>`` line and each ``setup``
    entry as one shell line: a newline in a value ends the ``#SBATCH`` block (sbatch ignores
    every ``#SBATCH`` line after a command) and runs the rest as a shell command. So no value
    of :func:`script_values` (nor ``job_name``, the ``--job-name``) may hold a control
    character (:func:`control_character`); ``setup`` is a list of lines by design, but each
    entry must be one line.

    Raises:
        ValueError: naming the field and the character, e.g. ``hydra.launcher.partition=
            'debug\\n#x' contains the control character '\\n'``.
    """
    values = script_values(launcher)
    if job_name is not None:
        values.append(("job name (<collection>_<batch_id>)", job_name))
    for name, text in values:
        char = control_character(text)
        if char is not None:
            what = name if name.startswith("job name") else f"hydra.launcher.{name}"
            hint = (
                " (setup is a list: one shell line per entry)" if name.startswith("setup") else ""
            )
            raise ValueError(
                f"{what}={text!r} contains the control character {char!r}: values written "
                f"into the Slurm job script must be a single line of printable text{hint}."
            )


def validate_launcher(launcher: Mapping[str, Any]) -> None:
    """Reject launcher values that cannot work, before anything is staged.

    Raises ``ValueError`` with the field and what to do: unknown fields (a typo added with
    ``+hydra.launcher.mem_gbb=4``), non-positive counts, times or sizes, reserved sbatch options in
    ``additional_parameters``; ``experiments_per_job > 1`` with more than one task (mutually
    exclusive, as in SEML's multi-task change); non-positive counts; a control character (a
    newline...) in a value that goes into the job script (:func:`check_script_values`).
    """
    unknown = sorted(set(launcher) - set(LAUNCHER_FIELDS) - {"_target_"})
    if unknown:
        import difflib

        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, LAUNCHER_FIELDS, n=1)
            hints.append(f"{key}" + (f" (did you mean {close[0]}?)" if close else ""))
        raise ValueError(
            f"unknown launcher field(s) hydra.launcher.{', '.join(hints)}; the fields are listed "
            "in the README (raw sbatch options go in hydra.launcher.additional_parameters)."
        )
    for key in ("nodes", "tasks_per_node", "experiments_per_job", "timeout_min"):
        if not isinstance(launcher.get(key), int) or launcher[key] < 1:
            raise ValueError(f"hydra.launcher.{key}={launcher.get(key)!r}: must be an integer >= 1")
    for key in ("cpus_per_task", "gpus_per_node", "mem_gb", "array_parallelism"):
        value = launcher.get(key)
        if value is not None and (isinstance(value, bool) or not value > 0):
            raise ValueError(f"hydra.launcher.{key}={value!r}: must be positive (or null)")
    reserved = [
        k for k in (launcher.get("additional_parameters") or {}) if k in RESERVED_SBATCH_OPTIONS
    ]
    if reserved:
        raise ValueError(
            f"hydra.launcher.additional_parameters sets {', '.join(reserved)}, which the launcher "
            "sets itself (comment = collection, job-name = <collection>_<batch>, array, output). "
            "Remove them; use hydra.launcher.collection to change the comment."
        )
    if launcher["experiments_per_job"] > 1 and launcher["nodes"] * launcher["tasks_per_node"] > 1:
        raise ValueError(
            f"hydra.launcher.experiments_per_job={launcher['experiments_per_job']} with "
            f"{launcher['nodes']} node(s) x {launcher['tasks_per_node']} task(s): several "
            "experiments per job and multi-task jobs are mutually exclusive. Set "
            "experiments_per_job=1 or nodes=1 tasks_per_node=1."
        )
    check_script_values(launcher)


def resource_key(launcher: Mapping[str, Any]) -> str:
    """A string identifying the resource set (points with equal keys share one array job)."""
    keys = (*GENERIC_KEYS, *SLURM_KEYS, "additional_parameters", "experiments_per_job")
    return json.dumps({k: launcher.get(k) for k in keys}, sort_keys=True, default=str)


def executor_parameters(launcher: Mapping[str, Any], *, comment: str, name: str) -> dict[str, Any]:
    """submitit ``update_parameters`` kwargs for a launcher node (pure). ``None`` is never sent.

    The srun step always gets the task count explicitly (``--ntasks``, ``--ntasks-per-node``),
    never a bare srun that lets Slurm guess it (SEML multi-task change).
    """
    params: dict[str, Any] = {k: launcher[k] for k in GENERIC_KEYS if launcher.get(k) is not None}
    params["name"] = name
    for key in SLURM_KEYS:
        if launcher.get(key) is not None:
            params[f"slurm_{key}"] = launcher[key]
    params["slurm_comment"] = comment
    extra = dict(launcher.get("additional_parameters") or {})
    if extra:
        params["slurm_additional_parameters"] = extra
    ntasks = launcher["nodes"] * launcher["tasks_per_node"]
    params["slurm_srun_args"] = [
        f"--ntasks={ntasks}",
        f"--ntasks-per-node={launcher['tasks_per_node']}",
    ]
    return params


def sbatch_options(launcher: Mapping[str, Any], *, comment: str, name: str) -> dict[str, Any]:
    """The sbatch options a point is submitted with, under sbatch's own names (recorded in
    ``slurm[0].sbatch_options`` as SEML does). Pure."""
    names = {
        "nodes": "nodes",
        "tasks_per_node": "ntasks-per-node",
        "cpus_per_task": "cpus-per-task",
        "gpus_per_node": "gpus-per-node",
        "timeout_min": "time",
        "partition": "partition",
        "qos": "qos",
        "account": "account",
        "constraint": "constraint",
        "exclude": "exclude",
        "gres": "gres",
    }
    out = {flag: launcher[key] for key, flag in names.items() if launcher.get(key) is not None}
    if launcher.get("mem_gb") is not None:
        out["mem"] = mem_option(launcher["mem_gb"])
    out["ntasks"] = launcher["nodes"] * launcher["tasks_per_node"]
    out["comment"] = comment
    out["job-name"] = name
    out.update(launcher.get("additional_parameters") or {})
    return out


def mem_option(mem_gb: float) -> str:
    """sbatch's ``--mem`` value for ``mem_gb`` GB: ``16.0`` -> ``"16G"``, ``0.5`` -> ``"512M"``
    (sbatch rejects ``16.0G``; same rule as submitit's ``_convert_mem``)."""
    mem = float(mem_gb)
    return f"{int(mem)}G" if mem.is_integer() else f"{int(mem * 1024)}M"


def chunk(ids: Sequence[int], size: int) -> list[list[int]]:
    """Split ``ids`` into consecutive groups of at most ``size`` (one group per array task)."""
    return [list(ids[i : i + size]) for i in range(0, len(ids), size)]


@contextlib.contextmanager
def clean_environment(extra: Mapping[str, str] | None = None) -> Iterator[None]:
    """Temporarily drop the variables a job must not inherit (sbatch exports the environment)
    and set ``extra`` (e.g. ``seml_hydra.store.job_db.job_db_environment``: a secret reaches the job
    through the environment of ``sbatch`` / the local job process, never a file or a command
    line); everything is restored afterwards."""
    extra = dict(extra or {})
    saved = {
        k: v
        for k, v in os.environ.items()
        if k.startswith(LEAKY_ENV_PREFIXES) or k in LEAKY_ENV_NAMES or k in extra
    }
    for key in saved:
        del os.environ[key]
    os.environ.update(extra)
    try:
        yield
    finally:
        for key in extra:
            os.environ.pop(key, None)
        os.environ.update(saved)


#: a submission mark of a process on another machine (which cannot be checked from here) counts
#: as a dead submission after this many seconds; sbatch answers or fails well within it
SUBMIT_TIMEOUT_S = 600.0


def submission_mark(folder: str | None = None) -> dict[str, Any]:
    """``slurm[0].submitting`` of the experiments this process is about to submit: host, pid,
    process start, time, a random ``token`` unique to this submission, and the submitit
    ``folder`` it writes the job files into (which tells its array in Slurm: the job's
    ``Command``, see :func:`cancel_orphan_arrays`)."""
    import uuid
    from datetime import datetime, timezone

    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "started": process_start(pid),
        "time": datetime.now(timezone.utc),
        # tells this submission's documents from those another one marked meanwhile
        "token": uuid.uuid4().hex,
        "folder": folder,
    }


def submitter_gone(mark: Mapping[str, Any]) -> bool:
    """Whether the process of a ``slurm[0].submitting`` mark no longer runs: on this host, no
    process with its pid and start time; on another host, marked over :data:`SUBMIT_TIMEOUT_S`
    ago."""
    from datetime import datetime, timezone

    if mark.get("host") == socket.gethostname():
        try:
            started = mark.get("started")
            return started is None or not process_alive(int(mark["pid"]), started)
        except (KeyError, TypeError, ValueError):
            return True
    since = mark.get("time")
    if not isinstance(since, datetime):
        return True
    if since.tzinfo is None:  # pymongo returns naive UTC datetimes by default
        since = since.replace(tzinfo=timezone.utc)
    return (datetime.now(timezone.utc) - since).total_seconds() > SUBMIT_TIMEOUT_S


def recover_interrupted_submissions(
    collection: Any, query: Mapping[str, Any] | None = None
) -> list[int]:
    """Put the matching experiments whose submission died half-way back to STAGED; their ids.

    The rule: an experiment is PENDING without a Slurm job (``slurm[0].array_id``) only while
    the process submitting it waits for sbatch: :func:`submit_group` marks it with
    ``slurm[0].submitting`` (that process's host, pid, start time, and the time) and replaces
    the mark with the job's ids. Once the marking process is gone (SIGKILL, a closed terminal,
    a crash: see :func:`submitter_gone`) an experiment still marked, and claimed by no job (no
    ``execution``), would stay PENDING forever: a launch of its sweep and ``seml start`` call
    this first, and submit it again. No experiment runs twice: a job the dead process's sbatch
    still created mostly cannot start a task (submitit moves its pickles into place only after
    sbatch returned), and a job claims only a PENDING experiment, atomically, so of two jobs of
    one experiment only one runs it, and a job claims a PENDING experiment only for the array
    its document records (``seml_hydra.job.runner.pending_for``). Before the experiments go back to
    STAGED, the array the dead process's sbatch may still have created is cancelled
    (:func:`cancel_orphan_arrays`): no document records it, so it would run nothing anyway.
    """
    lost_filter = {
        "status": states.PENDING,
        "slurm.0.submitting": {"$exists": True},
        "slurm.0.array_id": {"$exists": False},
        "execution": {"$exists": False},
    }
    selected = {"$and": [dict(query), lost_filter]} if query else lost_filter
    docs = list(collection.find(selected, {"slurm": 1, "batch_id": 1}).sort("_id", 1))
    lost_marks = {d["_id"]: d for d in docs if submitter_gone(d["slurm"][0]["submitting"])}
    lost = list(lost_marks)
    if lost:
        cancel_orphan_arrays(
            collection,
            {d.get("batch_id") for d in lost_marks.values()},
            {d["slurm"][0]["submitting"].get("folder") for d in lost_marks.values()},
        )
        collection.update_many(
            {"_id": {"$in": lost}, **lost_filter},
            {"$set": {"status": states.STAGED}, "$unset": {"slurm.0.submitting": ""}},
        )
    return lost


def orphan_arrays(rows: Sequence[Any], collection_name: str, batch_ids: set[Any]) -> list[str]:
    """The ids of the arrays among squeue ``rows`` (``seml_hydra.slurm.client.SqueueRow``) that a
    submission of batches ``batch_ids`` of collection ``collection_name`` made (pure):
    comment = the collection, job name ``<collection>_<batch_id>`` (:func:`submit_requests`);
    sorted numerically."""
    names = {f"{collection_name}_{b}" for b in batch_ids}
    arrays = {
        str(row.array_job_id if row.array_job_id is not None else row.job_id_raw)
        for row in rows
        if row.comment == collection_name and row.name in names
    }
    return sorted(arrays, key=int)


def made_in(command: str | None, folders: set[Any]) -> bool:
    """Whether a job's ``Command`` (``scontrol show job``: the sbatch script submitit wrote) lies
    in one of the submitit ``folders`` (pure): under the folder's first part that holds no job
    id placeholder (``%j``, ``%A``...: submitit writes the script there before the id exists,
    ``submitit.core.utils.JobPaths.get_first_id_independent_folder``)."""
    from submitit.core.utils import JobPaths

    if not command:
        return False
    for folder in folders:
        if isinstance(folder, str) and folder:
            base = str(JobPaths.get_first_id_independent_folder(folder))
            if base != os.sep and command.startswith(base.rstrip(os.sep) + os.sep):
                return True
    return False


def cancel_orphan_arrays(collection: Any, batch_ids: set[Any], folders: set[Any]) -> list[str]:
    """Cancel the Slurm arrays of batches ``batch_ids`` of ``collection`` that no document
    records (:func:`orphan_arrays`) and whose job script lies in one of the submitit
    ``folders`` of the dead submissions' marks (:func:`made_in`: a launch of a collection of
    the same name in another database is not ours): made by a submitter that died between
    ``sbatch`` and the write of the job's ids. Returns their ids (each is logged as a
    warning).

    Only the user's own jobs are asked for (squeue), then the documents: a batch one of whose
    experiments still carries the mark of a live submitter is left out (its array may be
    waiting for that submitter's record; a mark goes only with the record, so an array squeue
    listed before the documents were read is either recorded or marked by its live
    submitter). Cancelling rather than recording: which experiments an orphan runs cannot be
    told safely from Slurm. Slurm errors are logged and nothing is cancelled (a cluster without
    Slurm, e.g. submitit's local executor).
    """
    from seml_hydra.slurm import client as slurm

    batches = {b for b in batch_ids if b is not None}
    if not batches:
        return []
    try:
        rows = slurm.squeue_jobs()
    except (slurm.SlurmError, OSError) as error:
        log.warning("Could not look for orphan Slurm arrays of %s: %s", collection.name, error)
        return []
    marked = collection.find(
        {"batch_id": {"$in": sorted(batches)}, "slurm.0.submitting": {"$exists": True}},
        {"batch_id": 1, "slurm": 1},
    )
    busy = {d.get("batch_id") for d in marked if not submitter_gone(d["slurm"][0]["submitting"])}
    candidates = orphan_arrays(rows, collection.name, batches - busy)
    if not candidates:
        return []
    values = [int(a) for a in candidates] + candidates
    recorded = {
        str(entry.get("array_id"))
        for d in collection.find(
            {
                "$or": [
                    {"slurm.array_id": {"$in": values}},
                    {"execution.array_id": {"$in": values}},
                ]
            },
            {"slurm": 1, "execution": 1},
        )
        for entry in [*(d.get("slurm") or []), d.get("execution") or {}]
        if isinstance(entry, Mapping)
    }
    try:
        orphans = [
            a
            for a in candidates
            if a not in recorded
            and any(made_in(r.get("Command"), folders) for r in slurm.scontrol_show_job(a))
        ]
        if not orphans:
            return []
        slurm.scancel(orphans)
    except slurm.SlurmError as error:
        log.warning("Could not cancel orphan Slurm array(s) %s: %s", ", ".join(orphans), error)
        return []
    log.warning(
        "Cancelled Slurm array(s) %s of collection %s: submitted by a process that died before "
        "recording them; their experiments are submitted again",
        ", ".join(orphans),
        collection.name,
    )
    return orphans


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
) -> tuple[list[Any], list[list[int]]]:
    """Submit one resource group as one array job; returns ``(submitit Jobs, id groups)``: one
    job per group submitted, in order, which are ``id_groups`` less the ids this process did
    not move (both empty, and no sbatch, when it moved none).

    The groups' documents are set PENDING (from STAGED) and marked as being submitted by this
    process first (:func:`submission_mark`), then submitted; on success each records its
    ``slurm[0]`` fields instead of the mark (``slurm[0].cluster``: ``cluster_name``, the Slurm
    cluster's own name, else the executor ``cluster``), on failure every one of them goes back
    to STAGED and :class:`SubmissionError` carries sbatch's message. Should this process die in
    between, the next submission of them recovers them (:func:`recover_interrupted_submissions`).
    Only the documents this update moved are submitted and written afterwards (filtered on its
    mark's ``token``): an experiment a concurrent submission moved first is neither submitted
    twice nor has its ``slurm[0]`` overwritten. ``job_env`` is set in the submitting
    environment only (:func:`clean_environment`).
    """
    import submitit

    all_ids = [i for group in id_groups for i in group]
    # the old job of a re-run experiment must not be taken for its new one meanwhile
    stale = ("array_id", "task_id", "job_id", "num_tasks", "output_files_template")
    mark = submission_mark(folder)
    collection.update_many(
        {"_id": {"$in": all_ids}, "status": states.STAGED},
        {
            "$set": {"status": states.PENDING, "slurm.0.submitting": mark},
            "$unset": {f"slurm.0.{k}": "" for k in stale},
        },
    )
    # only what this update moved: a concurrent launch or `seml start` may have moved (and
    # submitted) some of them first; every later write is filtered on this submission's mark
    ours = {"slurm.0.submitting.token": mark["token"]}
    moved = {d["_id"] for d in collection.find({"_id": {"$in": all_ids}, **ours}, {"_id": 1})}
    id_groups = [g for g in ([i for i in group if i in moved] for group in id_groups) if g]
    if not id_groups:
        return [], []
    all_ids = [i for group in id_groups for i in group]
    try:
        # submitit's own limit on timeout requeues stays above ours (JobRunner.max_requeues)
        executor = submitit.AutoExecutor(
            folder=folder,
            cluster=cluster,
            slurm_max_num_timeout=getattr(runner, "max_requeues", 3) + 1,
        )
        executor.update_parameters(**params)
        stderr = io.StringIO()
        with clean_environment(job_env), contextlib.redirect_stderr(stderr):
            jobs = executor.map_array(runner, [list(g) for g in id_groups])
    except BaseException as error:  # Ctrl-C during sbatch too: never PENDING without a job
        collection.update_many(
            {"_id": {"$in": all_ids}, "status": states.PENDING, **ours},
            {"$set": {"status": states.STAGED}, "$unset": {"slurm.0.submitting": ""}},
        )
        if not isinstance(error, Exception):
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
    from seml_hydra.store.retry import retrying

    finish_despite_interrupt(
        lambda: retrying(
            lambda: collection.bulk_write(records, ordered=False),
            f"recording the submitted job(s) {', '.join(str(j.job_id) for j in jobs)}",
        )
    )
    return jobs, [list(g) for g in id_groups]


@dataclass(frozen=True)
class SubmitRequest:
    """One STAGED experiment to submit: its id, the ``hydra.launcher`` node it runs with, its
    batch's payload file and batch id, and the executor (``"slurm"`` or ``"local"``)."""

    exp_id: int
    launcher: Mapping[str, Any]
    payload_id: str
    batch_id: int
    cluster: str


def group_requests(requests: Sequence[SubmitRequest]) -> list[list[SubmitRequest]]:
    """Group requests that can share one array job: same executor, payload, batch and resource
    set (pure; groups and members in first-seen order)."""
    groups: dict[tuple[str, str, int, str], list[SubmitRequest]] = {}
    for r in requests:
        key = (r.cluster, r.payload_id, r.batch_id, resource_key(r.launcher))
        groups.setdefault(key, []).append(r)
    return list(groups.values())


@dataclass
class SubmittedArray:
    """One submitted array job: its id, job name, output folder, and ``{job id: (submitit Job,
    experiment ids)}`` of its tasks."""

    array_id: str
    name: str
    folder: str
    cluster: str
    jobs: dict[str, tuple[Any, list[int]]]


def submit_requests(
    collection: Any,
    collection_name: str,
    requests: Sequence[SubmitRequest],
    *,
    db_cfg: Mapping[str, Any] | None,
    job_env: Mapping[str, str] | None = None,
) -> list[SubmittedArray]:
    """Submit STAGED experiments, one array job per group of :func:`group_requests`.

    Used by the launcher and by ``seml <collection> start`` (which rebuilds the requests from the
    documents alone). Each array's runner is a ``seml_hydra.job.runner.JobRunner`` on the group's
    payload. Slurm arrays longer than the cluster's ``MaxArraySize`` are split into several
    arrays. Raises :class:`SubmissionError` for the first group sbatch refuses (its documents
    are back to STAGED; groups submitted before it stay submitted), and before any sbatch when
    a value that would go into a job script holds a control character. ``db_cfg`` (pickled with
    the runner: no secret) and ``job_env`` (the jobs' environment: the secret, if any) come from
    ``seml_hydra.store.job_db.job_db_config`` / ``job_db_environment``.
    """
    from seml_hydra.job.runner import JobRunner

    groups = group_requests(requests)
    for group in groups:  # `seml start` rebuilds launchers from documents: check them again
        try:
            check_script_values(
                group[0].launcher, job_name=f"{collection_name}_{group[0].batch_id}"
            )
        except ValueError as error:
            raise SubmissionError(f"{error} Nothing was submitted.") from None
    arrays = []
    max_array: int | None = None
    name_of_cluster: str | None = None
    for group in groups:
        first = group[0]
        launcher = first.launcher
        name = f"{collection_name}_{first.batch_id}"
        id_groups = chunk(sorted(r.exp_id for r in group), launcher["experiments_per_job"])
        runner = JobRunner(
            db_cfg=dict(db_cfg) if db_cfg else None,
            collection=collection_name,
            payload_id=first.payload_id,
            primary_log_level=str(launcher.get("primary_log_level", "INFO")),
            other_log_level=str(launcher.get("other_log_level", "ERROR")),
            max_requeues=int(launcher.get("max_requeues", 3)),
        )
        folder = os.path.abspath(str(launcher["submitit_folder"]))
        params = executor_parameters(launcher, comment=collection_name, name=name)
        limit = len(id_groups)
        if first.cluster == "slurm":
            if max_array is None:
                from seml_hydra.slurm.client import SlurmError, cluster_name, max_array_size

                try:
                    max_array = max_array_size()
                    name_of_cluster = cluster_name()
                except SlurmError as error:
                    raise SubmissionError(str(error)) from None
            limit = max_array
        for part in split_array(id_groups, limit):
            # submitit always throttles arrays (%256 by default): unset means no limit here
            part_params = {"slurm_array_parallelism": len(part), **params}
            jobs, part = submit_group(
                collection,
                cluster=first.cluster,
                folder=folder,
                params=part_params,
                runner=runner,
                id_groups=part,
                options=sbatch_options(launcher, comment=collection_name, name=name),
                job_env=job_env,
                cluster_name=name_of_cluster if first.cluster == "slurm" else None,
            )
            if not jobs:  # a concurrent submission took all of them: nothing submitted here
                continue
            arrays.append(
                SubmittedArray(
                    array_id=str(jobs[0].job_id).split("_")[0],
                    name=name,
                    folder=folder,
                    cluster=first.cluster,
                    jobs={str(j.job_id): (j, list(g)) for j, g in zip(jobs, part)},
                )
            )
    return arrays


def split_array(id_groups: Sequence[Sequence[int]], max_array_size: int) -> list[list[list[int]]]:
    """Cut an array's task list into arrays of at most ``max_array_size`` tasks (Slurm's
    ``MaxArraySize``: task ids must stay below it). Pure."""
    size = max(1, int(max_array_size))
    return [[list(g) for g in id_groups[i : i + size]] for i in range(0, len(id_groups), size)]
