"""The run step: the callable submitit pickles and every rank of every job executes.

Per experiment: claim it atomically -> plan this rank (``seml_hydra.rank``) -> run the Hydra task
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
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import states

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


class ExperimentsFailed(RuntimeError):
    """Raised at the end of a job whose experiments failed on this rank: makes the job exit
    non-zero. The traces are in the documents (``fail_trace``)."""


def execution_identity(env: Mapping[str, str]) -> dict[str, Any]:
    """This job's ``execution.{cluster, array_id, task_id}`` (SEML 0.5's ``ExecutionDoc``).

    Slurm: ``SLURM_CLUSTER_NAME``, ``SLURM_ARRAY_JOB_ID`` (or ``SLURM_JOB_ID`` for a job that is
    not an array) and ``SLURM_ARRAY_TASK_ID`` (or 0); without ``SLURM_CLUSTER_NAME`` the cluster
    is ``"slurm"``, which ``seml_hydra.manage`` takes for this cluster (``UNNAMED_CLUSTERS``,
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


def claim_filter(exp_id: int, execution: Mapping[str, Any]) -> dict[str, Any]:
    """MongoDB filter of the claim rule (SEML's multi-task change): the experiment may run when it
    is PENDING, or RUNNING/RESCHEDULED with this very ``execution.{cluster, array_id, task_id}``
    (another rank of this job, or this array task requeued). Anything else - COMPLETED, FAILED,
    another job's RUNNING experiment - does not match, so it is never run twice."""
    same_job = {f"execution.{key}": execution[key] for key in ("cluster", "array_id", "task_id")}
    return {
        "_id": exp_id,
        "$or": [
            {"status": states.PENDING},
            {"status": {"$in": [states.RUNNING, states.RESCHEDULED]}, **same_job},
        ],
    }


def claim(
    collection: Any,
    exp_id: int,
    execution: Mapping[str, Any],
    *,
    record_execution: bool = True,
) -> tuple[dict[str, Any] | None, str | None]:
    """Claim experiment ``exp_id`` for this rank with one atomic ``find_one_and_update``.

    Returns ``(document after the claim, None)`` when :func:`claim_filter` matches (the document
    is then RUNNING with this job's identity), else ``(None, why)`` and nothing was written.
    ``record_execution`` (the primary rank): ``execution`` - identity plus this rank's output
    file paths - replaces the stored one; the other ranks only set the identity keys, so the
    document names the primary's output files whatever order the ranks claim in.
    """
    from pymongo import ReturnDocument

    if record_execution:
        update = {"status": states.RUNNING, "execution": dict(execution)}
    else:
        update = {"status": states.RUNNING}
        update.update({f"execution.{k}": execution[k] for k in ("cluster", "array_id", "task_id")})
    doc = collection.find_one_and_update(
        claim_filter(exp_id, execution), {"$set": update}, return_document=ReturnDocument.AFTER
    )
    if doc is not None:
        return doc, None
    current = collection.find_one({"_id": exp_id}, {"status": 1, "execution": 1})
    return None, "it no longer exists" if current is None else _claim_refusal(current)


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
        db_cfg: the database inputs (``seml_hydra.database.resolve_db_settings``), resolved again
            on the node the way the launcher did; no password is pickled unless the user put it
            in the URL.
        collection: the collection name.
        payload_id: GridFS file id of the batch's :class:`Payload`.
        primary_log_level, other_log_level: log levels (names) of the primary and other ranks.
        max_requeues: how often an experiment may be requeued on timeout/preemption
            (``seml_hydra.requeue``) before it ends FAILED.
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
        Raises :class:`ExperimentsFailed` after the last one when any failed on this rank.
        """
        from .database import connect, resolve_db_settings, skip_exit_join

        db = connect(resolve_db_settings(self.db_cfg, start_embedded=False))
        collection = db[self.collection]
        self._collection = collection  # for checkpoint(), which submitit calls on this object
        execution = execution_identity(os.environ)
        execution.update(_output_files())
        try:
            outcomes = [self._run_one(db, collection, exp_id, execution) for exp_id in exp_ids]
        finally:
            skip_exit_join()  # every write of this task is done
        failed = [str(i) for i, o in zip(exp_ids, outcomes) if o == states.FAILED]
        if failed:
            raise ExperimentsFailed(
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
        array task when the running experiment opted in (``seml_hydra.requeue.on_requeue``).

        Saves the task's state through its hook, marks the experiment RESCHEDULED, stops
        Sacred's observer from writing again, and returns the resubmission (submitit then runs
        ``scontrol requeue <array>_<task>``). Raises :class:`ExperimentInterrupted` (which ends
        the task, recorded as FAILED with this reason) when the task did not opt in or the
        experiment was requeued ``max_requeues`` times already.
        """
        import submitit

        from . import requeue

        exp_id = getattr(self, "_current", None)
        if exp_id is None:  # between experiments: nothing to save, requeue the rest
            return submitit.helpers.DelayedSubmission(self, exp_ids)
        hook = requeue._current_hook()
        if hook is None and requeue._task_has_started():
            raise ExperimentInterrupted(
                "Slurm signalled a timeout or preemption and the task did not opt in to "
                "requeueing (seml_hydra.requeue.on_requeue), so it cannot resume: the experiment "
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
        self._collection.update_one(
            {"_id": exp_id, "status": states.RUNNING},
            {"$set": {"status": states.RESCHEDULED}, "$inc": {"requeues": 1}},
        )
        log.warning("Experiment %s: state saved, requeueing the same array task", exp_id)
        return submitit.helpers.DelayedSubmission(self, exp_ids)

    def _run_one(self, db: Any, collection: Any, exp_id: int, execution: dict[str, Any]) -> str:
        """Claim experiment ``exp_id`` and run it, inside its code snapshot when it has one
        (``seml_hydra.sources.materialized``: once per node, removed afterwards)."""
        from . import sources

        doc, why = claim(
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
            snapshot = sources.materialized(db, source_files, job_key)
            directory = snapshot.__enter__()
        except sources.SourceSnapshotError:
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
        from . import rank, requeue
        from .compose import job_config
        from .documents import apply_diff, storable_result

        exp_id = doc["_id"]
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
            payload, base = load_payload(db, self.payload_id)
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
                _run_observed(db, self.collection, doc, main, extra)
            else:
                main()
            outcome = states.COMPLETED
        except Exception:
            outcome = states.FAILED
            log.exception("Experiment %s failed on rank %d", exp_id, plan.global_rank)
            if plan.is_primary:  # Sacred records the task's failure; this covers Sacred's own
                collection.update_one(
                    {"_id": exp_id, "status": states.RUNNING, "fail_trace": {"$exists": False}},
                    {"$set": {"status": states.FAILED, "fail_trace": _trace_lines()}},
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
            collection.update_one(
                {"_id": exp_id},
                {
                    "$set": {
                        "hydra.working_dir": ret.working_dir,
                        "hydra.task_name": ret.task_name,
                        "hydra.job_id": plan.job_id,
                    }
                },
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


def _rank_from_env(env: Mapping[str, str]) -> str:
    """This process' global rank as the environment tells it (for messages only)."""
    return env.get("SLURM_PROCID") or env.get("SUBMITIT_LOCAL_GLOBALID") or "0"


def _record_rank_failure(collection: Any, exp_id: int, global_rank: Any, trace: str) -> None:
    """Append this rank's failure to ``rank_failures`` (a field Sacred's observer never holds)."""
    failure = {"rank": global_rank, "host": socket.gethostname(), "trace": trace}
    collection.update_one({"_id": exp_id}, {"$push": {"rank_failures": failure}})


def _trace_lines() -> list[str]:
    """The current exception's traceback as lines (Sacred's ``fail_trace`` format)."""
    return traceback.format_exc().splitlines(True)


def _fail_if_a_rank_failed(collection: Any, exp_id: int) -> None:
    """Mark the experiment FAILED when other ranks recorded failures and it is not FAILED yet;
    its ``fail_trace`` names the failing ranks and holds their traces."""
    doc = collection.find_one({"_id": exp_id}, {"rank_failures": 1, "status": 1, "fail_trace": 1})
    failures = (doc or {}).get("rank_failures") or []
    if not failures:
        return
    trace = list(doc.get("fail_trace") or [])
    for failure in failures:
        header = f"--- rank {failure['rank']} on {failure.get('host')} failed:\n"
        if header not in trace:
            trace.append(header)
            trace.extend(failure["trace"].splitlines(True))
    collection.update_one(
        {"_id": exp_id, "status": {"$in": [states.RUNNING, states.COMPLETED, states.FAILED]}},
        {"$set": {"status": states.FAILED, "fail_trace": trace}},
    )


def _claim_refusal(current: Mapping[str, Any]) -> str:
    status = current.get("status")
    if status in (states.RUNNING, states.RESCHEDULED):
        ex = current.get("execution", {})
        return (
            f"it is {status} in job {ex.get('array_id')}_{ex.get('task_id')} "
            f"on {ex.get('cluster')}, not this job"
        )
    return f"it is {status}, not PENDING"


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
) -> Any:
    """Run ``task`` as a Sacred run whose ``MongoObserver`` overwrites document ``doc['_id']``.

    Sacred 0.8.7 (``observers/mongo.py``) loads the whole document when asked to overwrite and
    writes it back with ``$set`` on every heartbeat, which would undo fields other processes
    change meanwhile (``slurm``, a CLI's INTERRUPTED). So the observer's entry starts from
    ``{"_id": ...}`` alone and only ever holds the fields Sacred owns.
    """
    import warnings

    from hydra.utils import instantiate

    from . import metrics
    from .sacred_compat import experiment

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
    ex.pre_run_hook(lambda _run: metrics.bind_run(_run))  # seml_hydra.metrics.log_scalar

    class DocumentObserver(MongoObserver):
        """Never writes ``config``: the document keeps the config staged for it (Sacred would
        store its own copy with an added ``seed`` key). Never creates the document either:
        Sacred's ``final_save`` upserts, which would bring back, as a fragment, an experiment
        deleted while it ran (``seml delete --no-cancel``)."""

        @contextlib.contextmanager
        def _without_config(self) -> Iterator[None]:
            entry, runs = self.run_entry, self.runs
            self.run_entry = {k: v for k, v in entry.items() if k != "config"}
            self.runs = _WithoutUpsert(runs)
            try:
                yield
            finally:
                self.run_entry, self.runs = entry, runs

        def save(self) -> None:
            if not self.frozen:
                with self._without_config():
                    super().save()

        def final_save(self, attempts: int) -> None:
            if not self.frozen:
                with self._without_config():
                    super().final_save(attempts)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        observer = DocumentObserver(
            client=db.client, db_name=db.name, collection=collection_name, overwrite=doc["_id"]
        )
    observer.overwrite = {"_id": doc["_id"]}
    observer.frozen = False
    ex.observers.append(observer)
    _ACTIVE_OBSERVERS.append(observer)
    for node in extra_observers:
        ex.observers.append(instantiate(node))
    try:
        return ex.run().result
    finally:
        _ACTIVE_OBSERVERS.remove(observer)


class _WithoutUpsert:
    """A pymongo collection whose ``update_one`` never inserts (``upsert`` is dropped)."""

    def __init__(self, collection: Any) -> None:
        self._collection = collection

    def update_one(self, filter: Any, update: Any, upsert: bool = False, **kwargs: Any) -> Any:
        return self._collection.update_one(filter, update, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._collection, name)


#: the document observers of runs in progress in this process (``_freeze_observer``)
_ACTIVE_OBSERVERS: list[Any] = []


def _freeze_observer() -> None:
    """Stop the running experiment's observer from writing: the job is being requeued, and
    Sacred would otherwise record the exit as FAILED over RESCHEDULED."""
    for observer in _ACTIVE_OBSERVERS:
        observer.frozen = True
