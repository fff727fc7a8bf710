"""Pure decisions about the Slurm task of an experiment document: which task runs it
(:func:`task_of`, :func:`array_of`), whether squeue/sacct still list it alive
(:func:`decide_killed`, :func:`sacct_states_by_task`), and which experiments belong to another
Slurm cluster (:func:`foreign_experiments`). No I/O: squeue and sacct rows come in as
arguments (``seml_hydra.slurm.client.SqueueRow`` / ``SacctRow``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, TypeGuard

from seml_hydra.core import states
from seml_hydra.core.ranges import format_ids
from seml_hydra.core.shell import seml_for
from seml_hydra.slurm.parse import is_alive, parse_job_id

#: a heartbeat younger than this (seconds) proves a run alive when Slurm has no record of its
#: job (Sacred beats every 10 s; see :func:`decide_killed`)
HEARTBEAT_STALE_S = states.HEARTBEAT_STALE_S

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


def task_of(doc: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(cluster, job id)`` of the Slurm task that runs (or will run) the experiment, or None
    when it has none yet. The job id is ``"<array_id>_<task_id>"``, or the plain ``"<job_id>"``
    when the submission was a single job (earlier launches submitted one task without
    ``--array``; Slurm rejects ``"<id>_0"`` for such a job) or, without a recorded ``job_id``
    (SEML's), a one-task array.

    A claimed experiment's ``execution`` (written by the job itself) wins over the submission's
    ``slurm[0]``; an ``execution`` without a cluster (written by an older version) takes
    ``slurm[0]``'s, so another cluster's experiment is not taken for this one's. The cluster is ``"local"`` for submitit's local executor (no Slurm job).
    """
    slurm = doc.get("slurm")
    first = slurm[0] if isinstance(slurm, list) and slurm else slurm
    first = first if isinstance(first, Mapping) else {}
    execution = doc.get("execution") or {}
    if isinstance(execution, Mapping) and execution.get("array_id") is not None:
        # an execution block of an older version names no cluster: the submission's does
        cluster = str(execution.get("cluster") or first.get("cluster") or "slurm")
        array, task = execution["array_id"], execution.get("task_id", 0)
    elif first.get("array_id") is not None and first.get("task_id") is not None:
        cluster = str(first.get("cluster") or "slurm")
        array, task = first["array_id"], first["task_id"]
    else:
        return None
    job_id = first.get("job_id")
    # our submissions record the job id sbatch gave (a one-task array's is "<array>_0");
    # SEML's record none, and name a one-task array by its ``num_tasks``
    single = str(first.get("array_id")) == str(array) and (
        "_" not in job_id if isinstance(job_id, str) else first.get("num_tasks") == 1
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


def array_values(arrays: Iterable[str]) -> list[Any]:
    """``array_id`` values to match in MongoDB: SEML stores integers, strings appear too."""
    arrays = sorted(set(arrays))
    return [int(a) for a in arrays] + arrays


def job_sort_key(job: str) -> tuple[int, ...]:
    """Sort key of a job id ``"<array>"`` / ``"<array>_<task>"`` (numeric: ``9_2`` before
    ``10_1``). Raises ValueError for an id that is not whole numbers."""
    return tuple(int(x) for x in job.split("_"))


def row_jobs(row: Any) -> list[str]:
    """Job ids (``"<array>_<task>"`` or ``"<job>"``) a squeue row stands for."""
    if row.array_job_id is not None:
        return [f"{row.array_job_id}_{t}" for t in row.task_ids or ()]
    return [str(row.job_id_raw)]


def squeue_alive(rows: Iterable[Any]) -> set[str]:
    """Job ids of the alive squeue rows."""
    return {job for row in rows if row.alive for job in row_jobs(row)}


def is_listed(job: str, alive: set[str] | frozenset[str]) -> bool:
    """Whether job ``job`` is among the ``alive`` job ids (pure): itself, or for a plain id
    ``"123"`` any task ``"123_<t>"`` (SEML records a one-task array as ``num_tasks: 1``, so
    :func:`task_of` names it ``"123"`` while squeue lists ``"123_0"``; ``scancel 123`` acts on
    all of its tasks)."""
    return job in alive or ("_" not in job and any(a.split("_")[0] == job for a in alive))


def is_slurm_task(task: tuple[str, str] | None) -> TypeGuard[tuple[str, str]]:
    """True for a task Slurm knows (not submitit's local executor, not missing)."""
    if task is None or task[0] == "local":
        return False

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
    executor, not submitted yet) is never lost here (a local run of this host: see
    :func:`decide_local_killed`). One that the user cancelled
    (``execution.cancel_time``) is INTERRUPTED rather than KILLED.

    Args:
        docs: active experiments (``_id``, ``status``, ``execution``, ``slurm``, ``heartbeat``).
        alive_tasks: ``"<array>_<task>"`` of every task squeue lists in a non-terminal state.
        sacct_states: ``{"<array>_<task>": [state, ...]}`` from sacct (missing = no record).
        now: current naive UTC time (default: now).
        heartbeat_stale_s: age in seconds from which a heartbeat no longer proves life.
    """

    if now is None:
        now = datetime.now(timezone.utc).replace(tzinfo=None)
    alive = set(alive_tasks)
    killed, interrupted, unsure = [], [], []
    for doc in docs:
        task = task_of(doc)
        if not is_slurm_task(task):
            continue
        job = task[1]
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


def local_process(doc: Mapping[str, Any], here: str) -> int | None:
    """The process id of the local run of RUNNING experiment ``doc`` when that run is on host
    ``here`` (pure), else None.

    A run outside Slurm (``seml <col> launch-worker``, ``start --local`` / ``--debug``,
    submitit's local executor) records ``execution: {"cluster": "local", "array_id": <pid>}``
    (``job.worker.run_local``, ``job.slurm_env.execution_identity``); its host is the
    worker's ``execution.hostname`` (written with the claim, before Sacred starts), else
    Sacred's ``host.hostname``. A pid says something only on the host that recorded it: None
    for another host, a missing host, a pid that is not a positive integer, or another state.
    """
    if doc.get("status") != states.RUNNING:
        return None
    execution, host = doc.get("execution"), doc.get("host")
    if not isinstance(execution, Mapping) or execution.get("cluster") != "local":
        return None
    hostname = execution.get("hostname")
    if hostname is None and isinstance(host, Mapping):
        hostname = host.get("hostname")
    if hostname != here:
        return None
    pid = str(execution.get("array_id"))
    return int(pid) if pid.isdigit() and int(pid) > 0 else None


def recorded_process_start(doc: Mapping[str, Any]) -> str | None:
    """The start time of the local run's process as the worker recorded it with its claim
    (``execution.process_start``, ``core.processes.process_start``), which tells that process
    from a later one given the same pid; None when not recorded (submitit's local executor,
    documents from before it was recorded) or not a string (pure)."""
    execution = doc.get("execution")
    start = execution.get("process_start") if isinstance(execution, Mapping) else None
    return start if isinstance(start, str) and start else None


def decide_local_killed(
    docs: Sequence[Mapping[str, Any]],
    local_alive: Mapping[tuple[int, str | None], bool],
    here: str,
    *,
    now: datetime | None = None,
    heartbeat_stale_s: float = HEARTBEAT_STALE_S,
) -> list[int]:
    """Ids of RUNNING experiments whose local process on this host is gone (pure).

    Lost only with both pieces of evidence: its process (:func:`local_process`) is not alive
    (``local_alive[(pid, start)]`` False, ``start`` its :func:`recorded_process_start`; a key
    missing from the map counts as alive) AND its Sacred
    heartbeat (else ``start_time``, :func:`last_sign_of_life`) is missing or at least
    ``heartbeat_stale_s`` seconds old (a fresh one proves life, e.g. a pid read wrongly).
    Experiments of another host are never lost here.

    Args:
        docs: active experiments (``_id``, ``status``, ``execution``, ``host``, ``heartbeat``).
        local_alive: ``{(pid, start): alive}``, ``core.processes.process_alive(pid, start)``
            of the pids :func:`local_process` names with their recorded start (a pid reused
            by a later process is not alive; without a recorded start, pid existence).
        here: this host's name (``socket.gethostname()``, what Sacred records).
        now: current naive UTC time (default: now).
        heartbeat_stale_s: age in seconds from which a heartbeat no longer proves life.
    """
    if now is None:
        now = datetime.now(timezone.utc).replace(tzinfo=None)
    lost = []
    for doc in docs:
        pid = local_process(doc, here)
        if pid is None or local_alive.get((pid, recorded_process_start(doc)), True):
            continue
        sign = last_sign_of_life(doc)
        if sign is not None and (now - sign).total_seconds() < heartbeat_stale_s:
            continue
        lost.append(doc["_id"])
    return lost


def sacct_states_by_task(rows: Iterable[Any], tasks: Iterable[str] = ()) -> dict[str, list[str]]:
    """``{job: [raw state, ...]}`` of sacct records (``slurm.SacctRow``s), pure.

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
        if is_slurm_task(task) and task[0] not in (*UNNAMED_CLUSTERS, here):
            out.setdefault(task[0], []).append(doc["_id"])
    return out


def foreign_lines(foreign: Mapping[str, Sequence[int]], here: str | None) -> list[str]:
    """One line per cluster of ``track.killed.DetectResult.foreign``, e.g. ``"3 experiment(s) run on
    cluster a (ids 1-3): not checked from cluster b"`` (pure)."""

    return [
        f"{len(ids)} experiment(s) run on cluster {cluster} ({format_ids(list(ids))}): not "
        f"checked from cluster {here}; run `status` there to check them."
        for cluster, ids in sorted(foreign.items())
    ]


#: squeue pending reasons after which a job does not start without someone acting
STUCK_REASONS = {
    "PartitionNodeLimit": "it asks for more nodes than the partition allows",
    "PartitionTimeLimit": "its time limit is above the partition's",
    "PartitionConfig": "it does not fit the partition's configuration",
    "BadConstraints": "its constraints cannot be met",
    "InvalidAccount": "the account is invalid",
    "InvalidQOS": "the QOS is invalid",
    "DependencyNeverSatisfied": "its dependency can never be satisfied",
    "JobHeldUser": "it is held",
    "JobHeldAdmin": "it is held by an administrator (or by `seml hold` run as root)",
}


def stuck_message(job: str, reason: str, name: str) -> str:
    """Why pending job ``job`` of collection ``name`` will not start by itself, and what to do
    (pure), for a ``reason`` of :data:`STUCK_REASONS`: ``Slurm will not start job 12_0
    (DependencyNeverSatisfied): its dependency can never be satisfied. Cancel it with `seml
    <name> cancel` ...``; a held job (``JobHeldUser``, ``JobHeldAdmin``) starts once released
    (``seml <name> release``; an administrator's hold, as root or by the administrator)."""
    head = f"Slurm will not start job {job} ({reason}): {STUCK_REASONS[reason]}"
    if reason == "JobHeldUser":
        return f"{head}. Release it with `{seml_for(name)} release`"
    if reason == "JobHeldAdmin":
        return f"{head}. It starts once released: `{seml_for(name)} release` as root, or ask them"
    return f"{head}. Cancel it with `{seml_for(name)} cancel` and change the resources"
