"""The library behind the ``seml`` command: pure filters and decisions, plus MongoDB/Slurm I/O.

Pure parts (no I/O, tested alone): :func:`parse_states`, :func:`parse_filter_dict`,
:func:`build_filter`, :func:`task_of`, :func:`decide_killed`, :func:`tasks_to_cancel`,
:func:`id_ranges_by_state`, :func:`is_listed_collection`.

I/O parts take a pymongo database or collection and run Slurm's clients through
:mod:`seml_hydra.slurm.client` (argument lists, never a shell). Every user-facing problem raises
:class:`ManageError` (or ``DatabaseError`` / ``SlurmError`` / ``SubmissionError``) with a complete
message; nothing here prints or exits. Heavy modules (pymongo, submitit) are imported inside the
functions, so importing this module is cheap.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from seml_hydra.core import states
from seml_hydra.core.errors import UserError
from seml_hydra.store.collections import is_reserved_collection, metrics_collection_name
from seml_hydra.store.payload import (
    delete_orphan_payloads,
    hydra_base,
    payload_ids,
    restricted_to,
)

#: collections that are not experiment collections (never listed, dropped or completed)
#: destructive commands ask for confirmation above this many experiments (SEML's threshold)
CONFIRM_THRESHOLD = 10
#: a heartbeat younger than this (seconds) proves a run alive when Slurm has no record of its
#: job (Sacred beats every 10 s; see :func:`decide_killed`)
HEARTBEAT_STALE_S = states.HEARTBEAT_STALE_S
#: how long cancel waits for Slurm to end cancelled tasks before re-setting INTERRUPTED
CANCEL_WAIT_S = 60.0
#: lines of the job's output kept as ``fail_trace`` of a KILLED experiment
TRACE_LINES = 40
#: the ``slurm[i]`` fields a submission writes (ours, and SEML 0.5's ``reschedule_file``);
#: cleared on reset (a reset experiment has no job)
SLURM_JOB_FIELDS = (
    "array_id",
    "task_id",
    "job_id",
    "num_tasks",
    "output_files_template",
    "reschedule_file",
    "submitting",
)
#: sbatch options a submission sets itself; removed on reset, as SEML's ``reset_slurm_dict``
SUBMISSION_SBATCH_OPTIONS = ("job-name", "output", "array", "comment")
#: where ``cancel`` records that the user asked for the interruption (Sacred's observer never
#: writes ``execution``; ``stage.RUN_FIELDS`` clears it on a re-run)
CANCEL_MARK = "execution.cancel_time"


class ManageError(UserError):
    """A problem explained for the user (the CLI prints ``str(err)`` in one line, exit 1)."""


# ------------------------------------------------------------------------------- pure: filters


def parse_states(values: Iterable[str] | None) -> list[str]:
    """Normalize ``-s`` values: ``["failed,killed", "Interrupted"]`` -> canonical state names.

    Commas and spaces separate states, case is ignored, SEML's ``QUEUED`` means ``STAGED``.
    Returns ``[]`` for no value. Raises :class:`ManageError` naming an unknown state.
    """
    out: list[str] = []
    for value in values or ():
        for part in re.split(r"[,\s]+", str(value).strip()):
            if not part:
                continue
            name = states.ALIASES.get(part.upper(), part.upper())
            if name not in states.ALL:
                raise ManageError(
                    f"Unknown state {part!r}; the states are {', '.join(states.ALL)}."
                )
            if name not in out:
                out.append(name)
    return out


def parse_filter_dict(text: str | None) -> dict[str, Any]:
    """Parse ``-fd``: a JSON or YAML mapping (``'{"config.model.name": "small"}'``,
    ``"{config.seed: 3}"``). ``None``/empty gives ``{}``; anything but a mapping raises
    :class:`ManageError`."""
    if text is None or not str(text).strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        import yaml

        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ManageError(f"--filter-dict is neither JSON nor YAML: {error}") from None
    if not isinstance(value, dict):
        raise ManageError(
            f"--filter-dict must be a mapping such as '{{\"config.seed\": 3}}', got {text!r}."
        )
    return value


def _state_values(names: Iterable[str]) -> list[str]:
    """Stored values matching ``names`` (STAGED also matches SEML's old ``QUEUED``)."""
    values = list(names)
    values += [alias for alias, name in states.ALIASES.items() if name in values]
    return values


def build_filter(
    *,
    sacred_id: int | None = None,
    batch_id: int | None = None,
    filter_states: Sequence[str] | None = None,
    filter_dict: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The MongoDB filter of the common options (pure). All given parts must match (AND);
    ``filter_states`` empty or None means every state."""
    query: dict[str, Any] = dict(filter_dict or {})
    parts = []
    if sacred_id is not None:
        parts.append({"_id": sacred_id})
    if batch_id is not None:
        parts.append({"batch_id": batch_id})
    if filter_states:
        parts.append({"status": {"$in": _state_values(filter_states)}})
    for part in parts:
        for key, value in part.items():
            if key in query:
                query["$and"] = [*query.get("$and", []), {key: value}]
            else:
                query[key] = value
    return query


@dataclass(frozen=True)
class Selection:
    """What the common options select: ``-id``, ``-b``, ``-s``, ``-fd``."""

    sacred_id: int | None = None
    batch_id: int | None = None
    filter_states: tuple[str, ...] = ()
    filter_dict: Mapping[str, Any] = field(default_factory=dict)

    def query(
        self, default_states: Iterable[str] = (), allowed: Iterable[str] | None = None
    ) -> dict[str, Any]:
        """The filter, with ``default_states`` when no ``-s`` was given. ``allowed`` (if given)
        limits the states a command may act on: a ``-s`` outside it raises ManageError."""
        chosen = list(self.filter_states) or list(default_states)
        if allowed is not None:
            allowed = list(allowed)
            bad = [s for s in chosen if s not in allowed]
            if bad:
                raise ManageError(
                    f"This command works on experiments in the states {', '.join(allowed)}, "
                    f"not {', '.join(bad)}."
                )
            chosen = chosen or allowed
        return build_filter(
            sacred_id=self.sacred_id,
            batch_id=self.batch_id,
            filter_states=chosen,
            filter_dict=self.filter_dict,
        )


def is_listed_collection(name: str) -> bool:
    """Whether ``name`` is an experiment collection to show (not counters, GridFS, metrics,
    ``seml_hydra_metrics.*``)."""
    return not is_reserved_collection(name)


#: the state shown for documents whose ``status`` is not a string (forged or broken)
MALFORMED = "MALFORMED"


def state_of(status: Any) -> str:
    """A stored ``status`` as a state name (pure): SEML's aliases mapped (``QUEUED`` ->
    ``STAGED``), a missing or empty one ``UNKNOWN``, one that is not a string (a dict, a
    number: a forged or broken document) :data:`MALFORMED`."""
    if status is None or status == "":
        return "UNKNOWN"
    if not isinstance(status, str):
        return MALFORMED
    return states.ALIASES.get(status, status)


def malformed_message(ids: Sequence[Any], what: str = "experiment(s)") -> str:
    """The one line telling about documents with a malformed ``status`` (pure)."""
    from seml_hydra.core.ranges import format_ids

    return (
        f"{len(ids)} {what} with a malformed status (not a state name): ids {format_ids(ids)}; "
        "they are left alone (fix their status, or remove them with `delete -id <id>`)."
    )


def id_ranges_by_state(docs: Iterable[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """``{state: sorted ids}`` in life-cycle order (unknown states after the known ones;
    :func:`state_of` names them; integer ids first, then the others by ``str``)."""
    by_state: dict[str, list[Any]] = {}
    for doc in docs:
        by_state.setdefault(state_of(doc.get("status")), []).append(doc.get("_id"))
    order = {s: i for i, s in enumerate(states.ALL)}
    return {
        s: sorted(by_state[s], key=_sort_key)
        for s in sorted(by_state, key=lambda s: (order.get(s, len(order)), s))
    }


def _sort_key(value: Any) -> tuple[int, Any]:
    return (0, value) if isinstance(value, int) else (1, str(value))


# ------------------------------------------------------------------------------- pure: jobs


def task_of(doc: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(cluster, job id)`` of the Slurm task that runs (or will run) the experiment, or None
    when it has none yet. The job id is ``"<array_id>_<task_id>"``, or the plain ``"<job_id>"``
    when the submission was a single job (submitit submits one task without ``--array``; Slurm
    rejects ``"<id>_0"`` for such a job).

    A claimed experiment's ``execution`` (written by the job itself) wins over the submission's
    ``slurm[0]``. The cluster is ``"local"`` for submitit's local executor (no Slurm job).
    """
    slurm = doc.get("slurm")
    first = slurm[0] if isinstance(slurm, list) and slurm else slurm
    first = first if isinstance(first, Mapping) else {}
    execution = doc.get("execution") or {}
    if isinstance(execution, Mapping) and execution.get("array_id") is not None:
        cluster = str(execution.get("cluster") or "slurm")
        array, task = execution["array_id"], execution.get("task_id", 0)
    elif first.get("array_id") is not None and first.get("task_id") is not None:
        cluster = str(first.get("cluster") or "slurm")
        array, task = first["array_id"], first["task_id"]
    else:
        return None
    job_id = first.get("job_id")
    single = str(first.get("array_id")) == str(array) and (
        isinstance(job_id, str) and "_" not in job_id or first.get("num_tasks") == 1
    )
    return cluster, str(array) if single and task == 0 else f"{array}_{task}"


def array_of(doc: Mapping[str, Any]) -> str | None:
    """The array job of an experiment SEML 0.5 submitted but no task claimed yet, or None.

    SEML records only ``slurm[i].array_id`` at submission: any pending task of that array may
    claim any of its experiments, so such an experiment belongs to the array, not to a task.
    None when :func:`task_of` knows the experiment's task, or it was never submitted (pure).
    """
    if task_of(doc) is not None:
        return None
    slurm = doc.get("slurm")
    entries = slurm if isinstance(slurm, list) else [slurm]
    for entry in entries:
        if isinstance(entry, Mapping) and entry.get("array_id") is not None:
            array = str(entry["array_id"])
            return array if array.isdigit() else None
    return None


def _array_values(arrays: Iterable[str]) -> list[Any]:
    """``array_id`` values to match in MongoDB: SEML stores integers, strings appear too."""
    arrays = sorted(set(arrays))
    return [int(a) for a in arrays] + arrays


def _job_sort_key(job: str) -> tuple[int, ...]:
    return tuple(int(x) for x in job.split("_"))


def _row_jobs(row: Any) -> list[str]:
    """Job ids (``"<array>_<task>"`` or ``"<job>"``) a squeue row stands for."""
    if row.array_job_id is not None:
        return [f"{row.array_job_id}_{t}" for t in row.task_ids or ()]
    return [str(row.job_id_raw)]


def _squeue_alive(rows: Iterable[Any]) -> set[str]:
    """Job ids of the alive squeue rows."""
    return {job for row in rows if row.alive for job in _row_jobs(row)}


def rows_of_collection(
    rows: Iterable[Any], collection_name: str
) -> tuple[list[Any], dict[str, str | None]]:
    """Split squeue rows into those of jobs of collection ``collection_name`` and the others
    (pure): ``(rows whose comment is the collection, {job or array id: its comment})``.

    The sbatch ``--comment`` of a job is its collection: our launcher and SEML both set it, and
    ``seml queue`` finds a collection's jobs by it (SEML's rule). A document names a job by a
    bare id, which any document writer may forge: ``cancel``, ``delete``, ``hold`` and
    ``release`` act only on the jobs whose comment says they belong to the collection.
    """
    ours, others = [], {}
    for row in rows:
        if row.comment == collection_name:
            ours.append(row)
        else:
            job = str(row.array_job_id if row.array_job_id is not None else row.job_id_raw)
            others[job] = row.comment
    return ours, others


def stranger_lines(strangers: Mapping[str, str | None], collection_name: str) -> list[str]:
    """One line per job of ``strangers`` (``{job id: its comment}``, see
    :func:`rows_of_collection`) saying it was left alone (pure; the comment is shown without
    terminal escapes), e.g. ``job 548 is not a job of collection X (its comment is
    'unrelated'): left alone``."""
    lines = []
    for job, comment in sorted(strangers.items(), key=lambda item: _job_sort_key(item[0])):
        what = (
            "it has no comment" if comment is None else f"its comment is {terminal_safe(comment)!r}"
        )
        lines.append(
            f"job {job} is not a job of collection {terminal_safe(collection_name)} ({what}): "
            "left alone"
        )
    return lines


def _our_squeue_rows(
    arrays: Sequence[str], collection_name: str, strangers: dict[str, str | None] | None
) -> list[Any]:
    """squeue rows (every task its own row) of the jobs ``arrays`` whose comment is the
    collection; the others are added to ``strangers`` (when given). Raises ``SlurmError``."""
    from seml_hydra.slurm import client as slurm

    rows = slurm.squeue_jobs(job_ids=list(arrays), all_users=True, expand_arrays=True)
    ours, others = rows_of_collection(rows, collection_name)
    if strangers is not None:
        strangers.update(others)
    return ours


def is_listed(job: str, alive: set[str] | frozenset[str]) -> bool:
    """Whether job ``job`` is among the ``alive`` job ids (pure): itself, or for a plain id
    ``"123"`` any task ``"123_<t>"`` (SEML records a one-task array as ``num_tasks: 1``, so
    :func:`task_of` names it ``"123"`` while squeue lists ``"123_0"``; ``scancel 123`` acts on
    all of its tasks)."""
    return job in alive or ("_" not in job and any(a.split("_")[0] == job for a in alive))


def is_slurm_task(task: tuple[str, str] | None) -> bool:
    """True for a task Slurm knows (not submitit's local executor, not missing)."""
    if task is None or task[0] == "local":
        return False
    from seml_hydra.slurm.parse import parse_job_id

    try:
        parse_job_id(task[1])
    except ValueError:
        return False
    return True


def last_sign_of_life(doc: Mapping[str, Any]) -> datetime | None:
    """The experiment's Sacred ``heartbeat`` (else ``start_time``) as a naive UTC datetime, or
    None when the run never started (pure). pymongo returns Sacred's UTC times naive; aware
    values are converted."""
    for key in ("heartbeat", "start_time"):
        value = doc.get(key)
        if isinstance(value, datetime):
            if value.tzinfo is not None:
                value = value.astimezone(timezone.utc).replace(tzinfo=None)
            return value
    return None


def decide_killed(
    docs: Sequence[Mapping[str, Any]],
    alive_tasks: Iterable[str],
    sacct_states: Mapping[str, list[str]],
    *,
    now: datetime | None = None,
    heartbeat_stale_s: float = HEARTBEAT_STALE_S,
) -> tuple[list[int], list[int], list[int]]:
    """Which active experiments lost their job (pure): ``(killed, interrupted, unsure)`` ids.

    An experiment counts as lost only with evidence: its task is absent from squeue's alive
    tasks AND sacct reports for it only terminal states, or nothing at all. With nothing at
    all (accounting lagging, purged, or a job from another cluster) the heartbeat decides too:
    a run whose Sacred heartbeat (or ``start_time``) is younger than ``heartbeat_stale_s``
    seconds is alive whatever Slurm says, and is returned in ``unsure`` instead (checked again
    later). A definitive terminal sacct state (CANCELLED, TIMEOUT, NODE_FAIL, ...) needs no
    heartbeat: the job's processes are gone. An experiment without a Slurm task (local
    executor, not submitted yet) is never lost. One that the user cancelled
    (``execution.cancel_time``) is INTERRUPTED rather than KILLED.

    Args:
        docs: active experiments (``_id``, ``status``, ``execution``, ``slurm``, ``heartbeat``).
        alive_tasks: ``"<array>_<task>"`` of every task squeue lists in a non-terminal state.
        sacct_states: ``{"<array>_<task>": [state, ...]}`` from sacct (missing = no record).
        now: current naive UTC time (default: now).
        heartbeat_stale_s: age in seconds from which a heartbeat no longer proves life.
    """
    from seml_hydra.slurm.parse import is_alive

    if now is None:
        now = datetime.now(timezone.utc).replace(tzinfo=None)
    alive = set(alive_tasks)
    killed, interrupted, unsure = [], [], []
    for doc in docs:
        task = task_of(doc)
        if not is_slurm_task(task):
            continue
        job = task[1]  # type: ignore[index]
        if is_listed(job, alive):
            continue
        recorded = sacct_states.get(job, [])
        if any(is_alive(s) for s in recorded):
            continue
        if not recorded:
            sign = last_sign_of_life(doc)
            if sign is not None and (now - sign).total_seconds() < heartbeat_stale_s:
                unsure.append(doc["_id"])
                continue
        execution = doc.get("execution") or {}
        if isinstance(execution, Mapping) and execution.get("cancel_time") is not None:
            interrupted.append(doc["_id"])
        else:
            killed.append(doc["_id"])
    return killed, interrupted, unsure


def sacct_states_by_task(rows: Iterable[Any], tasks: Iterable[str] = ()) -> dict[str, list[str]]:
    """``{job: [raw state, ...]}`` of sacct records (``slurm.records.SacctRow``s), pure.

    An array record stands for each of its tasks: ``123_4`` -> ``"123_4"``, the pending or
    never-started remainder ``123_[0-3]`` -> ``"123_0"`` ... ``"123_3"``; a record without a
    task part -> its job id (``"123"``: a job that is not an array, or an array's record
    before sacct split it into tasks). A job of ``tasks`` (``"<array>_<task>"``) without a
    record of its own then takes that ``"<array>"`` record's states, and a plain id of
    ``tasks`` without one those of its array's tasks (see :func:`is_listed`). States in row order,
    without repeats (an array and its task may both have been asked for).
    """
    out: dict[str, list[str]] = {}

    def add(job: str, state: str) -> None:
        states_of = out.setdefault(job, [])
        if state not in states_of:
            states_of.append(state)

    for row in rows:
        array = row.job_id.split("_")[0]
        if row.task_ids is None:
            add(row.job_id, row.state_raw)
        for t in row.task_ids or ():
            add(f"{array}_{t}", row.state_raw)
    for task in tasks:
        array = task.split("_")[0]
        if task in out:
            continue
        if "_" in task and array in out:
            out[task] = list(out[array])
        elif "_" not in task:  # a one-task array named by its plain id (see is_listed)
            found = [st for job, sts in out.items() if job.split("_")[0] == task for st in sts]
            if found:
                out[task] = list(dict.fromkeys(found))
    return out


#: cluster names of documents that do not name their Slurm cluster: ``"slurm"`` (what
#: submissions recorded before the real ClusterName, and a job without SLURM_CLUSTER_NAME) or
#: none; they are judged as this cluster's, as before
UNNAMED_CLUSTERS = ("slurm", "")


def foreign_experiments(docs: Iterable[Mapping[str, Any]], here: str) -> dict[str, list[int]]:
    """``{cluster: ids}`` of the experiments whose Slurm task (:func:`task_of`) runs on another
    cluster than ``here`` (pure). Experiments without a task, of the local executor, or whose
    cluster is one of :data:`UNNAMED_CLUSTERS` are this cluster's."""
    out: dict[str, list[int]] = {}
    for doc in docs:
        task = task_of(doc)
        if is_slurm_task(task) and task[0] not in (*UNNAMED_CLUSTERS, here):  # type: ignore[index]
            out.setdefault(task[0], []).append(doc["_id"])  # type: ignore[index]
    return out


def _without_foreign(
    docs: list[dict],
) -> tuple[list[dict], dict[str, list[int]], str | None]:
    """``(docs of this cluster, {cluster: ids} of the others, this cluster's name)``; the name
    is asked (``slurm.cluster_name``, raising ``SlurmError``) only when a document names a
    cluster (None otherwise)."""
    from seml_hydra.slurm import client as slurm

    if not any(is_slurm_task(t) and t[0] not in UNNAMED_CLUSTERS for t in map(task_of, docs)):
        return docs, {}, None
    here = slurm.cluster_name()
    foreign = foreign_experiments(docs, here)
    skipped = {i for ids in foreign.values() for i in ids}
    return [d for d in docs if d["_id"] not in skipped], foreign, here


def foreign_lines(foreign: Mapping[str, Sequence[int]], here: str | None) -> list[str]:
    """One line per cluster of :attr:`DetectResult.foreign`, e.g. ``"3 experiment(s) run on
    cluster a (ids 1-3): not checked from cluster b"`` (pure)."""
    from seml_hydra.core.ranges import format_ids

    return [
        f"{len(ids)} experiment(s) run on cluster {cluster} ({format_ids(list(ids))}): not "
        f"checked from cluster {here}; run `status` there to check them."
        for cluster, ids in sorted(foreign.items())
    ]


def tasks_to_cancel(
    cancelled: Sequence[Mapping[str, Any]], others_active: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Slurm tasks to ``scancel`` for the experiments ``cancelled`` (pure).

    A task also assigned to an active experiment that is not being cancelled
    (``experiments_per_job > 1``) is spared: the job skips the INTERRUPTED experiments itself.
    Both are experiments of this cluster (other clusters' are left out before).
    Returns ``"<array>_<task>"`` strings, sorted, without duplicates.
    """
    # by job id alone: an unclaimed experiment's task names the cluster of its submission,
    # a claimed one's that of its job ("slurm" and the real name, for older submissions)
    spared = {task[1] for task in map(task_of, others_active) if task is not None}
    out = set()
    for doc in cancelled:
        task = task_of(doc)
        if is_slurm_task(task) and task[1] not in spared:  # type: ignore[index]
            out.add(task[1])  # type: ignore[index]
    return sorted(out, key=_job_sort_key)


def tail_text(data: bytes, lines: int = TRACE_LINES) -> str:
    """The last ``lines`` lines of ``data`` decoded as UTF-8, invalid bytes as U+FFFD."""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


# ------------------------------------------------------------------- files a document names

#: bytes read at most from the end of a job's output file for a ``fail_trace``
TRACE_TAIL_BYTES = 64 * 1024
#: bytes read at most from the end of an output file by ``print-output``
OUTPUT_TAIL_BYTES = 1024 * 1024
#: names of the job output files that may be read: submitit's ``<job>_<task>_log.out`` /
#: ``.err``, SEML 0.5's ``<name>_<job>.out``
OUTPUT_SUFFIXES = (".out", ".err")


@dataclass(frozen=True)
class FileTail:
    """What :func:`read_output_tail` read: ``data`` (the file's last bytes, ``None`` when
    nothing was read), ``skipped`` (bytes before them left out) and ``problem`` (why nothing was
    read: the reason a path was refused, or the system's error text)."""

    data: bytes | None
    skipped: int = 0
    problem: str | None = None


def output_folder(doc: Mapping[str, Any]) -> str | None:
    """The experiment's own output folder: ``seml.output_dir`` (our submitit folder, recorded at
    staging; SEML 0.5's output directory) cut before its first component holding a submitit
    placeholder such as ``%j``, ``~`` expanded and made absolute against ``seml.working_dir``
    (as SEML does). ``None`` when the document names none, or only ``/``."""
    seml = doc.get("seml")
    folder = seml.get("output_dir") if isinstance(seml, Mapping) else None
    if not isinstance(folder, str) or not folder:
        return None
    folder = os.path.expanduser(folder)  # SEML expands it as well
    if not os.path.isabs(folder):
        workdir = seml.get("working_dir")  # type: ignore[union-attr]
        if not isinstance(workdir, str) or not os.path.isabs(workdir):
            return None
        folder = os.path.join(workdir, folder)
    parts = []
    for part in Path(folder).parts:
        if "%" in part:
            break
        parts.append(part)
    fixed = os.path.normpath(os.path.join(*parts)) if parts else "/"
    return None if fixed == "/" else fixed


def recorded_jobs(doc: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(array id, task id)`` of every Slurm task the document records for the experiment:
    ``execution.array_id/task_id`` (written by the job) and ``slurm[0].array_id/task_id`` (the
    submission), as digit strings; ids that are not whole numbers are left out. Pure."""
    slurm = doc.get("slurm")
    first = slurm[0] if isinstance(slurm, list) and slurm else slurm
    execution = doc.get("execution")
    out: list[tuple[str, str]] = []
    for where in (execution, first):
        if not isinstance(where, Mapping) or where.get("array_id") is None:
            continue
        array, task = str(where.get("array_id")), str(where.get("task_id", 0))
        if array.isdigit() and task.isdigit() and (array, task) not in out:
            out.append((array, task))
    return out


def own_output_names(doc: Mapping[str, Any], *, seml_output_file: bool = False) -> re.Pattern[str]:
    """The names (basenames) the job output files of the experiment's own recorded jobs
    (:func:`recorded_jobs`) may have, as a pattern to ``fullmatch``. Pure.

    - submitit's ``<job id>_<rank>_log.out`` / ``.err``, the job id being
      ``<array>_<task>`` (an array task) or ``<array>`` (a single job, task 0): submitit's
      ``%j_%t_log.out`` (``submitit.core.utils.JobPaths``);
    - SEML 0.5's Slurm output ``<name>_<array>_<task>.out`` (``--output <dir>/<name>_%A_%a.out``);
    - with ``seml_output_file``, also SEML 0.5's own ``seml.output_file``,
      ``<name>_<experiment _id>.out``.

    A document without a recorded job (and no ``seml_output_file``) matches nothing.
    """
    alternatives = []
    for array, task in recorded_jobs(doc):
        for job in (f"{array}_{task}", array) if task == "0" else (f"{array}_{task}",):
            alternatives.append(re.escape(job) + r"_\d+_log\.(?:out|err)")
        alternatives.append(r".+_" + re.escape(f"{array}_{task}") + r"\.out")
    exp_id = doc.get("_id")
    if seml_output_file and isinstance(exp_id, int) and not isinstance(exp_id, bool):
        alternatives.append(rf".+_{exp_id}\.out")
    return re.compile("|".join(f"(?:{a})" for a in alternatives) or r"(?!)")


def read_output_tail(
    path: str | os.PathLike[str] | None,
    folder: str | os.PathLike[str] | None,
    *,
    names: re.Pattern[str] | None = None,
    max_bytes: int = TRACE_TAIL_BYTES,
) -> FileTail:
    """The last ``max_bytes`` bytes of a job output file a document (or a job) names, read only
    when it is safe to: an absolute path named ``*.out`` / ``*.err`` (:data:`OUTPUT_SUFFIXES`),
    not a symlink, inside ``folder`` (the experiment's output folder, :func:`output_folder`;
    compared after resolving both, so no symlink or ``..`` leads out of it), whose basename
    ``fullmatch`` es ``names`` (for a document: :func:`own_output_names`, the output names of
    its own recorded job, since the folder comes from the same document), and, opened without
    following a symlink nor blocking on a FIFO, a regular file owned by this user. So a forged
    document cannot make ``status`` or ``print-output`` copy ``~/.ssh/id_ed25519``, another
    user's file, or any file of this user that is not its own job's output into the database or
    onto the screen.

    Returns a :class:`FileTail`: the bytes, or ``problem`` saying why nothing was read (never
    raises for a bad or missing file).
    """
    import stat

    if not path:
        return FileTail(None, problem="no output file")
    path = os.fspath(path)
    if not folder:
        return FileTail(None, problem="not read: the experiment names no output folder")
    folder = os.fspath(folder)
    if not os.path.isabs(path) or not os.path.isabs(folder):
        return FileTail(None, problem="not read: not an absolute path")
    if not path.endswith(OUTPUT_SUFFIXES):
        return FileTail(None, problem="not read: not a job output file (*.out, *.err)")
    try:
        if os.path.islink(path):
            return FileTail(None, problem="not read: a symbolic link")
        real, root = os.path.realpath(path), os.path.realpath(folder)
        if os.path.commonpath([real, root]) != root or real == root:
            return FileTail(
                None, problem=f"not read: outside the experiment's output folder {folder}"
            )
        if names is not None and not names.fullmatch(os.path.basename(path)):
            return FileTail(None, problem="not read: not an output file of the experiment's job")
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(real, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        return FileTail(None, problem=error.strerror or str(error))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return FileTail(None, problem="not read: not a regular file")
        if st.st_uid != os.getuid():
            return FileTail(None, problem=f"not read: it belongs to uid {st.st_uid}, not to you")
        start = max(0, st.st_size - max_bytes)
        f.seek(start)
        return FileTail(f.read(max_bytes), skipped=start)


#: at most this many bytes of a job's sbatch script are read to find its ``--comment``
SUBMISSION_SCRIPT_BYTES = 64 * 1024


def submission_problem(doc: Mapping[str, Any], path: str, collection_name: str) -> str | None:
    """Why the submitit output file ``path`` a document names may not be read as this
    collection's, or None when it may.

    The document's own job ids and folder could be forged (a document naming one of your jobs
    of another collection, whose ids ``squeue`` shows everyone), so a submitit output
    (``*_log.out|err``) is read only when submitit's copy of that job's sbatch script,
    ``<folder with %j = array id>/<array id>_submission.sh`` (``submitit.slurm``'s
    ``paths.submission_file``), is a regular file of this user, not a symbolic link, whose
    ``#SBATCH --comment=`` is ``collection_name`` (what the launcher sets, as ``seml queue``
    finds our jobs). SEML 0.5's output names (``<name>_<array>_<task>.out``) have no such
    script (SEML keeps none): they are read on the other checks of :func:`read_output_tail`
    alone. Jobs of the local executor write no sbatch script either (``cluster == "local"``)."""
    import stat

    name = os.path.basename(path)
    if not re.fullmatch(r".+_\d+_log\.(?:out|err)", name):
        return None  # not submitit's name: SEML's output files
    execution = doc.get("execution") if isinstance(doc.get("execution"), Mapping) else {}
    if execution.get("cluster") == "local":  # type: ignore[union-attr]
        return None
    seml = doc.get("seml") if isinstance(doc.get("seml"), Mapping) else {}
    template = seml.get("output_dir")  # type: ignore[union-attr]
    jobs = recorded_jobs(doc)
    if not isinstance(template, str) or not jobs:
        return "not read: the experiment records no submitit folder or job"
    expected = f"#SBATCH --comment={collection_name}"
    for array, _ in jobs:
        script = os.path.join(
            os.path.expanduser(template.replace("%j", array)), f"{array}_submission.sh"
        )
        try:
            fd = os.open(script, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
                continue
            lines = f.read(SUBMISSION_SCRIPT_BYTES).decode("utf-8", "replace").splitlines()
        if expected in (line.strip() for line in lines):
            return None
    return (
        f"not read: no sbatch script of job {jobs[0][0]} with --comment={collection_name} in "
        "its submitit folder (the document may name a job of another collection)"
    )


def read_document_output(
    doc: Mapping[str, Any],
    path: str,
    collection_name: str,
    *,
    seml_output_file: bool = False,
    max_bytes: int = TRACE_TAIL_BYTES,
) -> FileTail:
    """:func:`read_output_tail` of a file a document names, for collection
    ``collection_name``: inside its :func:`output_folder`, named as its own job's output
    (:func:`own_output_names`), and of a job of this collection (:func:`submission_problem`).
    Never raises for a bad file."""
    problem = submission_problem(doc, path, collection_name)
    if problem is not None:
        return FileTail(None, problem=problem)
    names = own_output_names(doc, seml_output_file=seml_output_file)
    return read_output_tail(path, output_folder(doc), names=names, max_bytes=max_bytes)


# ANSI/ECMA-48 sequences: CSI (ESC [ ... final), OSC/DCS/SOS/PM/APC strings (ESC ] P X ^ _ up to
# BEL or ST, or the line's end), other ESC sequences, and their 8-bit C1 forms
_ESCAPE_SEQUENCES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b[\]PX^_][^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
    r"|\x9b[0-?]*[ -/]*[@-~]?"
    r"|[\x90\x98\x9d\x9e\x9f][^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
)
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """``text`` without terminal escape sequences (colours, cursor moves, title or clipboard
    changes: ``\\x1b[...``, ``\\x1b]...``) and control characters, except newline and tab; a
    carriage return becomes a newline (so a progress bar's updates stay visible instead of
    overwriting each other). For printing what a document or a job's output holds. Pure."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL_CHARACTERS.sub("", _ESCAPE_SEQUENCES.sub("", text))


# ------------------------------------------------------------------------------- database


def connect_db() -> Any:
    """The pymongo database, resolved as everywhere (env, SEML config, embedded)."""
    from seml_hydra.store.client import connect
    from seml_hydra.store.settings import resolve_db_settings

    return connect(resolve_db_settings(None))


def get_collection(db: Any, name: str, *, must_exist: bool = True) -> Any:
    """Collection ``name`` of ``db``; raises ManageError when it does not exist."""
    from seml_hydra.store.collections import validate_collection_name

    validate_collection_name(name)
    if must_exist and name not in db.list_collection_names(filter={"name": name}):
        raise ManageError(
            f"There is no collection {name!r} in database {db.name!r}. `seml list` shows the "
            "collections."
        )
    return db[name]


_PROJECTION = {
    "_id": 1,
    "status": 1,
    "batch_id": 1,
    "execution": 1,
    "slurm": 1,
    "seml": 1,
    "heartbeat": 1,
    "start_time": 1,
}


def and_(query: Mapping[str, Any], condition: Mapping[str, Any]) -> dict[str, Any]:
    """``query`` AND ``condition`` as a new filter (``query`` is not changed)."""
    out = dict(query)
    out["$and"] = [*out.get("$and", []), dict(condition)]
    return out


def select(collection: Any, query: Mapping[str, Any], projection: Any = None) -> list[dict]:
    """Documents matching ``query``, sorted by ``_id``."""
    return list(collection.find(dict(query), projection or _PROJECTION).sort("_id", 1))


# ------------------------------------------------------------------------------- cache


def cache_path(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/seml-hydra/collections.json`` (``~/.cache/...`` by default)."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or str(Path.home()), ".cache")
    return Path(base) / "seml-hydra" / "collections.json"


def refresh_collection_cache(names: Iterable[str], *, replace: bool = True) -> None:
    """Write the collection names shell completion offers. ``replace=False`` adds ``names`` to
    the cached ones (the launcher calls ``refresh_collection_cache([name], replace=False)``
    after staging). Never raises: completion is a convenience."""
    try:
        path = cache_path()
        current = set() if replace else set(cached_collections())
        current.update(n for n in names if is_listed_collection(n))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"collections": sorted(current), "time": time.time()}))
        os.replace(tmp, path)
    except OSError:
        pass


def forget_cached_collections(names: Iterable[str]) -> None:
    """Remove ``names`` from the completion cache (after ``drop``). Never raises."""
    gone = set(names)
    refresh_collection_cache([n for n in cached_collections() if n not in gone])


def cached_collections() -> list[str]:
    """The cached collection names (``[]`` when there is no readable cache)."""
    try:
        data = json.loads(cache_path().read_text())
        return [str(n) for n in data.get("collections", [])]
    except (OSError, ValueError, AttributeError):
        return []


# ------------------------------------------------------------------------------- list / status


@dataclass
class CollectionCounts:
    name: str
    counts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def list_collections(db: Any, pattern: str | None = None) -> list[CollectionCounts]:
    """Experiment collections (names matching ``pattern`` with ``re.search``) with counts per
    state. Refreshes the completion cache with every experiment collection."""
    try:
        regex = re.compile(pattern) if pattern else None
    except re.error as error:
        raise ManageError(f"Bad regular expression {pattern!r}: {error}") from None
    names = sorted(n for n in db.list_collection_names() if is_listed_collection(n))
    refresh_collection_cache(names)
    out = []
    for name in names:
        if regex is not None and not regex.search(name):
            continue
        pipeline = [{"$group": {"_id": "$status", "n": {"$sum": 1}}}]
        counts: dict[str, int] = {}
        for row in db[name].aggregate(pipeline):
            status = state_of(row["_id"])
            counts[status] = counts.get(status, 0) + row["n"]
        out.append(CollectionCounts(name, counts))
    return out


@dataclass
class DetectResult:
    """What :func:`detect_killed` did: ids marked KILLED / INTERRUPTED, ids left RUNNING only
    because their heartbeat is fresh (``unsure``), ids put back to STAGED (``recovered``), ids
    left alone because they run on another cluster (``foreign``), and a warning when Slurm
    could not be asked."""

    killed: list[int] = field(default_factory=list)
    interrupted: list[int] = field(default_factory=list)
    warning: str | None = None
    #: gone from squeue, no sacct record, but a heartbeat younger than HEARTBEAT_STALE_S
    unsure: list[int] = field(default_factory=list)
    #: PENDING without a job because their submitting process died: STAGED again
    recovered: list[int] = field(default_factory=list)
    #: ``{cluster: ids}`` of active experiments of another Slurm cluster: not judged from here
    foreign: dict[str, list[int]] = field(default_factory=dict)
    #: this cluster's name, when it was asked (only for experiments naming a cluster)
    cluster: str | None = None


def detect_killed(collection: Any, query: Mapping[str, Any] | None = None) -> DetectResult:
    """Mark KILLED the active experiments whose Slurm task is gone (see :func:`decide_killed`);
    INTERRUPTED when the user had cancelled them; a fresh heartbeat without any Slurm record
    keeps a run RUNNING (``unsure``). A failed scheduler query marks nothing and returns a
    warning. First, experiments left PENDING without a job by a submitting process that died
    go back to STAGED (``recovery.recover_interrupted_submissions``; ``recovered``). ``fail_trace`` = the last lines of ``execution.slurm_output_file``.

    An experiment of another Slurm cluster (its ``execution.cluster`` / ``slurm[0].cluster``
    is neither this cluster's ``ClusterName`` nor one of :data:`UNNAMED_CLUSTERS`) is never
    judged: job ids are per cluster, so this one's squeue and sacct say nothing about it
    (``foreign``)."""
    from seml_hydra.launch.recovery import recover_interrupted_submissions
    from seml_hydra.slurm import client as slurm
    from seml_hydra.slurm import parse

    recovered = recover_interrupted_submissions(collection, query)
    docs = select(collection, and_(query or {}, {"status": {"$in": sorted(states.ACTIVE)}}))
    try:
        docs, foreign, here = _without_foreign(docs)
    except slurm.SlurmError as error:
        return DetectResult(
            warning=f"Could not ask Slurm for its cluster name ({error}); no experiment "
            "was marked KILLED.",
            recovered=recovered,
        )
    tasks = {task_of(d) for d in docs}
    jobs = sorted({t[1] for t in tasks if is_slurm_task(t)})
    seml_arrays = {a for a in map(array_of, docs) if a}  # SEML 0.5's unclaimed experiments
    if not jobs and not seml_arrays:
        return DetectResult(recovered=recovered, foreign=foreign, cluster=here)
    arrays = sorted({j.split("_")[0] for j in jobs} | seml_arrays, key=int)
    try:
        rows = slurm.squeue_jobs(job_ids=arrays, all_users=True, expand_arrays=True)
        alive = _squeue_alive(rows)
        alive_arrays = {j.split("_")[0] for j in alive}
        missing = [j for j in jobs if not is_listed(j, alive)]
        missing += sorted(seml_arrays - alive_arrays, key=int)
        sacct: dict[str, list[str]] = {}
        if missing:
            # the arrays too: sacct lists a task that never started only in its array's
            # record (`123_[0-3]`, e.g. a held array cancelled), not under `123_0`
            asked = sorted(set(missing) | {j.split("_")[0] for j in missing}, key=_job_sort_key)
            sacct = sacct_states_by_task(slurm.sacct_jobs(asked), missing)
    except (slurm.SlurmError, ValueError) as error:
        return DetectResult(
            warning=f"Could not ask Slurm about the jobs ({error}); no experiment was marked "
            "KILLED.",
            recovered=recovered,
            foreign=foreign,
            cluster=here,
        )
    killed, interrupted, unsure = decide_killed(docs, alive, sacct)
    # an experiment waiting for any task of its SEML array is lost when no task of the array
    # is alive in squeue, nor in sacct
    for doc in docs:
        array = array_of(doc)
        if not array or array in alive_arrays:
            continue
        recorded = [st for job, sts in sacct.items() if job.split("_")[0] == array for st in sts]
        if any(parse.is_alive(st) for st in recorded):
            continue
        cancelled = (doc.get("execution") or {}).get("cancel_time") is not None
        (interrupted if cancelled else killed).append(doc["_id"])
    by_id = {d["_id"]: d for d in docs}
    from pymongo import UpdateOne

    updates = []
    for exp_id in killed:
        doc = by_id[exp_id]
        updates.append(
            UpdateOne(
                {"_id": exp_id, "status": doc["status"]},
                {
                    "$set": {
                        "status": states.KILLED,
                        "fail_trace": _killed_trace(doc, collection.name, _recorded(doc, sacct)),
                    }
                },
            )
        )
    for exp_id in interrupted:
        updates.append(
            UpdateOne(
                {"_id": exp_id, "status": by_id[exp_id]["status"]},
                {"$set": {"status": states.INTERRUPTED}},
            )
        )
    if updates:
        collection.bulk_write(updates, ordered=False)
    return DetectResult(
        killed, interrupted, unsure=unsure, recovered=recovered, foreign=foreign, cluster=here
    )


def _output_file(doc: Mapping[str, Any]) -> str | None:
    execution = doc.get("execution") or {}
    path = execution.get("slurm_output_file") if isinstance(execution, Mapping) else None
    if path:
        return str(path)
    slurm = doc.get("slurm")
    first = slurm[0] if isinstance(slurm, list) and slurm else slurm
    if isinstance(first, Mapping) and first.get("output_files_template"):
        return str(first["output_files_template"])
    return None


def _recorded(doc: Mapping[str, Any], sacct: Mapping[str, list[str]]) -> list[str]:
    """sacct's states of the experiment's task (``[]`` without a task or a record)."""
    task = task_of(doc)
    return list(sacct.get(task[1], [])) if task else []


def _killed_trace(
    doc: Mapping[str, Any], collection_name: str, slurm_states: Sequence[str] = ()
) -> list[str]:
    """``fail_trace`` of a KILLED experiment: what Slurm said of its job (``slurm_states``, from
    sacct), then the last lines of its output file."""
    task = task_of(doc)
    ended = (
        f"ended ({', '.join(dict.fromkeys(slurm_states))})"
        if slurm_states
        else "ended (or is unknown to Slurm)"
    )
    head = (
        f"Slurm job {task[1] if task else '?'} {ended} while the experiment "
        f"was {doc.get('status')}; squeue and sacct no longer list it as alive."
    )
    path = _output_file(doc)
    lines = [head + "\n"]
    if path:
        tail = read_document_output(doc, path, collection_name)
        if tail.data is None:
            lines.append(f"(could not read {path}: {tail.problem})\n")
        else:
            lines.append(f"Last lines of {path}:\n")
            lines.extend(line + "\n" for line in tail_text(tail.data).splitlines())
    return lines


def status(collection: Any, query: Mapping[str, Any] | None = None) -> dict[str, list[int]]:
    """``{state: ids}`` of the experiments matching ``query``."""
    return id_ranges_by_state(select(collection, dict(query or {}), {"_id": 1, "status": 1}))


# ------------------------------------------------------------------------------- reset


def reset(collection: Any, query: Mapping[str, Any]) -> list[int]:
    """Set the matching experiments back to STAGED, clearing what their run wrote (Sacred's
    fields, ``execution``, the job of every ``slurm`` entry and the sbatch options the
    submission set: what SEML 0.5's reset keeps is kept) and their metrics
    (:func:`delete_metrics`). Active experiments are never reset. Returns the ids reset."""
    from seml_hydra.launch.stage import RUN_FIELDS

    q = and_(query, {"status": {"$nin": sorted(states.ACTIVE)}})
    docs = select(collection, q, {"_id": 1, "slurm": 1, "info.metrics": 1})
    ids = [d["_id"] for d in docs]
    if not ids:
        return []
    unset = {name: "" for name in RUN_FIELDS}
    # every slurm entry: SEML 0.5 writes the job into the entry it submitted with, not slurm[0]
    entries = max((len(d["slurm"]) for d in docs if isinstance(d.get("slurm"), list)), default=1)
    for i in range(max(entries, 1)):
        unset.update({f"slurm.{i}.{name}": "" for name in SLURM_JOB_FIELDS})
        unset.update({f"slurm.{i}.sbatch_options.{o}": "" for o in SUBMISSION_SBATCH_OPTIONS})
    collection.update_many(
        {"_id": {"$in": ids}, "status": {"$nin": sorted(states.ACTIVE)}},
        {"$set": {"status": states.STAGED}, "$unset": unset},
    )
    # the run's metrics go with it (``info`` is a run field): a re-run starts with none
    delete_metrics(collection.database, collection.name, docs)
    return ids


# ------------------------------------------------------------------------------- cancel


@dataclass
class CancelResult:
    """What :func:`cancel` did: the ids it marked INTERRUPTED, the Slurm tasks it cancelled
    (only those squeue still listed alive: a task already gone is not reported), the ids run by
    the local executor (marked, not stopped), the tasks still alive after the wait, the ids
    of an earlier unfinished cancel it finished, and the experiments of other clusters it left
    alone (``foreign``)."""

    interrupted: list[int] = field(default_factory=list)
    cancelled_tasks: list[str] = field(default_factory=list)
    local_ids: list[int] = field(default_factory=list)
    still_alive: list[str] = field(default_factory=list)
    #: experiments an earlier, unfinished cancel had marked, whose tasks were cancelled now
    finished: list[int] = field(default_factory=list)
    #: ``{cluster: ids}`` of active experiments of another Slurm cluster: left alone
    foreign: dict[str, list[int]] = field(default_factory=dict)
    #: this cluster's name, when it was asked
    cluster: str | None = None
    #: ``{job id: its comment}`` of jobs documents named that are not the collection's (their
    #: ``--comment`` differs): left alone (:func:`rows_of_collection`)
    strangers: dict[str, str | None] = field(default_factory=dict)


def cancel(
    collection: Any, query: Mapping[str, Any], *, wait_s: float = CANCEL_WAIT_S
) -> CancelResult:
    """Interrupt the matching active experiments: INTERRUPTED (with ``execution.cancel_time``),
    ``scancel`` of exactly their array tasks, wait (at most ``wait_s``) until Slurm no longer
    lists those tasks alive, then INTERRUPTED again: Sacred's heartbeat rewrites ``status``
    until the process is gone. Tasks shared with active experiments not cancelled are spared.
    Experiments of the local executor are marked but their processes are not stopped.
    Experiments of another Slurm cluster are left alone (``foreign``): a job id there names
    another job here.

    Safe to run again: a cancel that stopped between marking and ``scancel`` (killed, or Slurm
    failed) is finished by the next one, which also cancels the tasks squeue still lists alive
    of the matching experiments a cancel marked INTERRUPTED (:func:`_unfinished_cancels`).

    Only jobs whose sbatch comment is the collection are cancelled (:func:`rows_of_collection`:
    a document may name any job id); the others are reported in ``strangers``."""
    from seml_hydra.slurm import client as slurm

    docs = select(collection, and_(query, {"status": {"$in": sorted(states.ACTIVE)}}))
    try:  # job ids are per cluster: another cluster's experiments are not touched from here
        docs, foreign, here = _without_foreign(docs)
    except slurm.SlurmError as error:
        raise ManageError(
            f"Could not ask Slurm for its cluster name ({error}); nothing was cancelled."
        ) from None
    unfinished = _unfinished_cancels(collection, query)
    if not docs and not unfinished:
        return CancelResult(foreign=foreign, cluster=here)
    ids = [d["_id"] for d in docs]
    mark = {"status": states.INTERRUPTED, CANCEL_MARK: datetime.now(timezone.utc)}
    active = {"status": {"$in": sorted(states.ACTIVE)}}
    if ids:
        collection.update_many({"_id": {"$in": ids}, **active}, {"$set": mark})
    cancelled = docs + unfinished
    arrays = sorted({t[1].split("_")[0] for t in map(task_of, cancelled) if is_slurm_task(t)})
    others = []
    if arrays:
        array_values = [int(a) for a in arrays] + arrays
        others = select(
            collection,
            {
                "_id": {"$nin": [d["_id"] for d in cancelled]},
                **active,
                "$or": [
                    {"slurm.array_id": {"$in": array_values}},
                    {"execution.array_id": {"$in": array_values}},
                ],
            },
        )
        if here is not None:  # (unknown: a foreign task of the same id spares ours, safely)
            skipped = {i for ids in foreign_experiments(others, here).values() for i in ids}
            others = [d for d in others if d["_id"] not in skipped]
    tasks = tasks_to_cancel(cancelled, others)
    strangers: dict[str, str | None] = {}
    tasks += _orphaned_pending_tasks(collection, {a for a in map(array_of, docs) if a}, strangers)
    result = CancelResult(
        strangers=strangers,
        foreign=foreign,
        cluster=here,
        interrupted=ids,
        local_ids=[d["_id"] for d in docs if (task_of(d) or ("",))[0] == "local"],
        finished=[d["_id"] for d in unfinished if task_of(d)[1] in tasks],  # type: ignore[index]
    )
    ids = [*ids, *result.finished]
    if tasks:
        try:
            # only tasks squeue still lists are cancelled (and reported): the others are gone
            result.cancelled_tasks = _alive_tasks(tasks, collection.name, strangers)
            if result.cancelled_tasks:
                slurm.scancel(result.cancelled_tasks)
                result.still_alive = _wait_gone(result.cancelled_tasks, wait_s, collection.name)
        except slurm.SlurmError as error:
            raise ManageError(
                f"Experiment(s) {', '.join(map(str, ids))} are INTERRUPTED, but Slurm could not "
                f"cancel their task(s) {', '.join(tasks)}: {error}. Run the command again to "
                "cancel them."
            ) from None
    collection.update_many(
        {"_id": {"$in": ids}, "status": {"$in": [*sorted(states.ACTIVE), states.KILLED]}},
        {"$set": {"status": states.INTERRUPTED}},
    )
    return result


def _unfinished_cancels(collection: Any, query: Mapping[str, Any]) -> list[dict]:
    """The matching experiments a cancel marked INTERRUPTED (``execution.cancel_time``) whose
    Slurm task squeue still lists alive: that cancel stopped before its ``scancel`` took effect.
    A failed squeue finds none (the cancel's own squeue then reports the problem)."""
    from seml_hydra.slurm import client as slurm

    marked = [
        doc
        for doc in select(
            collection, and_(query, {"status": states.INTERRUPTED, CANCEL_MARK: {"$exists": True}})
        )
        if is_slurm_task(task_of(doc))
    ]
    if not marked:
        return []
    try:
        marked = _without_foreign(marked)[0]
        if not marked:
            return []
        jobs = sorted({task_of(d)[1] for d in marked})  # type: ignore[index]
        alive = set(_alive_tasks(jobs, collection.name))
    except (slurm.SlurmError, ValueError):
        return []
    return [d for d in marked if task_of(d)[1] in alive]  # type: ignore[index]


def _orphaned_pending_tasks(
    collection: Any, arrays: set[str], strangers: dict[str, str | None] | None = None
) -> list[str]:
    """The pending tasks of SEML 0.5 arrays (see :func:`array_of`) that no longer have a
    PENDING experiment to claim: SEML's ``cancel_jobs_without_experiments``. Tasks that
    started run their own experiments and are left alone, and so are jobs that are not the
    collection's (added to ``strangers``, see :func:`rows_of_collection`)."""
    if not arrays:
        return []
    waiting = {
        array
        for array in map(
            array_of,
            select(
                collection,
                {
                    "status": states.PENDING,
                    "slurm.array_id": {"$in": _array_values(arrays)},
                },
            ),
        )
        if array
    }
    orphaned = sorted(arrays - waiting, key=int)
    if not orphaned:
        return []
    rows = _our_squeue_rows(orphaned, collection.name, strangers)
    tasks = {job for row in rows if row.state == "PENDING" for job in _row_jobs(row)}
    return sorted(tasks, key=_job_sort_key)


def _alive_tasks(
    tasks: Sequence[str],
    collection_name: str,
    strangers: dict[str, str | None] | None = None,
) -> list[str]:
    """The ``tasks`` squeue lists alive whose job's comment is ``collection_name``; the jobs of
    another comment are added to ``strangers`` (when given). Raises ``SlurmError``."""
    arrays = sorted({t.split("_")[0] for t in tasks}, key=int)
    alive = _squeue_alive(_our_squeue_rows(arrays, collection_name, strangers))
    return [t for t in tasks if is_listed(t, alive)]


def _wait_gone(tasks: Sequence[str], wait_s: float, collection_name: str) -> list[str]:
    """Poll squeue until none of ``tasks`` is alive or ``wait_s`` passed; the ones still alive."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = _alive_tasks(tasks, collection_name)
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.5)


# ------------------------------------------------------------------------------- delete / drop


@dataclass
class DeleteResult:
    """What :func:`delete` did: the ids deleted, and the :class:`CancelResult` of cancelling
    them first (None with ``cancel_first=False`` or when nothing matched)."""

    ids: list[int] = field(default_factory=list)
    cancel: CancelResult | None = None


def delete(collection: Any, query: Mapping[str, Any], *, cancel_first: bool = True) -> DeleteResult:
    """Delete the matching experiments (cancelling the active ones first unless
    ``cancel_first`` is False) and the GridFS payloads no experiment refers to any more.

    The experiments are selected once, then cancelled and deleted by id: cancelling changes
    their status (INTERRUPTED), so a selection by state (``delete -s RUNNING``) made again
    after the cancel would match none of them."""
    docs = select(
        collection,
        query,
        {
            "_id": 1,
            "experiment.sources": 1,
            "artifacts": 1,
            "info.metrics": 1,
            "seml.payload_file": 1,
            "seml.source_files": 1,
        },
    )
    ids = [d["_id"] for d in docs]
    if not ids:
        return DeleteResult()
    by_id = {"_id": {"$in": ids}}
    cancelled = cancel(collection, by_id) if cancel_first else None
    collection.delete_many(by_id)
    # only files the deleted experiments used: a launch staging into the collection right
    # now has uploaded its payload and snapshot before inserting the documents using them
    sources = {str(e[1]) for d in docs for e in _source_files(d) if len(e) > 1}
    delete_orphan_payloads(collection.database, collection.name, payload_ids(docs))
    _delete_run_files(collection.database, collection.name, docs)
    _delete_orphan_sources(collection.database, collection.name, sources)
    return DeleteResult(ids, cancelled)


def _source_files(doc: Mapping[str, Any]) -> list[Any]:
    """``seml.source_files`` of a document (``[]`` when it has none)."""
    seml = doc.get("seml")
    return list(seml.get("source_files") or []) if isinstance(seml, Mapping) else []


def _delete_run_files(db: Any, name: str, docs: Sequence[Mapping[str, Any]]) -> None:
    """Delete what Sacred stored for the runs ``docs`` of collection ``name`` (already
    deleted): the files of ``experiment.sources`` that no remaining run refers to (Sacred shares
    one file between runs with the same source) and of ``artifacts``, as SEML's delete, and
    their metrics (:func:`delete_metrics`)."""
    import gridfs

    files = []
    for doc in docs:
        files += [s[1] for s in (doc.get("experiment") or {}).get("sources") or [] if len(s) > 1]
        files += [a.get("file_id") for a in doc.get("artifacts") or [] if isinstance(a, Mapping)]
    files = [f for f in files if f is not None]
    if files:
        # Sacred stores a source file once per content (any run, any collection may share it)
        shared = set()
        for other in db.list_collection_names():
            if not is_listed_collection(other):
                continue
            for doc in db[other].find(
                {"experiment.sources": {"$elemMatch": {"$elemMatch": {"$in": files}}}},
                {"experiment.sources": 1},
            ):
                shared.update(str(s[1]) for s in doc["experiment"]["sources"] if len(s) > 1)
        fs = gridfs.GridFS(db)
        for file_id in files:
            if str(file_id) not in shared:
                fs.delete(file_id)
    delete_metrics(db, name, docs)


def delete_metrics(db: Any, name: str, docs: Sequence[Mapping[str, Any]]) -> None:
    """Delete the metric documents of the runs ``docs`` (each with ``_id`` and, when it has
    any, ``info.metrics``) of collection ``name``: those of the collection's own metrics
    collection (``collections.metrics_collection_name``) by ``run_id``, and the entries of
    ``info.metrics`` by their ids in the shared ``metrics`` collection (where runs before
    per-collection metrics, and SEML's, wrote; ``metrics.run_id`` alone is ambiguous across
    collections). Used by ``delete`` and wherever an experiment is reset to run again (a re-run
    must not mix its metrics with the failed attempt's). Raises pymongo errors."""
    from bson import ObjectId
    from bson.errors import InvalidId

    metrics = []
    for doc in docs:
        info = doc.get("info")
        entries = info.get("metrics") if isinstance(info, Mapping) else None
        for entry in entries if isinstance(entries, list) else []:
            try:
                metrics.append(ObjectId(str(entry.get("id"))))
            except (InvalidId, TypeError, AttributeError):
                continue
    ids = [d["_id"] for d in docs]
    if ids:
        db[metrics_collection_name(name)].delete_many({"run_id": {"$in": ids}})
    if metrics:
        db["metrics"].delete_many({"_id": {"$in": metrics}})


def _delete_orphan_sources(db: Any, name: str, only: set[str] | None = None) -> None:
    """Delete the code snapshot files of collection ``name`` (``metadata.type: source_file``,
    written by SEML 0.5 or by us) that no experiment of the collection refers to any more;
    with ``only``, just those of these file ids. A file a launch has just reused (leased,
    ``seml_hydra.store.sources.delete_unused_files``) is kept."""
    from seml_hydra.store.sources import delete_unused_files

    def used() -> set[str]:
        found = set()
        for doc in db[name].find(
            {"seml.source_files": {"$exists": True}}, {"seml.source_files": 1}
        ):
            found.update(str(entry[1]) for entry in _source_files(doc) if len(entry) > 1)
        return found

    candidates: dict[str, Any] = {"metadata.collection_name": name, "metadata.type": "source_file"}
    delete_unused_files(db, restricted_to(candidates, only), used)


def matching_collections(db: Any, pattern: str) -> list[str]:
    """Experiment collections whose name matches ``pattern`` (``re.fullmatch``, as SEML)."""
    try:
        regex = re.compile(pattern)
    except re.error as error:
        raise ManageError(f"Bad regular expression {pattern!r}: {error}") from None
    return sorted(
        n for n in db.list_collection_names() if is_listed_collection(n) and regex.fullmatch(n)
    )


def drop(db: Any, names: Sequence[str]) -> None:
    """Drop collections: cancel their active experiments, drop them, their payloads, their
    metrics (``collections.metrics_collection_name``, and their entries in the shared ``metrics``)
    and their id counters, and forget them in the completion cache."""
    from seml_hydra.store.collections import COUNTERS_COLLECTION

    for name in names:
        if not is_listed_collection(name):
            raise ManageError(f"{name!r} is not an experiment collection; it is not dropped.")
        cancel(db[name], {})
        runs = select(
            db[name], {}, {"_id": 1, "experiment.sources": 1, "artifacts": 1, "info.metrics": 1}
        )
        db.drop_collection(name)
        delete_orphan_payloads(db, name)
        _delete_run_files(db, name, runs)
        db.drop_collection(metrics_collection_name(name))
        _delete_orphan_sources(db, name)
        db[COUNTERS_COLLECTION].delete_many({"_id": {"$in": [f"{name}._id", f"{name}.batch_id"]}})
    forget_cached_collections(names)


# ------------------------------------------------------------------------------- hold / release


def pending_tasks(
    collection: Any,
    query: Mapping[str, Any],
    strangers: dict[str, str | None] | None = None,
) -> tuple[list[str], list[str]]:
    """``(held, not held)`` pending Slurm tasks of the matching PENDING experiments of this
    cluster (those of another cluster are left out, and so are jobs whose comment is not the
    collection: added to ``strangers`` when given, see :func:`rows_of_collection`).

    Raises:
        SlurmError: squeue failed, or the cluster's name could not be asked.
    """
    q = and_(query, {"status": states.PENDING})
    docs = _without_foreign(select(collection, q))[0]  # another cluster's ids name other jobs
    tasks = {t[1] for t in map(task_of, docs) if is_slurm_task(t)}
    # SEML 0.5's pending experiments belong to their whole array (any task may claim them)
    seml_arrays = {a for a in map(array_of, docs) if a}
    if not tasks and not seml_arrays:
        return [], []
    arrays = sorted({t.split("_")[0] for t in tasks} | seml_arrays, key=int)
    held, free = set(), set()
    for row in _our_squeue_rows(arrays, collection.name, strangers):
        if row.state != "PENDING":
            continue
        target = held if "held" in (row.reason or "").lower() else free
        jobs = _squeue_alive([row])
        if str(row.array_job_id) not in seml_arrays:
            jobs &= tasks
        target.update(jobs)
    return sorted(held, key=_job_sort_key), sorted(free, key=_job_sort_key)


def hold(
    collection: Any,
    query: Mapping[str, Any],
    strangers: dict[str, str | None] | None = None,
) -> tuple[list[str], list[str]]:
    """Hold the pending, not yet held tasks; returns ``(held now, already held)``. Jobs that
    are not the collection's are left alone and added to ``strangers`` (:func:`pending_tasks`)."""
    from seml_hydra.slurm import client as slurm

    held, free = pending_tasks(collection, query, strangers)
    slurm.hold(free)
    return free, held


def release(
    collection: Any,
    query: Mapping[str, Any],
    strangers: dict[str, str | None] | None = None,
) -> list[str]:
    """Release the held pending tasks; returns them. Jobs that are not the collection's are
    left alone and added to ``strangers`` (:func:`pending_tasks`)."""
    from seml_hydra.slurm import client as slurm

    held, _ = pending_tasks(collection, query, strangers)
    slurm.release(held)
    return held


# ------------------------------------------------------------------------------- start


EXECUTORS = {"seml_hydra.slurm": "slurm", "seml_hydra.local": "local"}


@dataclass
class StartedArray:
    array_id: str
    name: str
    cluster: str
    folder: str
    ids: list[int]


def no_payload_message(doc: Mapping[str, Any]) -> str:
    """Why ``start`` cannot run ``doc``, a STAGED document without ``seml.payload_file`` (pure).

    Such a document is either one SEML staged from a YAML file, or one of ours after SEML
    0.5.7's own ``reset``, which keeps only the fields SEML knows
    (``get_experiment_reset_op``: ``hydra``, ``seed`` and ``seml.payload_file`` go); the two
    look alike, so the message names both, ours first when the document names an executable."""
    seml = doc.get("seml") if isinstance(doc.get("seml"), Mapping) else {}
    executable = seml.get("executable")
    ours = (
        "this experiment's seml-hydra fields (payload, hydra, seed) are gone, as SEML's own "
        "`reset` removes them: re-launch the sweep (its points are found by config hash and "
        "run again) or, next time, use seml-hydra's `seml <collection> reset`"
    )
    if not executable:
        return (
            f"Experiment {doc.get('_id')} has no seml.payload_file: it was not staged by the "
            f"seml-hydra launcher, or {ours}. Nothing was submitted."
        )
    return (
        f"Experiment {doc.get('_id')} has no seml.payload_file, so there is no Hydra app for "
        f"seml-hydra to run: either {ours}; or it was staged by SEML from a YAML file (executable "
        f"{executable!r}): start it with SEML's own `seml <collection> start`. Nothing was "
        "submitted."
    )


def build_requests(db: Any, docs: Sequence[Mapping[str, Any]]) -> list[tuple[str, Any]]:
    """``(working_dir, SubmitRequest)`` per STAGED document, rebuilt from the database alone:
    the launcher node is the batch payload's base Hydra node with the document's diff applied.
    Raises ManageError for a document staged by SEML itself (no ``seml.payload_file``), an
    unknown executor, or a payload that is gone."""
    from seml_hydra.core.documents import apply_diff
    from seml_hydra.launch.submit import SubmitRequest

    bases: dict[str, dict[str, Any]] = {}
    out = []
    for doc in docs:
        seml = doc.get("seml") or {}
        payload = seml.get("payload_file")
        if not payload:
            raise ManageError(no_payload_message(doc))
        cluster = EXECUTORS.get(str(seml.get("launcher")))
        if cluster is None:
            raise ManageError(
                f"Experiment {doc['_id']} names the launcher {seml.get('launcher')!r}; "
                f"`seml start` knows {', '.join(EXECUTORS)}."
            )
        if payload not in bases:
            try:
                bases[payload] = hydra_base(db, payload)
            except Exception as error:
                raise ManageError(
                    f"The payload {payload} of experiment {doc['_id']} is gone from GridFS "
                    f"({type(error).__name__}); launch the sweep again."
                ) from None
        node = apply_diff(bases[payload], (doc.get("hydra") or {}).get("node_diff", []))
        launcher = dict(node["launcher"])
        workdir = str(seml.get("working_dir") or os.getcwd())
        folder = str(launcher.get("submitit_folder"))
        if not os.path.isabs(folder):
            launcher["submitit_folder"] = os.path.join(workdir, folder)
        out.append(
            (workdir, SubmitRequest(doc["_id"], launcher, payload, doc["batch_id"], cluster))
        )
    return out


def start(
    db: Any, collection_name: str, query: Mapping[str, Any], *, limit: int = 0
) -> list[StartedArray]:
    """Submit the matching STAGED experiments (at most ``limit``, 0 = all) from the database
    alone, one array job per batch and resource set. Submission runs in the launch's working
    directory (jobs start where the sweep was launched). Raises ``SubmissionError`` when sbatch
    refuses (those experiments stay STAGED)."""
    from seml_hydra.launch.submit import submit_requests
    from seml_hydra.store.job_db import job_db_config, job_db_environment
    from seml_hydra.store.settings import resolve_db_settings

    q = and_(query, {"status": {"$in": _state_values([states.STAGED])}})
    docs = list(db[collection_name].find(q).sort("_id", 1))
    if limit > 0:
        docs = docs[:limit]
    if not docs:
        return []
    old = [d["_id"] for d in docs if d.get("status") != states.STAGED]
    if old:  # SEML's "QUEUED": the submission step moves STAGED documents only
        db[collection_name].update_many(
            # only SEML's old spelling: a document a concurrent launch or start moved on
            # meanwhile (PENDING, RUNNING) must not be put back
            {"_id": {"$in": old}, "status": {"$in": list(states.ALIASES)}},
            {"$set": {"status": states.STAGED}},
        )
    settings = resolve_db_settings(None)
    by_dir: dict[str, list[Any]] = {}
    for workdir, request in build_requests(db, docs):
        by_dir.setdefault(workdir, []).append(request)
    started = []
    for workdir, requests in by_dir.items():
        launch_db = requests[0].launcher.get("db")
        with _cwd(workdir):
            arrays = submit_requests(
                db[collection_name],
                collection_name,
                requests,
                db_cfg=job_db_config(settings, launch_db),
                job_env=job_db_environment(settings, launch_db),
            )
        for array in arrays:
            ids = sorted(i for _, group in array.jobs.values() for i in group)
            started.append(
                StartedArray(array.array_id, array.name, array.cluster, array.folder, ids)
            )
    return started


class _cwd:
    def __init__(self, path: str) -> None:
        self.path = path
        self.old = ""

    def __enter__(self) -> None:
        self.old = os.getcwd()
        if os.path.isdir(self.path):
            os.chdir(self.path)

    def __exit__(self, *exc: Any) -> None:
        os.chdir(self.old)


# ------------------------------------------------------------------------------- sources


def snapshot_of(docs: Sequence[Mapping[str, Any]]) -> list[list[Any]] | None:
    """The one code snapshot (``seml.source_files``) the documents share (pure).

    Returns ``None`` when none of them has one. Raises :class:`ManageError` listing the batch
    ids when they have different snapshots: the filter must pick one.
    """
    snapshots: dict[tuple, list[int]] = {}
    for doc in docs:
        files = (doc.get("seml") or {}).get("source_files")
        if files:
            key = tuple((str(rel), str(fid)) for rel, fid in files)
            snapshots.setdefault(key, []).append(doc.get("batch_id"))
    if not snapshots:
        return None
    if len(snapshots) > 1:
        batches = sorted({b for ids in snapshots.values() for b in ids if b is not None})
        raise ManageError(
            f"The selected experiments have {len(snapshots)} different code snapshots (batches "
            f"{', '.join(map(str, batches))}); pick one with -b BATCH_ID or -id ID."
        )
    for doc in docs:  # the ObjectIds themselves, from the first document that has them
        files = (doc.get("seml") or {}).get("source_files")
        if files:
            return [list(entry) for entry in files]
    return None


def snapshot_for(collection: Any, query: Mapping[str, Any]) -> list[list[Any]]:
    """The code snapshot of the selected experiments (for ``restore-sources``).

    Raises :class:`ManageError` when nothing matches, nothing has a snapshot, or several
    snapshots match.
    """
    docs = select(collection, query, {"seml.source_files": 1, "batch_id": 1})
    if not docs:
        raise ManageError("No experiments match the filters.")
    files = snapshot_of(docs)
    if files is None:
        raise ManageError("The selected experiments have no code snapshot (seml.source_files).")
    return files


def restore_sources(collection: Any, files: Sequence[Sequence[Any]], target: Path) -> list[Path]:
    """Write a snapshot from :func:`snapshot_for` into ``target`` (SEML's ``restore-sources``,
    later ``download-sources``); returns the files written: files already there with the
    snapshot's content are kept (``seml_hydra.store.snapshot.write_sources``). Raises :class:`ManageError`."""
    from seml_hydra.store.snapshot import SourceSnapshotError, write_sources

    target.mkdir(parents=True, exist_ok=True)
    try:
        return write_sources(collection.database, files, target)
    except SourceSnapshotError as error:
        raise ManageError(str(error)) from None


def foreign_files(collection: Any, files: Sequence[Sequence[Any]], target: Path) -> list[Path]:
    """The files in ``target`` that are not the snapshot's (``seml_hydra.store.snapshot.foreign_files``): a
    restore there mixes with or overwrites them. Raises :class:`ManageError`."""
    from seml_hydra.store.snapshot import SourceSnapshotError
    from seml_hydra.store.snapshot import foreign_files as foreign

    try:
        return foreign(collection.database, files, target)
    except SourceSnapshotError as error:
        raise ManageError(str(error)) from None


# ------------------------------------------------------------------------------- output


@dataclass
class Output:
    """One experiment's output for ``print-output``: ``text`` (``None`` when there is none, then
    ``problem`` says why), the ``path`` it came from, and ``skipped`` bytes left out at the
    start of a file longer than :data:`OUTPUT_TAIL_BYTES`."""

    exp_id: int
    status: str
    path: str | None
    text: str | None
    problem: str | None = None
    skipped: int = 0


def read_outputs(
    collection: Any, query: Mapping[str, Any], *, tail: int | None = None
) -> list[Output]:
    """The output of each matching experiment, decoded as UTF-8 with invalid bytes as U+FFFD;
    ``tail`` keeps the last lines only. As SEML 0.5's ``print-output``: the experiment's own
    output file (``seml.output_file``, written by SEML) when there is one, else the job's
    (``execution.slurm_output_file``); Sacred's ``captured_out`` when the file is unreadable
    or not safe to read. Files are read as :func:`read_output_tail` allows (inside the
    experiment's output folder, named as its own job's output, this user's, regular), at most
    their last
    :data:`OUTPUT_TAIL_BYTES`."""
    out = []
    projection = {**_PROJECTION, "captured_out": 1}
    for doc in select(collection, query, projection):
        own = (doc.get("seml") or {}).get("output_file")
        path = own or (_output_file(doc) if (doc.get("execution") or {}) else None)
        if not path:
            out.append(Output(doc["_id"], doc.get("status"), None, None, "no output file yet"))
            continue
        path = str(path)
        read = read_document_output(
            doc, path, collection.name, seml_output_file=bool(own), max_bytes=OUTPUT_TAIL_BYTES
        )
        data = read.data
        if data is None:
            captured = doc.get("captured_out")
            if isinstance(captured, str) and captured:
                data = captured.encode("utf-8")
                path = f"{path} ({read.problem}); Sacred's captured_out"
            else:
                out.append(Output(doc["_id"], doc.get("status"), path, None, read.problem))
                continue
        text = data.decode("utf-8", errors="replace")
        if tail:
            text = "\n".join(text.splitlines()[-tail:])
        out.append(Output(doc["_id"], doc.get("status"), path, text, skipped=read.skipped))
    return out


def fail_traces(collection: Any, query: Mapping[str, Any]) -> list[tuple[int, str, str]]:
    """``(id, status, trace)`` of the matching experiments (trace ``""`` when none)."""
    out = []
    for doc in select(collection, query, {"_id": 1, "status": 1, "fail_trace": 1}):
        trace = doc.get("fail_trace") or []
        text = "".join(trace) if isinstance(trace, list) else str(trace)
        out.append((doc["_id"], doc.get("status"), text))
    return out


# ------------------------------------------------------------------------------- queue


@dataclass
class QueueRow:
    collection: str | None
    job_id: str
    state: str
    reason: str | None
    nodes: str | None
    elapsed_s: float | None
    name: str
    exp_ids: list[int]


def queue(
    db: Any | None,
    job_ids: Sequence[str] | None = None,
    *,
    all_jobs: bool = False,
    slurm_states: Sequence[str] | None = None,
) -> list[QueueRow]:
    """The user's Slurm jobs, with the collection of their ``--comment`` and the experiments
    they run. Without ``all_jobs`` only jobs whose comment names an experiment collection of
    ``db`` are kept. One squeue call, one MongoDB query per collection."""
    from seml_hydra.slurm import client as slurm

    rows = slurm.squeue_jobs(job_ids=list(job_ids) if job_ids else None, states=slurm_states)
    names = set()
    if db is not None:
        names = {n for n in db.list_collection_names() if is_listed_collection(n)}
    by_collection: dict[str, list[Any]] = {}
    for row in rows:
        if row.comment in names:
            by_collection.setdefault(row.comment, []).append(row)
    exp_of: dict[tuple[str, str], list[int]] = {}
    for name, crows in by_collection.items():
        arrays = sorted({r.array_job_id or r.job_id_raw for r in crows})
        if not arrays:
            continue
        values = arrays + [str(a) for a in arrays]
        for doc in db[name].find(
            {
                "$or": [
                    {"slurm.array_id": {"$in": values}},
                    {"execution.array_id": {"$in": values}},
                ]
            },
            {"_id": 1, "slurm": 1, "execution": 1, "status": 1},
        ):
            task = task_of(doc)
            if task is not None:
                exp_of.setdefault((name, task[1]), []).append(doc["_id"])
            elif doc.get("status") == states.PENDING and array_of(doc):
                # SEML 0.5: a pending experiment waits for any pending task of its array
                exp_of.setdefault((name, f"{array_of(doc)}_*"), []).append(doc["_id"])
    out = []
    for row in rows:
        known = row.comment in names
        if not known and not all_jobs:
            continue
        ids: list[int] = []
        if known:
            for job in _row_jobs(row):
                ids.extend(exp_of.get((row.comment, job), []))
            if row.state == "PENDING" and row.array_job_id is not None:
                ids.extend(exp_of.get((row.comment, f"{row.array_job_id}_*"), []))
        out.append(
            QueueRow(
                collection=row.comment if known else None,
                job_id=row.job_id,
                state=row.state,
                reason=row.reason,
                nodes=row.nodelist,
                elapsed_s=row.elapsed_s,
                name=row.name,
                exp_ids=sorted(set(ids)),
            )
        )
    return out
