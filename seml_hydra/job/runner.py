"""The run step: the callable submitit pickles and every rank of every job executes.

Per experiment: claim it atomically -> plan this rank (``seml_hydra.job.rank``) -> run the Hydra task
through ``hydra.core.utils.run_job`` with the stored, already resolved config -> record. The
primary rank runs under Sacred's ``MongoObserver`` overwriting the experiment's own document (as
SEML does), so the document IS the Sacred run (``start_time``, ``heartbeat``, ``host``,
``captured_out``, ``result``, ``stop_time``, ``fail_trace``).

A job whose task failed raises at the end, so submitit exits non-zero and Slurm (``sacct``) shows
FAILED too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import socket
import threading
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from seml_hydra.core import states
from seml_hydra.store.retry import is_connection_error, retrying, short_reason

log = logging.getLogger(__name__)

#: GridFS payloads already loaded in this process, by file id
_PAYLOADS: dict[str, Any] = {}


@dataclass
class Payload:
    """What every job of a batch needs besides the documents; pickled once per batch into GridFS
    (``seml.payload_file``), so ``seml <collection> start`` can submit again from any shell.

    Attributes:
        task_function: the ``@hydra.main`` task (cloudpickled by value when defined in __main__).
        hydra_context: Hydra's ``HydraContext`` (config loader and callbacks) for ``run_job``.
        singleton_state: ``Singleton.get_state()`` of the launching process (ConfigStore...).
        typed_hydra_base: pickled ``compose.typed_hydra_node`` of the base Hydra node (None in
            payloads from before it existed).

    The batch's base Hydra node (each document stores its own diff to it) is kept as JSON in the
    GridFS file's ``metadata.hydra_base``, readable without unpickling (:func:`hydra_base`).
    """

    task_function: Any
    hydra_context: Any
    singleton_state: Any
    typed_hydra_base: bytes | None = None


class ExperimentInterrupted(RuntimeError):
    """Raised into the task when Slurm signalled a timeout or preemption that cannot be turned
    into a requeue; the experiment is recorded FAILED with this message."""


class RankExperimentsFailed(RuntimeError):
    """Raised at the end of a job whose experiments failed on this rank: makes the job exit
    non-zero. The traces are in the documents (``fail_trace``)."""


def execution_identity(env: Mapping[str, str]) -> dict[str, Any]:
    """This job's ``execution.{cluster, array_id, task_id}`` (SEML 0.5's ``ExecutionDoc``).

    Slurm: ``SLURM_CLUSTER_NAME``, ``SLURM_ARRAY_JOB_ID`` (or ``SLURM_JOB_ID`` for a job that is
    not an array) and ``SLURM_ARRAY_TASK_ID`` (or 0); without ``SLURM_CLUSTER_NAME`` the cluster
    is ``"slurm"``, which ``seml_hydra.track.jobs`` takes for this cluster (``UNNAMED_CLUSTERS``,
    as documents from before the real name was recorded). submitit's local executor: cluster
    ``"local"``, the local job id (the process id of the job) and task 0.

    Raises ``ValueError`` naming the variable when neither is present or a value is not an integer.
    """

    def integer(name: str, default: str | None = None) -> int:
        value = env.get(name, default)
        try:
            return int(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ValueError(f"{name}={value!r} is not an integer job id") from None

    if env.get("SUBMITIT_EXECUTOR") == "local" or (
        "SLURM_JOB_ID" not in env and "SUBMITIT_LOCAL_JOB_ID" in env
    ):
        return {"cluster": "local", "array_id": integer("SUBMITIT_LOCAL_JOB_ID"), "task_id": 0}
    if "SLURM_JOB_ID" not in env:
        raise ValueError("neither SLURM_JOB_ID nor SUBMITIT_LOCAL_JOB_ID is set: not in a job")
    array = "SLURM_ARRAY_JOB_ID" if "SLURM_ARRAY_JOB_ID" in env else "SLURM_JOB_ID"
    return {
        "cluster": env.get("SLURM_CLUSTER_NAME", "slurm"),
        "array_id": integer(array),
        "task_id": integer("SLURM_ARRAY_TASK_ID", "0"),
    }


def restart_count(env: Mapping[str, str]) -> int:
    """How often Slurm restarted this job: ``SLURM_RESTART_COUNT`` (0 when unset, as in a job's
    first run and under submitit's local executor). Slurm increments it in every requeued run,
    whether Slurm requeued the job itself (a node failure) or ``scontrol requeue`` did
    (``JobRunner.checkpoint``). Raises ``ValueError`` naming the variable when it is not an
    integer."""
    value = env.get("SLURM_RESTART_COUNT", "0")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"SLURM_RESTART_COUNT={value!r} is not an integer") from None


def claim_filter(
    exp_id: int, execution: Mapping[str, Any], *, stale_s: float = states.HEARTBEAT_STALE_S
) -> dict[str, Any]:
    """MongoDB filter of the claim rule (SEML's multi-task change, plus requeued runs).

    The experiment may run when it is PENDING for this job's array (:func:`pending_for`), or
    RUNNING/RESCHEDULED with this very ``execution.{cluster, array_id, task_id}`` (another rank of this job, or this array task
    requeued), under these conditions on the stored ``execution.restart`` (missing = 0) and this
    run's ``execution["restart"]`` (:func:`restart_count`, missing = 0):

    - RESCHEDULED (our own time-limit requeue): stored restart <= this run's.
    - RUNNING, same restart: another rank of this very run.
    - RUNNING, smaller stored restart: an earlier run of this array task (Slurm requeued the job,
      e.g. after its node's slurmd died, while that run may live on): taken over only when it is
      dead, i.e. the latest of its ``heartbeat``, ``start_time`` and ``execution.claim_time`` is
      older than ``stale_s`` seconds (or none exists). The age is computed by the server
      (``$$NOW``) from the stored dates, so no client clock or time zone takes part.

    Anything else - COMPLETED, FAILED, another job's RUNNING experiment, a later run's, one
    PENDING for another array - does not match, so it is never run twice. Raises ``KeyError``
    when an identity key is missing.
    """
    same_job = {f"execution.{key}": execution[key] for key in ("cluster", "array_id", "task_id")}
    mine = int(execution.get("restart") or 0)
    stored = {"$ifNull": ["$execution.restart", 0]}
    last_sign = {"$max": ["$heartbeat", "$start_time", "$execution.claim_time"]}
    dead = {"$lt": [last_sign, {"$subtract": ["$$NOW", int(stale_s * 1000)]}]}
    return {
        "_id": exp_id,
        "$or": [
            {"status": states.PENDING, **pending_for(execution["array_id"])},
            {"status": states.RESCHEDULED, **same_job, "$expr": {"$lte": [stored, mine]}},
            {
                "status": states.RUNNING,
                **same_job,
                "$expr": {
                    "$or": [
                        {"$eq": [stored, mine]},
                        {"$and": [{"$lt": [stored, mine]}, dead]},
                    ]
                },
            },
        ],
    }


def pending_for(array_id: Any) -> dict[str, Any]:
    """MongoDB filter: a PENDING experiment that job array ``array_id`` may claim (pure).

    Its recorded submission (``slurm[i].array_id``: ``seml_hydra.launch.submit.submit_group`` writes
    ``slurm[0]``, SEML 0.5 the entry it submitted with; an integer, or a string) is this array,
    or none is recorded yet: between ``sbatch`` and the write of its ids the experiment carries
    only the ``slurm.0.submitting`` mark, and whichever task of the submission starts first
    claims it. An array no document records - the orphan of a submitter that died before the
    write, whose experiments were submitted again since - claims none of the experiments
    recorded in another array.
    """
    values = [array_id, str(array_id)]
    if isinstance(array_id, str) and array_id.isdigit():
        values.append(int(array_id))
    return {
        "$or": [
            {"slurm.array_id": {"$in": values}},
            {"slurm.array_id": {"$exists": False}},
        ]
    }


#: the fields :func:`claim` reads back to explain a refusal (and to tell an earlier run)
_REFUSAL_FIELDS = {"status": 1, "execution": 1, "heartbeat": 1, "start_time": 1, "slurm": 1}


def claim(
    collection: Any,
    exp_id: int,
    execution: Mapping[str, Any],
    *,
    record_execution: bool = True,
) -> tuple[dict[str, Any] | None, str | None]:
    """Claim experiment ``exp_id`` for this rank with one atomic ``find_one_and_update``.

    Returns ``(document after the claim, None)`` when :func:`claim_filter` matches (the document
    is then RUNNING with this job's identity, ``execution.restart`` and ``execution.claim_time``,
    an aware UTC datetime), else ``(None, why)`` and nothing was written. ``record_execution``
    (the primary rank): ``execution`` - identity plus this rank's output file paths - replaces
    the stored one; the other ranks only set the identity keys, so the document names the
    primary's output files whatever order the ranks claim in.
    """
    doc, why, _ = _claim_once(collection, exp_id, execution, record_execution=record_execution)
    return doc, why


def _claim_once(
    collection: Any, exp_id: int, execution: Mapping[str, Any], *, record_execution: bool
) -> tuple[dict[str, Any] | None, str | None, dict[str, Any] | None]:
    """:func:`claim`, also returning the document as read after a refusal (None otherwise)."""
    from pymongo import ReturnDocument

    stamp = {"restart": int(execution.get("restart") or 0), "claim_time": _utcnow()}
    if record_execution:
        update = {"status": states.RUNNING, "execution": {**execution, **stamp}}
    else:
        update = {"status": states.RUNNING}
        update.update({f"execution.{k}": execution[k] for k in ("cluster", "array_id", "task_id")})
        update.update({f"execution.{k}": v for k, v in stamp.items()})
    doc = collection.find_one_and_update(
        claim_filter(exp_id, execution), {"$set": update}, return_document=ReturnDocument.AFTER
    )
    if doc is not None:
        return doc, None, None
    current = collection.find_one({"_id": exp_id}, _REFUSAL_FIELDS)
    if current is None:
        return None, "it no longer exists", None
    return None, _claim_refusal(current, execution), current


#: how long a requeued task waits for an earlier run of it that is still alive (seconds), and
#: how often it looks again
EARLIER_RUN_WAIT_S = 3600.0
EARLIER_RUN_POLL_S = 5.0


def claim_after_earlier_run(
    collection: Any,
    exp_id: int,
    execution: Mapping[str, Any],
    *,
    record_execution: bool = True,
    max_wait_s: float = EARLIER_RUN_WAIT_S,
    poll_s: float = EARLIER_RUN_POLL_S,
) -> tuple[dict[str, Any] | None, str | None]:
    """:func:`claim`, waiting while an earlier run of this array task still runs the experiment.

    After Slurm requeued a job whose processes live on (its node's slurmd died), the requeued
    task (larger ``execution["restart"]``) finds the experiment RUNNING in the earlier run. It
    polls every ``poll_s`` seconds until the earlier run ends it (then ``(None, "it is
    COMPLETED, not PENDING")``: nothing runs twice), or its heartbeat turns stale (then the claim
    takes it over, see :func:`claim_filter`), at most ``max_wait_s`` seconds (then ``(None,
    why)``: the earlier run keeps it). Returns what :func:`claim` returns.
    """
    deadline = time.monotonic() + max_wait_s
    waited = False
    while True:
        # repeating the claim is safe: once it applied, the document is RUNNING in this very
        # run, which the claim filter accepts again
        doc, why, current = retrying(
            lambda: _claim_once(collection, exp_id, execution, record_execution=record_execution),
            f"claiming experiment {exp_id}",
        )
        if doc is not None or current is None or not _earlier_run(current, execution):
            if waited:
                log.warning("Experiment %s: done waiting for the earlier run", exp_id)
            return doc, why
        if time.monotonic() >= deadline:
            return None, f"{why}; gave up waiting after {max_wait_s:.0f} s"
        if not waited:
            log.warning(
                "Experiment %s %s: waiting until it ends, or until its heartbeat is older than "
                "%.0f s (then this run takes over), at most %.0f s",
                exp_id,
                why,
                states.HEARTBEAT_STALE_S,
                max_wait_s,
            )
            waited = True
        time.sleep(poll_s)


def _earlier_run(current: Mapping[str, Any], execution: Mapping[str, Any]) -> bool:
    """Whether ``current`` is RUNNING in an earlier run (smaller restart count) of this very
    array task (pure)."""
    stored = current.get("execution") or {}
    if current.get("status") != states.RUNNING or not isinstance(stored, Mapping):
        return False
    if any(stored.get(k) != execution[k] for k in ("cluster", "array_id", "task_id")):
        return False
    return int(stored.get("restart") or 0) < int(execution.get("restart") or 0)


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def adapt_hydra_node(hydra_node: Mapping[str, Any], plan: Any) -> dict[str, Any]:
    """The Hydra node this rank runs with (pure).

    Only the primary rank writes ``.hydra/`` and the job log file (``output_subdir`` -> None and
    the ``file`` handler dropped elsewhere); the job logger's root level is the plan's level (on
    the other ranks every handler's level too, so loggers with their own level are filtered as
    well); with several ranks every log format names the rank.
    """
    import copy

    node = copy.deepcopy(dict(hydra_node))
    job_logging = node.get("job_logging") or {}
    root = job_logging.get("root")
    if isinstance(root, dict):
        name = logging.getLevelName(plan.log_level)
        # a registered level by name, a custom number as is ("Level 15" is not a level)
        root["level"] = name if isinstance(logging.getLevelName(name), int) else plan.log_level
    if not plan.writes_outputs:
        node["output_subdir"] = None
        handlers = job_logging.get("handlers") or {}
        handlers.pop("file", None)
        if isinstance(root, dict) and root.get("handlers"):
            root["handlers"] = [h for h in root["handlers"] if h != "file"]
    if plan.global_rank != 0:
        # The root level alone does not stop a logger that sets its own level (submitit's
        # "Job completed successfully" is INFO): the handlers of the other ranks filter too.
        for handler in (job_logging.get("handlers") or {}).values():
            if isinstance(handler, dict):
                handler["level"] = root["level"] if isinstance(root, dict) else plan.log_level
    if plan.world_size > 1:
        for formatter in (job_logging.get("formatters") or {}).values():
            if isinstance(formatter, dict) and "format" in formatter:
                formatter["format"] = f"[rank {plan.global_rank}] {formatter['format']}"
    return node


def load_payload(db: Any, payload_id: str) -> tuple[Payload, dict[str, Any]]:
    """Load (once per process) the batch payload and its base Hydra node from GridFS file
    ``payload_id``. Raises ``gridfs.errors.NoFile`` when it is gone."""
    if payload_id not in _PAYLOADS:
        import cloudpickle
        import gridfs
        from bson import ObjectId

        grid_out = gridfs.GridFS(db).get(ObjectId(payload_id))
        _PAYLOADS[payload_id] = (
            cloudpickle.loads(grid_out.read()),
            grid_out.metadata["hydra_base"],
        )
    return _PAYLOADS[payload_id]


def hydra_base(db: Any, payload_id: str) -> dict[str, Any]:
    """The base Hydra node stored with payload ``payload_id`` (no unpickling)."""
    import gridfs
    from bson import ObjectId

    return gridfs.GridFS(db).find_one({"_id": ObjectId(payload_id)}).metadata["hydra_base"]


@dataclass
class JobRunner:
    """The picklable callable each array task runs: ``JobRunner(...)(exp_ids)``.

    Attributes:
        db_cfg: the database inputs (``seml_hydra.store.settings.resolve_db_settings``), resolved again
            on the node the way the launcher did; never holds a password (a URL's password
            reaches the job in its environment: ``seml_hydra.store.job_db.job_db_environment``).
        collection: the collection name.
        payload_id: GridFS file id of the batch's :class:`Payload`.
        primary_log_level, other_log_level: log levels (names) of the primary and other ranks.
        max_requeues: how often an experiment may be requeued on timeout/preemption
            (``seml_hydra.job.requeue``) before it ends FAILED.
    """

    db_cfg: dict[str, Any] | None
    collection: str
    payload_id: str
    primary_log_level: str = "INFO"
    other_log_level: str = "ERROR"
    max_requeues: int = 3

    def __call__(self, exp_ids: list[int]) -> list[str]:
        """Run the experiments ``exp_ids`` one after another on this rank.

        Returns one outcome per experiment (``"COMPLETED"``, ``"FAILED"`` or ``"SKIPPED: why"``).
        Raises :class:`RankExperimentsFailed` after the last one when any failed on this rank.
        """
        from seml_hydra.store.client import connect, skip_exit_join
        from seml_hydra.store.settings import resolve_db_settings

        db = connect(resolve_db_settings(self.db_cfg, start_embedded=False), retry=True)
        collection = db[self.collection]
        self._collection = collection  # for checkpoint(), which submitit calls on this object
        execution = execution_identity(os.environ)
        execution["restart"] = restart_count(os.environ)
        execution.update(_output_files())
        try:
            outcomes = [self._run_one(db, collection, exp_id, execution) for exp_id in exp_ids]
        finally:
            skip_exit_join()  # every write of this task is done
        failed = [str(i) for i, o in zip(exp_ids, outcomes) if o == states.FAILED]
        if failed:
            raise RankExperimentsFailed(
                f"experiment(s) {', '.join(failed)} of collection {self.collection!r} failed; "
                f"see `seml {self.collection} print-fail-trace -id {failed[0]}`"
            )
        return outcomes

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the settings only, not the runtime handles (``_collection``, ``_current``):
        submitit pickles this object again to requeue it."""
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def checkpoint(self, exp_ids: list[int]) -> Any:
        """submitit's hook on a timeout/preemption signal (global rank 0 only): requeue the same
        array task when the running experiment opted in (``seml_hydra.job.requeue.on_requeue``).

        Saves the task's state through its hook, marks the experiment RESCHEDULED, stops
        Sacred's observer from writing again, and returns the resubmission (submitit then runs
        ``scontrol requeue <array>_<task>``). Raises :class:`ExperimentInterrupted` (which ends
        the task, recorded as FAILED with this reason) when the task did not opt in or the
        experiment was requeued ``max_requeues`` times already.
        """
        import submitit

        from seml_hydra.job import requeue

        exp_id = getattr(self, "_current", None)
        if exp_id is None:  # between experiments: nothing to save, requeue the rest
            return submitit.helpers.DelayedSubmission(self, exp_ids)
        hook = requeue._current_hook()
        if hook is None and requeue._task_has_started():
            raise ExperimentInterrupted(
                "Slurm signalled a timeout or preemption and the task did not opt in to "
                "requeueing (seml_hydra.job.requeue.on_requeue), so it cannot resume: the experiment "
                "ends here. Raise hydra.launcher.timeout_min, or opt in."
            )
        done = requeue.requeues()
        if done >= self.max_requeues:
            raise ExperimentInterrupted(
                f"Slurm signalled a timeout or preemption again after {done} requeue(s); "
                f"hydra.launcher.max_requeues={self.max_requeues} reached, the experiment ends."
            )
        if hook is not None:  # None: signalled before the task started, nothing to save
            hook()
        _freeze_observer()
        # idempotent despite the $inc: once applied, the status filter no longer matches
        retrying(
            lambda: self._collection.update_one(
                {"_id": exp_id, "status": states.RUNNING},
                {"$set": {"status": states.RESCHEDULED}, "$inc": {"requeues": 1}},
            ),
            f"marking experiment {exp_id} RESCHEDULED",
        )
        log.warning("Experiment %s: state saved, requeueing the same array task", exp_id)
        return submitit.helpers.DelayedSubmission(self, exp_ids)

    def _run_one(self, db: Any, collection: Any, exp_id: int, execution: dict[str, Any]) -> str:
        """Claim experiment ``exp_id`` and run it, inside its code snapshot when it has one
        (``seml_hydra.store.snapshot.materialized``: once per node, removed afterwards)."""
        from seml_hydra.store.snapshot import SourceSnapshotError, materialized

        doc, why = claim_after_earlier_run(
            collection,
            exp_id,
            execution,
            record_execution=_rank_from_env(os.environ) == "0",
        )
        if doc is None:
            log.warning("Not running experiment %s of %s: %s", exp_id, self.collection, why)
            return f"SKIPPED: {why}"
        source_files = (doc.get("seml") or {}).get("source_files")
        if not source_files:
            return self._run_claimed(db, collection, doc)
        job_key = f"{execution['cluster']}_{execution['array_id']}_{execution['task_id']}"
        try:
            snapshot = materialized(db, source_files, job_key)
            directory = snapshot.__enter__()
        except SourceSnapshotError:
            where = _rank_from_env(os.environ)
            log.exception("Experiment %s could not start on rank %s", exp_id, where)
            _record_rank_failure(collection, exp_id, where, traceback.format_exc())
            _fail_if_a_rank_failed(collection, exp_id)
            return states.FAILED
        log.info("Running experiment %s from its code snapshot in %s", exp_id, directory)
        try:
            return self._run_claimed(db, collection, doc)
        finally:
            snapshot.__exit__(None, None, None)

    def _run_claimed(self, db: Any, collection: Any, doc: dict[str, Any]) -> str:
        """Plan this rank, set it up and run the claimed experiment ``doc``; returns its outcome
        on this rank."""
        from seml_hydra.core.documents import apply_diff, storable_result
        from seml_hydra.core.hydra_node import job_config
        from seml_hydra.job import rank, requeue

        exp_id = doc["_id"]
        fence = _fence(doc)
        plan = None
        try:
            plan = rank.plan_rank(
                os.environ,
                doc,
                primary_log_level=self.primary_log_level,
                other_log_level=self.other_log_level,
            )
            rank.set_current_plan(plan)
            requeue._begin(int(doc.get("requeues") or 0))
            self._current = exp_id
            if plan.seed is not None:
                rank.apply_seed(plan.seed)
            payload, base = retrying(
                lambda: load_payload(db, self.payload_id), "loading the batch payload"
            )
            node = adapt_hydra_node(apply_diff(base, doc["hydra"].get("node_diff", [])), plan)
            typed = payload.typed_hydra_base
            cfg = job_config(
                doc["config"],
                node,
                plan.job_id,
                typed_base=pickle.loads(typed) if typed else None,
                base_node=base,
            )
        except Exception:
            # Claimed but cannot start (malformed rank variables, a payload gone, a library
            # that fails to import while seeding...): FAILED with this rank's trace, never left
            # RUNNING for the waiter to call KILLED.
            where = plan.global_rank if plan is not None else _rank_from_env(os.environ)
            log.exception("Experiment %s could not start on rank %s", exp_id, where)
            _record_rank_failure(collection, exp_id, where, traceback.format_exc())
            _fail_if_a_rank_failed(collection, exp_id)
            rank.set_current_plan(None)
            return states.FAILED

        holder: dict[str, Any] = {}

        def main() -> Any:
            requeue._enter_task()
            ret = _run_hydra_job(payload, cfg)
            holder["ret"] = ret
            if ret.status.name == "FAILED":
                raise ret._return_value
            value, problems = storable_result(ret._return_value)
            value = _bounded(value, problems)
            if problems:
                log.warning(
                    "Experiment %s: (part of) the result cannot be stored in MongoDB and is "
                    "stored as its repr: %s",
                    exp_id,
                    "; ".join(problems),
                )
            return value

        try:
            if plan.attach_observers:
                extra = (node.get("launcher") or {}).get("observers") or []
                _run_observed(db, self.collection, doc, main, extra, fence=fence)
            else:
                main()
            outcome = states.COMPLETED
        except Exception:
            outcome = states.FAILED
            log.exception("Experiment %s failed on rank %d", exp_id, plan.global_rank)
            if plan.is_primary:  # Sacred records the task's failure; this covers Sacred's own
                trace = _trace_lines()
                retrying(
                    lambda: collection.update_one(
                        {
                            "_id": exp_id,
                            "status": states.RUNNING,
                            "fail_trace": {"$exists": False},
                            **fence,
                        },
                        {"$set": {"status": states.FAILED, "fail_trace": trace}},
                    ),
                    f"recording the failure of experiment {exp_id}",
                )
            else:
                _record_rank_failure(collection, exp_id, plan.global_rank, traceback.format_exc())
        finally:
            rank.set_current_plan(None)
        # A failure on any rank fails the experiment. Sacred's observer (primary) writes its own
        # status, so: the primary re-checks the other ranks' failures after its last save, and a
        # failing rank that reports after that finds COMPLETED and turns it to FAILED itself.
        if plan.world_size > 1 and (plan.is_primary or outcome == states.FAILED):
            _fail_if_a_rank_failed(collection, exp_id)
        ret = holder.get("ret")
        if ret is not None and plan.is_primary:
            fields = {
                "hydra.working_dir": ret.working_dir,
                "hydra.task_name": ret.task_name,
                "hydra.job_id": plan.job_id,
            }
            retrying(
                lambda: collection.update_one({"_id": exp_id, **fence}, {"$set": fields}),
                f"recording the working directory of experiment {exp_id}",
            )
        return outcome


#: ``captured_out`` keeps at most this many characters, the last ones: a MongoDB document holds
#: at most 16 MB, and Sacred's final save of a bigger run fails (the run would end KILLED)
MAX_CAPTURED_CHARS = 1_000_000


def bounded_output(text: str) -> str:
    """Sacred's ``captured_out_filter``: ``text`` or, above :data:`MAX_CAPTURED_CHARS`, a line
    saying how much was dropped followed by the last ``MAX_CAPTURED_CHARS`` characters (the job's
    output file keeps everything)."""
    if len(text) <= MAX_CAPTURED_CHARS:
        return text
    marker = (
        "[seml-hydra: earlier output dropped from captured_out; the job's output file has it]\n"
    )
    if text.startswith(marker):
        text = text[len(marker) :]
    return marker + text[-MAX_CAPTURED_CHARS:]


#: a result larger than this (bytes of BSON) is stored as a truncated repr: a MongoDB document
#: holds at most 16 MB, and the result shares it with the captured output and the config
MAX_RESULT_BYTES = 4 * 1024 * 1024


def _bounded(value: Any, problems: list[str]) -> Any:
    """``value``, or a truncated repr of it when its BSON is above :data:`MAX_RESULT_BYTES`
    (then a line is added to ``problems``)."""
    import bson

    size = len(bson.encode({"result": value}))
    if size <= MAX_RESULT_BYTES:
        return value
    problems.append(f"result: {size} bytes, above the {MAX_RESULT_BYTES} bytes kept")
    return repr(value)[:1000] + f"... <{size} bytes, truncated>"


def _fence(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Filter that keeps this run's writes to the claimed ``doc`` from undoing a later run's
    (pure): once a requeued run of the same array task has taken the experiment over
    (:func:`claim_filter`, larger ``execution.restart``), an earlier run that lives on writes
    nothing any more."""
    restart = int((doc.get("execution") or {}).get("restart") or 0)
    return {"execution.restart": {"$not": {"$gt": restart}}}


def _rank_from_env(env: Mapping[str, str]) -> str:
    """This process' global rank as the environment tells it (for messages only)."""
    return env.get("SLURM_PROCID") or env.get("SUBMITIT_LOCAL_GLOBALID") or "0"


def _record_rank_failure(collection: Any, exp_id: int, global_rank: Any, trace: str) -> None:
    """Append this rank's failure to ``rank_failures`` (a field Sacred's observer never holds).

    The ``$push`` is made idempotent for :func:`~seml_hydra.store.retry.retrying`: the failure
    carries a random ``id`` and the filter requires it absent, so a retry of a push that reached
    the server before the connection dropped adds nothing."""
    import uuid

    failure = {
        "rank": global_rank,
        "host": socket.gethostname(),
        "trace": trace,
        "id": uuid.uuid4().hex,
    }
    retrying(
        lambda: collection.update_one(
            {"_id": exp_id, "rank_failures.id": {"$ne": failure["id"]}},
            {"$push": {"rank_failures": failure}},
        ),
        f"recording the failure of rank {global_rank} of experiment {exp_id}",
    )


def _trace_lines() -> list[str]:
    """The current exception's traceback as lines (Sacred's ``fail_trace`` format)."""
    return traceback.format_exc().splitlines(True)


def _fail_if_a_rank_failed(collection: Any, exp_id: int) -> None:
    """Mark the experiment FAILED when ranks recorded failures (``rank_failures``); its
    ``fail_trace`` gets, once per failing rank, a header naming the rank followed by its trace.

    ``rank_failures`` only grows (``$push``), so reading it is safe; ``fail_trace`` is extended
    by one atomic pipeline update that appends a rank's lines only when its header is not in
    the stored trace yet, so ranks doing this at the same time (or Sacred's final save of the
    primary in between) never drop each other's headers. Retried as a whole while MongoDB is
    unreachable (a read, then an update that appends nothing twice).
    """
    retrying(
        lambda: _fail_if_a_rank_failed_once(collection, exp_id),
        f"checking the other ranks of experiment {exp_id}",
    )


def _fail_if_a_rank_failed_once(collection: Any, exp_id: int) -> None:
    doc = collection.find_one({"_id": exp_id}, {"rank_failures": 1})
    entries = [
        [rank_failure_header(failure), *str(failure.get("trace", "")).splitlines(True)]
        for failure in (doc or {}).get("rank_failures") or []
    ]
    if not entries:
        return
    collection.update_one(
        {"_id": exp_id, "status": {"$in": [states.RUNNING, states.COMPLETED, states.FAILED]}},
        [{"$set": {"status": states.FAILED, "fail_trace": appended_once(entries)}}],
    )


def rank_failure_header(failure: Mapping[str, Any]) -> str:
    """The ``fail_trace`` line that starts failure ``{"rank", "host", ...}``'s trace (pure)."""
    return f"--- rank {failure.get('rank')} on {failure.get('host')} failed:\n"


def appended_once(entries: Sequence[Sequence[str]], field: str = "fail_trace") -> dict[str, Any]:
    """Aggregation expression (pure): the list ``field`` (missing = ``[]``) with each entry's
    lines appended unless the entry's first line (its header) is already in it. The lines go
    in as ``$literal``, so a line starting with ``$`` stays text."""
    return {
        "$reduce": {
            "input": {"$literal": [list(entry) for entry in entries]},
            "initialValue": {"$ifNull": [f"${field}", []]},
            "in": {
                "$cond": [
                    {"$in": [{"$arrayElemAt": ["$$this", 0]}, "$$value"]},
                    "$$value",
                    {"$concatArrays": ["$$value", "$$this"]},
                ]
            },
        }
    }


def _claim_refusal(current: Mapping[str, Any], execution: Mapping[str, Any]) -> str:
    """Why :func:`claim_filter` did not match ``current`` (pure; a one-line reason)."""
    status = current.get("status")
    if status == states.PENDING:
        slurm = current.get("slurm")
        arrays = sorted(
            {str(e["array_id"]) for e in slurm if isinstance(e, Mapping) and "array_id" in e}
            if isinstance(slurm, list)
            else set()
        )
        return (
            f"it is PENDING for job {', '.join(arrays) or '?'}, not for this job "
            f"{execution['array_id']}"
        )
    if status not in (states.RUNNING, states.RESCHEDULED):
        return f"it is {status}, not PENDING"
    ex = current.get("execution") or {}
    if all(ex.get(k) == execution[k] for k in ("cluster", "array_id", "task_id")):
        stored, mine = int(ex.get("restart") or 0), int(execution.get("restart") or 0)
        if _earlier_run(current, execution):
            sign = current.get("heartbeat") or current.get("start_time") or ex.get("claim_time")
            return (
                f"still runs in an earlier run of this array task (Slurm restart {stored}, this "
                f"run is restart {mine}; its last sign of life: "
                f"{f'{sign} UTC' if sign else 'none recorded'})"
            )
        return f"it is {status} in a later run of this array task (restart {stored} > {mine})"
    return (
        f"it is {status} in job {ex.get('array_id')}_{ex.get('task_id')} "
        f"on {ex.get('cluster')}, not this job"
    )


def _output_files() -> dict[str, str]:
    """submitit's stdout/stderr paths of this job, when running under submitit."""
    try:
        import submitit

        paths = submitit.JobEnvironment().paths
        return {"slurm_output_file": str(paths.stdout), "slurm_error_file": str(paths.stderr)}
    except Exception:  # not a submitit job (a test calling the runner directly)
        return {}


def restore_singletons(state: Mapping[str, Any]) -> None:
    """Hydra's ``Singleton.set_state(state)`` without its eager plugin scan.

    hydra-core 1.3 (``core/singleton.py``) restores the instances (ConfigStore, JobRuntime...)
    and OmegaConf resolvers, then calls ``Plugins.instance()``, which imports every
    ``hydra_plugins`` module (~20-35 ms in a job). ``run_job`` needs no plugin, and
    ``Plugins.instance()`` creates the singleton on first use anyway, so the scan is left to
    whatever needs it. A state of another shape goes to Hydra's ``set_state`` unchanged.
    """
    import copy

    from hydra.core.singleton import Singleton
    from omegaconf.basecontainer import BaseContainer

    if set(state) != {"instances", "omegaconf_resolvers"}:
        Singleton.set_state(state)
        return
    Singleton._instances = state["instances"]
    BaseContainer._resolvers = copy.deepcopy(state["omegaconf_resolvers"])


def _run_hydra_job(payload: Payload, cfg: Any) -> Any:
    """Hydra's ``run_job`` with the launching process' singletons (ConfigStore, JobRuntime)."""
    from hydra.core.utils import run_job, setup_globals

    restore_singletons(payload.singleton_state)
    setup_globals()
    return run_job(
        hydra_context=payload.hydra_context,
        task_function=payload.task_function,
        config=cfg,
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )


def _run_observed(
    db: Any,
    collection_name: str,
    doc: Mapping[str, Any],
    task: Any,
    extra_observers: Sequence[Mapping[str, Any]] = (),
    *,
    fence: Mapping[str, Any] | None = None,
) -> Any:
    """Run ``task`` as a Sacred run whose ``MongoObserver`` overwrites document ``doc['_id']``.

    ``fence``: a filter every save of the observer must also match (:func:`_fence`), else the
    save writes nothing.

    Sacred 0.8.7 (``observers/mongo.py``) loads the whole document when asked to overwrite and
    writes it back with ``$set`` on every heartbeat, which would undo fields other processes
    change meanwhile (``slurm``, a CLI's INTERRUPTED). So the observer's entry starts from
    ``{"_id": ...}`` alone and only ever holds the fields Sacred owns. Metrics go to the
    collection's own metrics collection (``collections.metrics_collection_name``), and the result
    is written as the task returned it (already plain: ``documents.storable_result``), not
    through Sacred's jsonpickle ``flatten``.
    """
    import warnings

    from hydra.utils import instantiate

    from seml_hydra.job import metrics
    from seml_hydra.job.sacred_compat import experiment
    from seml_hydra.store.collections import metrics_collection_name

    # the app's own sources are snapshotted by seml-hydra and its git state is in the
    # document's ``git`` block: the Experiment discovers neither
    ex = experiment(doc.get("seml", {}).get("name", collection_name))
    from sacred import SETTINGS
    from sacred.observers import MongoObserver

    SETTINGS.CAPTURE_MODE = "sys"
    SETTINGS.CONFIG.READ_ONLY_CONFIG = False
    quiet = logging.getLogger("seml_hydra.sacred")
    quiet.setLevel(logging.WARNING)
    ex.logger = quiet
    ex.captured_out_filter = bounded_output
    ex.add_config({**doc["config"], "seed": doc.get("seed", 0)})
    ex.main(task)
    ex.pre_run_hook(lambda _run: metrics.bind_run(_run))  # seml_hydra.job.metrics.log_scalar

    class DocumentObserver(MongoObserver):
        """Never writes ``config``: the document keeps the config staged for it (Sacred would
        store its own copy with an added ``seed`` key). Never creates the document either:
        Sacred's ``final_save`` upserts, which would bring back, as a fragment, an experiment
        deleted while it ran (``seml delete --no-cancel``).

        Rides out an unreachable MongoDB: a heartbeat that cannot be saved logs one line and
        the next one saves again (the entry holds everything); metrics that could not be sent
        go with the next heartbeat; the final save (result, captured output, status) is retried
        through ``seml_hydra.store.retry.retrying`` (Sacred 0.8.7 gives up after a few attempts
        and leaves the run in a pickle on the node). One lock orders the heartbeat thread's
        saves and the final save, and no heartbeat writes after the final save."""

        _lock = threading.RLock()
        _finished = False
        _unsent: dict[str, dict[str, list[Any]]] | None = None

        def _entry(self) -> dict[str, Any]:
            # a copy: swapping ``run_entry`` itself would lose what the main thread writes into
            # it meanwhile (Sacred's completed_event sets status and result while a heartbeat
            # save waits for the server)
            return {k: v for k, v in self.run_entry.items() if k != "config"}

        def _filter(self, entry: Mapping[str, Any]) -> dict[str, Any]:
            # the fence: an earlier run that a requeued task took over writes nothing
            return {"_id": entry["_id"], **(fence or {})}

        @contextlib.contextmanager
        def _without_config(self) -> Iterator[None]:
            entry, runs = self.run_entry, self.runs
            self.run_entry = self._entry()
            self.runs = _WithoutUpsert(runs, fence or {})
            try:
                yield
            finally:
                self.run_entry, self.runs = entry, runs

        def save(self) -> None:
            with self._lock:
                if self.frozen or self._finished:
                    return
                _untee_log_handlers()
                entry = self._entry()
                try:
                    self.runs.update_one(self._filter(entry), {"$set": entry})
                except Exception as error:
                    if not is_connection_error(error):
                        raise  # Sacred's run logs it and stops calling this observer
                    log.warning(
                        "Experiment %s: heartbeat not saved, MongoDB unreachable (%s); "
                        "the next one tries again",
                        entry["_id"],
                        short_reason(error),
                    )

        def final_save(self, attempts: int) -> None:
            with self._lock:
                if self.frozen or self._finished:
                    return
                self._finished = True
                _untee_log_handlers()
                entry = self._entry()
                try:
                    retrying(
                        lambda: self.runs.update_one(self._filter(entry), {"$set": entry}),
                        f"saving the outcome of experiment {entry['_id']} ({entry['status']})",
                    )
                except Exception:  # Sacred's own path: unencodable entries, the pickle
                    with self._without_config():
                        super().final_save(attempts)

        # The task's value is already plain (``documents.storable_result``): Sacred's
        # ``flatten`` (jsonpickle) would store a datetime, bytes or a tuple as a
        # ``{"py/...": ...}`` dict instead of the BSON date, binary or array MongoDB can query.
        def heartbeat_event(
            self, info: Any, captured_out: Any, beat_time: Any, result: Any
        ) -> None:
            super().heartbeat_event(info, captured_out, beat_time, None)  # stored at completion

        def completed_event(self, stop_time: Any, result: Any) -> None:
            self.run_entry["stop_time"] = stop_time
            self.run_entry["result"] = result
            self.run_entry["status"] = "COMPLETED"
            self.final_save(attempts=10)

        def log_metrics(self, metrics_by_name: dict[str, Any], info: dict[str, Any]) -> None:
            from pymongo.errors import ServerSelectionTimeoutError

            with self._lock:
                metrics_by_name = _merge_metrics(self._unsent, metrics_by_name)
                self._unsent = None
                try:
                    super().log_metrics(metrics_by_name, info)
                except Exception as error:
                    if not is_connection_error(error):
                        raise
                    # nothing was sent when no server could be selected: send it again with
                    # the next heartbeat; otherwise part of it may be stored (a $push), and
                    # sending it again could duplicate values
                    resend = isinstance(error, ServerSelectionTimeoutError)
                    self._unsent = metrics_by_name if resend else None
                    log.warning(
                        "Experiment %s: metrics not saved, MongoDB unreachable (%s); %s",
                        doc["_id"],
                        short_reason(error),
                        "the next heartbeat sends them" if resend else "these values are lost",
                    )

    def make_observer() -> DocumentObserver:  # reads the document (Sacred's overwrite)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return DocumentObserver(
                client=db.client, db_name=db.name, collection=collection_name, overwrite=doc["_id"]
            )

    observer = retrying(make_observer, f"starting the Sacred run of experiment {doc['_id']}")
    observer.overwrite = {"_id": doc["_id"]}
    observer.frozen = False
    # the collection's own metrics collection: Sacred's default, the one shared ``metrics``
    # keyed by ``run_id`` alone, mixes the runs of collections whose ids all start at 1
    observer.metrics = db[metrics_collection_name(collection_name)]
    ex.observers.append(observer)
    _ACTIVE_OBSERVERS.append(observer)
    for node in extra_observers:
        ex.observers.append(instantiate(node))
    try:
        return ex.run().result
    finally:
        _ACTIVE_OBSERVERS.remove(observer)


def _untee_log_handlers() -> None:
    """Point the root logger's stream handlers back at the real stream once Sacred's output
    capture is over. Hydra configures logging inside the captured run, so its console handler
    writes to Sacred's tee, whose buffer is closed after the run: every later log line (the
    final save's retries, the next experiment's claim) would end in a "Logging error"."""
    for handler in logging.getLogger().handlers:
        stream = getattr(handler, "stream", None)
        out = getattr(stream, "_self_out", None)
        if out is not None and getattr(out, "closed", False):
            handler.setStream(stream.__wrapped__)


def _merge_metrics(
    earlier: Mapping[str, Mapping[str, list[Any]]] | None, later: Mapping[str, Any]
) -> dict[str, Any]:
    """Sacred's ``linearize_metrics`` output ``{name: {"steps", "values", "timestamps"}}`` of
    ``earlier`` followed by ``later``, per name (pure)."""
    merged = {name: {k: list(v) for k, v in m.items()} for name, m in (earlier or {}).items()}
    for name, m in later.items():
        if name not in merged:
            merged[name] = {k: list(v) for k, v in m.items()}
            continue
        for key in ("steps", "values", "timestamps"):
            merged[name][key] = merged[name].get(key, []) + list(m.get(key, []))
    return merged


class _WithoutUpsert:
    """A pymongo collection whose ``update_one`` never inserts (``upsert`` is dropped) and only
    updates a document that also matches ``fence``."""

    def __init__(self, collection: Any, fence: Mapping[str, Any]) -> None:
        self._collection = collection
        self._fence = dict(fence)

    def update_one(self, filter: Any, update: Any, upsert: bool = False, **kwargs: Any) -> Any:
        return self._collection.update_one({**filter, **self._fence}, update, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._collection, name)


#: the document observers of runs in progress in this process (``_freeze_observer``)
_ACTIVE_OBSERVERS: list[Any] = []


def _freeze_observer() -> None:
    """Stop the running experiment's observer from writing: the job is being requeued, and
    Sacred would otherwise record the exit as FAILED over RESCHEDULED."""
    for observer in _ACTIVE_OBSERVERS:
        observer.frozen = True
