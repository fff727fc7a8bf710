"""Waiting: poll MongoDB until a launch's experiments finish, then hand Hydra its ``JobReturn``s.

One aggregate per tick counts the states; a live rich progress shows them. A submitit job that is
over while its experiments are still PENDING/RUNNING (killed, out of memory, crashed before the
claim) gets them marked KILLED with the tail of its output as ``fail_trace``, so waiting never
hangs on a dead job. Ctrl-C detaches: nothing is cancelled.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hydra.errors import CompactHydraException

from seml_hydra.core import states
from seml_hydra.core.documents import point_hydra_node, task_config
from seml_hydra.core.shell import seml_for
from seml_hydra.job import failfast
from seml_hydra.launch.recovery import recover_interrupted_submissions
from seml_hydra.slurm import client as slurm
from seml_hydra.store.db.retry import retrying, short_reason
from seml_hydra.store.results import restore_results
from seml_hydra.track.jobs import STUCK_REASONS, foreign_lines, stuck_message
from seml_hydra.track.killed import (
    alive_killed,
    detect_killed,
    mark_dead_jobs,
    recovered_message,
)


class ExperimentFailed(CompactHydraException, RuntimeError):
    """The return value of a FAILED/KILLED/INTERRUPTED point's ``JobReturn``: Hydra's sweeper
    re-raises it, so the multirun exits non-zero. The message holds the experiment's trace and
    where to read every failed point's.

    A ``CompactHydraException`` (Hydra 1.1+): Hydra's ``run_and_report`` then prints only the
    message, as it prints a failed task of its own basic launcher with only the app's frames,
    not Hydra's sweeper and ``JobReturn`` frames around the experiment's own trace (which
    ``run_and_report`` cannot strip: the exception is raised in the launcher, not in
    ``run_job``). Still a ``RuntimeError`` for callers that catch one (hydra-zen's ``launch``,
    Optuna's sweeper, which marks the trial failed and re-raises)."""


@dataclass(frozen=True)
class Submission:
    """What a point's ``JobReturn.return_value`` is with ``hydra.launcher.wait=false``: a handle
    to the submitted experiment, NOT the task's result (that is in MongoDB when it finishes; see
    ``seml <collection> status`` and ``seml_hydra.get_results``).

    Attributes: ``collection``, ``exp_id``, ``batch_id``, ``job_id`` (Slurm ``<array>_<task>``,
    the local process id, or None when an earlier launch's job runs it), ``status`` at return.
    """

    collection: str
    exp_id: int
    batch_id: int | None
    job_id: str | None
    status: str


def pending_reasons(collection: Any, ids: Sequence[int]) -> dict[str, str]:
    """``{Slurm job id: reason}`` of the PENDING experiments' jobs that squeue lists as pending.
    Raises ``seml_hydra.slurm.client.SlurmError`` when squeue fails."""
    arrays = sorted(
        {
            str(d["slurm"][0]["array_id"])
            for d in collection.find(
                {
                    "_id": {"$in": list(ids)},
                    "status": states.PENDING,
                    "slurm.0.array_id": {"$exists": True},
                },
                {"slurm.array_id": 1},
            )
            if d.get("slurm") and str(d["slurm"][0].get("array_id", "")).isdigit()
        }
    )
    if not arrays:
        return {}
    rows = slurm.squeue_jobs(job_ids=arrays, all_users=True)
    return {r.job_id: r.reason for r in rows if r.state == "PENDING" and r.reason}


class StateCounts(dict):
    """``{status: count}``, with ``pruned``: how many of the COMPLETED ones were stopped early
    (a ``pruned`` field: ``seml_hydra.report``)."""

    pruned: int = 0


def count_states(collection: Any, ids: Sequence[int]) -> StateCounts:
    """``{status: count}`` of the experiments ``ids`` and how many COMPLETED ones were stopped
    early (:class:`StateCounts`): one aggregate query."""
    pipeline = [
        {"$match": {"_id": {"$in": list(ids)}}},
        {
            "$group": {
                "_id": {
                    "status": "$status",
                    "pruned": {"$ne": [{"$type": "$pruned"}, "missing"]},
                },
                "n": {"$sum": 1},
            }
        },
    ]
    counts = StateCounts()
    for row in collection.aggregate(pipeline):
        status = row["_id"]["status"]
        counts[status] = counts.get(status, 0) + row["n"]
        if row["_id"]["pruned"] and status == states.COMPLETED:
            counts.pruned += row["n"]
    return counts


#: the waiter spends at most about 1/this of its time in the state count: the pause between two
#: polls is at least this many times the last count's duration (:func:`poll_pause`)
QUERY_SHARE = 20
#: the longest pause :func:`poll_pause` stretches to (seconds): a count slowed by a passing
#: cause must not leave the waiter asleep long after the experiments finished
MAX_STRETCHED_PAUSE_S = 10.0


def poll_pause(poll_interval_s: float, query_s: float) -> float:
    """Seconds to sleep before the next poll (pure): ``poll_interval_s``, stretched to
    :data:`QUERY_SHARE` x ``query_s`` (the last count's own duration, s: not the time spent
    waiting for an unreachable MongoDB) when counting is slow (a launch of 100,000 experiments,
    a loaded server), at most to :data:`MAX_STRETCHED_PAUSE_S`, so that a short poll interval
    costs the database little whatever the launch's size."""
    stretched = min(MAX_STRETCHED_PAUSE_S, QUERY_SHARE * max(0.0, query_s))
    return max(float(poll_interval_s), stretched)


def wait_for(
    collection: Any,
    ids: Sequence[int],
    *,
    poll_interval_s: float,
    jobs: Mapping[str, tuple[Any, Sequence[int]]],
    console: Any,
    collection_name: str,
    slurm_check_s: float | None = None,
    fail_fast: Mapping[str, int] | None = None,
) -> None:
    """Block until every experiment in ``ids`` is in a terminal state, showing live progress.

    The states are counted every ``poll_interval_s`` seconds, or less often when counting is
    slow (:func:`poll_pause`).

    ``jobs`` are this launch's local submitit jobs, checked for dead processes every tick
    (``seml_hydra.track.killed.mark_dead_jobs``). With
    ``slurm_check_s``, experiments on Slurm are checked against the scheduler every that many
    seconds (``seml_hydra.track.killed.detect_killed``: KILLED only with evidence from squeue and
    sacct; a failed query marks nothing), which also covers experiments of earlier launches
    this one waits for. A KILLED experiment counts as finished only once squeue no longer
    lists its Slurm task alive (:func:`unconfirmed_killed`: another tool's KILLED, e.g. SEML
    0.5.7's ``status``, of a job that runs on). An experiment deleted
    meanwhile stops being waited for. ``fail_fast``: this launch's fail-fast groups
    (``{group: max_failures}``, ``job.failfast``): whenever the FAILED count grew to a group's
    limit, the launcher applies the rule too (``failfast.enforce``; the jobs apply it
    themselves, this covers a job that died before it could). Raises ``SystemExit(130)``
    on Ctrl-C after saying how to follow the experiments; nothing is cancelled.

    While MongoDB is unreachable every database step is retried
    (``seml_hydra.store.db.retry.retrying``: up to ``SEML_MONGODB_RETRY_S``, 300 s by default, per
    step) and the console says once that the launcher waits for the database, and when it is
    back; past that budget the connection error is raised.
    """
    from rich.live import Live
    from rich.text import Text

    unique = sorted(set(ids))
    pending_jobs = dict(jobs)
    start = time.monotonic()
    next_slurm_check = start + (slurm_check_s or 0)
    told: set[tuple[str, str]] = set()
    confirmed_killed: set[int] = set()
    outage: dict[str, bool] = {"on": False}

    def on_retry(attempt: int, error: BaseException, waited: float) -> None:
        if not outage["on"]:
            outage["on"] = True
            console.print(
                f"MongoDB is unreachable ({short_reason(error)}): waiting for the database; "
                "the experiments keep running."
            )

    def db(operation: Any, what: str) -> Any:
        """``operation()`` retried while MongoDB is away, saying so once per outage."""
        value = retrying(operation, what, on_retry=on_retry)
        if outage["on"]:
            outage["on"] = False
            console.print("MongoDB is reachable again; waiting for the experiments.")
        return value

    last_count_s = [0.0]
    failures_seen = [0]

    def enforce_fail_fast(failed: int) -> bool:
        """Apply the fail-fast rule when ``failed`` grew to a limit; whether it stopped any."""
        if not fail_fast or failed <= failures_seen[0] or failed < min(fail_fast.values()):
            return False
        failures_seen[0] = failed
        stops = [
            db(
                lambda g=group, n=limit: failfast.enforce(collection, failfast.mark(g, n)),
                "applying fail-fast",
            )
            for group, limit in fail_fast.items()
        ]
        return any(stop is not None and stop.stopped for stop in stops)

    def timed_count() -> dict[str, int]:
        """The state counts; the duration of this attempt alone in ``last_count_s`` (an outage
        ridden out by ``db`` is no slow count: its minute stretched the pause to 20 minutes)."""
        began = time.monotonic()
        counts = count_states(collection, unique)
        last_count_s[0] = time.monotonic() - began
        return counts

    def render(counts: Mapping[str, int]) -> Text:
        done = sum(counts.get(s, 0) for s in states.TERMINAL)
        parts = [f"{s.lower()}: {counts[s]}" for s in states.ALL if counts.get(s)]
        pruned = getattr(counts, "pruned", 0)
        if pruned:  # stopped early (seml_hydra.report), among the COMPLETED ones
            parts.insert(
                parts.index(f"completed: {counts[states.COMPLETED]}") + 1, f"pruned: {pruned}"
            )
        elapsed = int(time.monotonic() - start)
        states_part = f" ({', '.join(parts)})" if parts else ""  # none counted yet: no "()"
        return Text(f"{collection_name}: {done}/{len(unique)} finished{states_part} [{elapsed}s]")

    try:
        with Live(render({}), console=console, transient=False, auto_refresh=False) as live:
            while True:
                counts = db(timed_count, "counting states")
                query_s = last_count_s[0]
                live.update(render(counts), refresh=True)
                finished = sum(counts.get(s, 0) for s in states.TERMINAL)
                if counts.get(states.KILLED) and slurm_check_s is not None:
                    finished -= db(
                        lambda: unconfirmed_killed(collection, unique, confirmed_killed),
                        "checking KILLED experiments with Slurm",
                    )
                if finished + (len(unique) - sum(counts.values())) >= len(unique):
                    break  # every experiment finished or was deleted meanwhile
                if enforce_fail_fast(counts.get(states.FAILED, 0)):
                    continue
                if pending_jobs and db(
                    lambda: mark_dead_jobs(collection, pending_jobs), "checking local jobs"
                ):
                    continue
                if slurm_check_s is not None and time.monotonic() >= next_slurm_check:
                    next_slurm_check = time.monotonic() + slurm_check_s
                    detected = db(
                        lambda: detect_killed(
                            collection,
                            {"_id": {"$in": unique}},
                            recover=recover_interrupted_submissions,
                        ),
                        "checking Slurm for killed jobs",
                    )
                    if detected.recovered:
                        then = f"submit them with `{seml_for(collection_name)} start` (this launch "
                        console.print(
                            recovered_message(detected.recovered, then + "keeps waiting)."),
                            markup=False,
                        )
                    if detected.foreign:
                        for line in foreign_lines(detected.foreign, detected.cluster):
                            if ("foreign", line) not in told:
                                told.add(("foreign", line))
                                console.print(line, markup=False)
                    if detected.killed:
                        continue
                    db(
                        lambda: _say_stuck(console, collection, unique, collection_name, told),
                        "reading pending reasons",
                    )
                time.sleep(poll_pause(poll_interval_s, query_s))
        if not console.is_terminal:
            console.line()  # Live leaves no line break behind when not on a terminal
    except KeyboardInterrupt:
        if not console.is_terminal:
            console.line()  # after the last progress line
        console.print(
            f"Detached. Nothing was cancelled; follow the experiments with "
            f"`{seml_for(collection_name)} status` (or `seml queue`).",
            markup=False,
        )
        raise SystemExit(130) from None


def unconfirmed_killed(collection: Any, ids: Sequence[int], confirmed: set[int]) -> int:
    """How many of the KILLED experiments among ``ids`` (those not in ``confirmed``) a waiting
    launcher must not count as finished: those whose Slurm task squeue lists alive
    (``seml_hydra.track.killed.alive_killed``), or all of them when Slurm cannot be asked. The
    others are added to ``confirmed`` (a task squeue no longer lists does not come back), so
    Slurm is asked about each until it is confirmed once. Raises pymongo errors."""
    found = collection.find({"_id": {"$in": list(ids)}, "status": states.KILLED}, {"_id": 1})
    every = {d["_id"] for d in found}
    confirmed &= every  # one reset meanwhile (`seml reset`) is asked about again
    killed = sorted(every - confirmed)
    if not killed:
        return 0
    try:
        alive = set(alive_killed(collection, killed))
    except slurm.SlurmError:
        return len(killed)
    confirmed.update(i for i in killed if i not in alive)
    return len(alive)


def _job_id(doc: Mapping[str, Any]) -> str | None:
    """``hydra.job.id`` from the ``execution`` block (for documents run before ``hydra.job_id``
    was recorded): ``<array>_<task>`` on Slurm, the job id locally."""
    execution = doc.get("execution") or {}
    if "array_id" not in execution:
        return None
    if execution.get("cluster") == "local":
        return str(execution["array_id"])
    return f"{execution['array_id']}_{execution.get('task_id', 0)}"


def stuck_jobs(collection: Any, ids: Sequence[int]) -> list[tuple[str, str]]:
    """``(job id, reason)`` of the PENDING experiments among ``ids`` whose Slurm job will not
    start by itself (:func:`pending_reasons` in :data:`STUCK_REASONS`), sorted. Raises
    ``seml_hydra.slurm.client.SlurmError`` when squeue fails."""
    reasons = pending_reasons(collection, ids)
    return sorted((job, reason) for job, reason in reasons.items() if reason in STUCK_REASONS)


def _say_stuck(
    console: Any, collection: Any, ids: Sequence[int], name: str, told: set[tuple[str, str]]
) -> None:
    """Print, once per job and reason, why a pending job will not start by itself."""
    try:
        stuck = stuck_jobs(collection, ids)
    except slurm.SlurmError:
        return
    for job, reason in stuck:
        if (job, reason) not in told:
            told.add((job, reason))
            console.print(
                f"{stuck_message(job, reason, name)}, or press Ctrl-C to detach.", markup=False
            )


class _Pending:
    """A value :func:`_lazy_field` builds on first read: ``factory()``."""

    def __init__(self, factory: Any) -> None:
        self.factory = factory


def _lazy_field(name: str) -> property:
    """A property standing for dataclass field ``name`` whose value may be a :class:`_Pending`,
    built (once) when first read."""
    key = f"_lazy_{name}"

    def get(self: Any) -> Any:
        value = self.__dict__.get(key)
        if isinstance(value, _Pending):
            value = self.__dict__[key] = value.factory()
        return value

    def set(self: Any, value: Any) -> None:
        self.__dict__[key] = value

    return property(get, set)


@functools.cache
def _document_job_return() -> type:
    """Hydra's ``JobReturn`` whose ``cfg`` and ``hydra_cfg`` may be built on first read (Hydra
    imported on first use: the CLI imports this module too)."""
    from hydra.core.utils import JobReturn

    class DocumentJobReturn(JobReturn):
        """A ``JobReturn`` built from an experiment's document; its ``cfg`` and ``hydra_cfg``
        (a ``DictConfig`` each, ~5-15 ms to create) are created when first read: Hydra's
        sweepers read ``status`` and ``return_value`` only."""

        cfg = _lazy_field("cfg")
        hydra_cfg = _lazy_field("hydra_cfg")

        def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
            # pickled as Hydra's own JobReturn with its configs built (this class is local,
            # and a pending config holds a closure): hydra-zen's launch hands the JobReturns
            # to the user, who may pickle them, as a plain JobReturn pickles
            names = [f.name for f in dataclasses.fields(JobReturn)]
            return _plain_job_return, (tuple(getattr(self, name) for name in names),)

    return DocumentJobReturn


def _plain_job_return(values: tuple[Any, ...]) -> Any:
    """Hydra's ``JobReturn`` with its dataclass fields set to ``values`` (in field order): what a
    pickled ``DocumentJobReturn`` loads as."""
    from hydra.core.utils import JobReturn

    ret = JobReturn()
    for field, value in zip(dataclasses.fields(JobReturn), values):
        setattr(ret, field.name, value)
    return ret


def job_return_from_document(
    doc: Mapping[str, Any], hydra_base: Mapping[str, Any], collection: str = "?"
) -> Any:
    """Build the Hydra ``JobReturn`` of a finished experiment from its document.

    COMPLETED: status COMPLETED, ``return_value`` = the stored result as plain data
    (``seml_hydra.store.results.restore_results``: no code runs; a stored object that would need code
    is returned as its plain dict, with a warning naming ``collection``, the experiment and the
    key). Otherwise status FAILED and ``return_value`` raises :class:`ExperimentFailed`
    with the experiment's ``fail_trace``. ``cfg`` (the document's config) and ``hydra_cfg``
    (``hydra_base`` with the document's ``hydra.node_diff``) are ``DictConfig``s created when
    first read (``JobReturn`` subclass).
    """
    from hydra.core.utils import JobStatus
    from omegaconf import OmegaConf

    hydra_doc = doc.get("hydra", {})

    def hydra_cfg() -> Any:
        hydra_node = point_hydra_node(hydra_base, hydra_doc)
        hydra_node["job"]["id"] = hydra_doc.get("job_id") or _job_id(doc)
        return OmegaConf.create({"hydra": hydra_node})

    config = task_config(doc)  # without the seed staging added for Sacred
    ret = _document_job_return()()
    ret.overrides = list(hydra_doc.get("overrides", []))
    ret.cfg = _Pending(lambda: OmegaConf.create(config))
    ret.hydra_cfg = _Pending(hydra_cfg)
    ret.working_dir = hydra_doc.get("working_dir") or hydra_doc.get("output_dir")
    ret.task_name = hydra_doc.get("task_name") or hydra_doc.get("job_name")
    if doc.get("status") == states.COMPLETED:
        restored = {"_id": doc.get("_id"), "result": doc.get("result")}
        restore_results([restored], collection)
        ret.status = JobStatus.COMPLETED
        ret._return_value = restored["result"]
    else:
        trace = doc.get("fail_trace") or []
        text = "".join(trace) if isinstance(trace, list) else str(trace)
        if not text.strip():
            text = (
                "no reason was recorded (the state was set without a trace, e.g. by another "
                f"tool); see `{seml_for(collection)} print-output -id {doc.get('_id')}`"
            )
        ret.status = JobStatus.FAILED
        more = (  # not for a point deleted meanwhile: print-fail-trace no longer has it
            f"\n(`{seml_for(collection)} print-fail-trace` shows the trace of every failed point)"
            if doc.get("status") in states.RERUNNABLE
            else ""
        )
        ret._return_value = ExperimentFailed(
            f"experiment {doc.get('_id')} is {doc.get('status')}:\n{text.strip()}{more}"
        )
    return ret
