"""The run step: the callable submitit pickles and every rank of every job executes.

Per experiment: claim it atomically (``seml_hydra.job.claim``, with this job's identity from
``seml_hydra.job.slurm_env``) -> plan this rank (``seml_hydra.job.rank``) -> run the Hydra task
through ``hydra.core.utils.run_job`` with the stored, already resolved config and the batch
payload (``seml_hydra.store.payload``) -> record. The primary rank runs under Sacred's
``MongoObserver`` overwriting the experiment's own document (``seml_hydra.job.observed``); a
failing rank records its failure (``seml_hydra.job.failures``).

A job whose task failed raises at the end, so submitit exits non-zero and Slurm (``sacct``) shows
FAILED too.
"""

from __future__ import annotations

import logging
import os
import pickle
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from seml_hydra.core import states
from seml_hydra.core.documents import point_hydra_node, storable_result, task_config
from seml_hydra.core.hydra_node import JOB_ID_TOKEN, job_config, with_job_id
from seml_hydra.core.paths import UnsafePathError, job_dir_problem
from seml_hydra.core.schema import experiment_collection
from seml_hydra.core.shell import seml_for
from seml_hydra.job import kept, pruning, rank, requeue, stats
from seml_hydra.job.claim import claim_after_earlier_run, fence
from seml_hydra.job.collector import StartUpCollector
from seml_hydra.job.devices import local_gpu_environment
from seml_hydra.job.failfast import FIELD as FAIL_FAST
from seml_hydra.job.failfast import enforce as enforce_fail_fast
from seml_hydra.job.failfast import unmark_completed
from seml_hydra.job.failures import (
    await_other_ranks,
    fail_if_a_rank_failed,
    record_rank_end,
    record_rank_failure,
    trace_lines,
)
from seml_hydra.job.main_module import load_script, script_as_main, script_dir, script_path
from seml_hydra.job.observed import bounded_result, freeze_observers, run_observed
from seml_hydra.job.slurm_env import execution_identity, placement, rank_label, restart_count
from seml_hydra.store.db.client import connect, skip_exit_join
from seml_hydra.store.db.retry import retrying
from seml_hydra.store.db.settings import resolve_db_settings

# ``Payload`` is also what ``seml_hydra.run.Payload`` (this module's name before the sub-package
# layout, a deprecated name of it: seml_hydra._compat) unpickles to in payloads stored before then
from seml_hydra.store.payload import Payload, load_payload
from seml_hydra.store.snapshot.node import (
    SourceSnapshotError,
    imported_files,
    load_snapshot,
    materialized,
    snapshot_key,
)
from seml_hydra.store.snapshot.sources import imported_module_files

if TYPE_CHECKING:
    from seml_hydra.core.schema import Database, ExperimentCollection, ExperimentDoc

log = logging.getLogger(__name__)


class ExperimentInterrupted(RuntimeError):
    """Raised into the task when Slurm signalled a timeout or preemption that cannot be turned
    into a requeue; the experiment is recorded FAILED with this message."""


class RankExperimentsFailed(RuntimeError):
    """Raised at the end of a job whose experiments failed on this rank: makes the job exit
    non-zero. The traces are in the documents (``fail_trace``)."""


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


@dataclass
class JobRunner:
    """The picklable callable each array task runs: ``JobRunner(...)(exp_ids)``.

    Attributes:
        db_cfg: the database inputs (``seml_hydra.store.db.settings.resolve_db_settings``), resolved again
            on the node the way the launcher did; never holds a password (a URL's password
            reaches the job in its environment: ``seml_hydra.store.db.job_db.job_db_environment``).
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

        Python's cyclic garbage collector is off from here until the first task starts, when
        the start-up's objects are frozen (``seml_hydra.job.collector``).
        """
        collector = self._collector = StartUpCollector()
        collector.pause()
        try:
            return self._run_all(exp_ids)
        finally:
            collector.resume()  # a start-up that failed before any task

    def _run_all(self, exp_ids: list[int]) -> list[str]:
        """:meth:`__call__` once the collector is paused."""
        os.environ.update(local_gpu_environment(os.environ))  # seml_local: this rank's GPUs
        db = connect(resolve_db_settings(self.db_cfg, start_embedded=False), retry=True)
        collection = experiment_collection(db, self.collection)
        self._collection = collection  # for checkpoint(), which submitit calls on this object
        execution = execution_identity(os.environ)
        execution["restart"] = restart_count(os.environ)
        execution.update(_output_files())
        try:
            outcomes = [self._run_one(db, collection, exp_id, execution) for exp_id in exp_ids]
        finally:
            # what an outage longer than SEML_MONGODB_RETRY_S kept (seml_hydra.job.kept)
            if not kept.write_kept():
                kept.drop_kept()
            skip_exit_join()  # every write of this task is done
        failed = [str(i) for i, o in zip(exp_ids, outcomes) if o == states.FAILED]
        if failed:
            raise RankExperimentsFailed(
                f"experiment(s) {', '.join(failed)} of collection {self.collection!r} failed; "
                f"see `{seml_for(self.collection)} print-fail-trace -id {failed[0]}`"
            )
        return outcomes

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the settings only, not the runtime handles (``_collection``, ``_current``,
        ``_collector``): submitit pickles this object again to requeue it."""
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
        freeze_observers()
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

    def _run_one(
        self, db: Database, collection: ExperimentCollection, exp_id: int, execution: dict[str, Any]
    ) -> str:
        """Claim experiment ``exp_id`` and run it (:meth:`_run_claimed_doc`). When it FAILED and
        its launch set ``max_failures`` (``fail_fast``), this job counts the launch's failures
        and stops the launch's other experiments at the limit (``seml_hydra.job.failfast``);
        when it COMPLETED over a stop of its launch (the final save found the stop's mark, or
        could not tell), it drops the mark (``failfast.unmark_completed``)."""
        self._over_stop = False
        doc, why = self._claim(collection, exp_id, execution)
        kept.write_kept(budget_s=0)  # MongoDB answered: what an outage kept goes first
        if doc is None:
            log.warning("Not running experiment %s of %s: %s", exp_id, self.collection, why)
            return f"SKIPPED: {why}"
        outcome = self._run_claimed_doc(db, collection, doc, execution)
        if outcome == states.FAILED and doc.get(FAIL_FAST):
            # the failure is recorded: this job stops the launch at its max_failures
            own = (execution.get("array_id"), execution.get("task_id"))
            enforce_fail_fast(collection, doc[FAIL_FAST], own_task=own)
        elif outcome == states.COMPLETED and doc.get(FAIL_FAST) and self._over_stop:
            # it ran to the end although its launch was stopped meanwhile: not "stopped"
            unmark_completed(collection, [exp_id])
        return outcome

    def _run_claimed_doc(
        self,
        db: Database,
        collection: ExperimentCollection,
        doc: ExperimentDoc,
        execution: dict[str, Any],
    ) -> str:
        """Run the claimed ``doc``, inside its code snapshot when it has one
        (``seml_hydra.store.snapshot.node.materialized``: written once per node for the tasks
        running it, kept a while after the last one for the next tasks of the same code), with the snapshot's copy of the app's script
        as ``__main__`` when the snapshot holds it (``seml_hydra.job.main_module``); returns
        its outcome on this rank."""
        exp_id = doc["_id"]
        seml = doc.get("seml") or {}
        try:
            found = retrying(lambda: load_snapshot(db, seml), "reading the code snapshot's list")
        except SourceSnapshotError:  # its manifest is gone
            return self._snapshot_failed(collection, exp_id, execution)
        if found is None:  # launched with snapshot=false
            return self._run_claimed(db, collection, doc)
        script = script_path(seml, found.files)
        # the job key is shared by the batch's tasks: one directory per node for them all
        job_key = snapshot_key(execution["cluster"], found.files)
        try:
            snapshot = materialized(db, found.files, job_key, script_dir(script or ""), found.root)
            directory = snapshot.__enter__()
        except SourceSnapshotError:
            return self._snapshot_failed(collection, exp_id, execution)
        log.info("Running experiment %s from its code snapshot in %s", exp_id, directory)

        def sources() -> list[list[Any]]:  # when the Sacred run starts
            return imported_files(found.files, directory, imported_module_files())

        try:
            main = None
            if script is not None:
                main = load_script(directory, script, str(seml.get("executable") or script))
            return self._run_claimed(db, collection, doc, main, sources)
        finally:
            snapshot.__exit__(None, None, None)

    def _snapshot_failed(
        self, collection: ExperimentCollection, exp_id: int, execution: Mapping[str, Any]
    ) -> str:
        """Record that experiment ``exp_id`` could not start from its code snapshot (called in
        the ``except`` of a :class:`SourceSnapshotError`: its trace is this rank's failure);
        returns FAILED."""
        where = rank_label(os.environ)
        log.exception("Experiment %s could not start on rank %s", exp_id, where)
        restart = int(execution.get("restart") or 0)
        record_rank_failure(collection, exp_id, where, traceback.format_exc(), restart)
        fail_if_a_rank_failed(collection, exp_id, restart)
        return states.FAILED

    def _claim(
        self, collection: ExperimentCollection, exp_id: int, execution: dict[str, Any]
    ) -> tuple[ExperimentDoc | None, str | None]:
        """Claim ``exp_id`` for this rank (``seml_hydra.job.claim.claim_after_earlier_run``);
        ``(document, None)`` or ``(None, why)``. A local worker claims STAGED ones instead
        (``seml_hydra.job.worker``)."""
        return claim_after_earlier_run(
            collection,
            exp_id,
            execution,
            record_execution=rank_label(os.environ) == "0",
            world_size=_world_size(),
        )

    def _on_task_error(self) -> None:
        """Called inside the ``except`` of a failed task, before its failure is recorded
        (``seml start --debug --post-mortem`` opens pdb here); nothing in a job."""

    def _with_job_id(
        self,
        collection: ExperimentCollection,
        doc: ExperimentDoc,
        node: dict[str, Any],
        plan: Any,
        fenced: Any,
    ) -> dict[str, Any]:
        """The point's Hydra ``node`` with this job's id where ``${hydra.job.id}`` of its
        ``hydra.sweep.subdir`` was left at staging (``core.hydra_node.with_job_id``); the
        primary rank records the output directory it makes in ``hydra.output_dir``."""
        node = with_job_id(node, str(plan.job_id or "local"))
        if plan.is_primary:
            output_dir = node["runtime"]["output_dir"]
            retrying(
                lambda: collection.update_one(
                    {"_id": doc["_id"], **fenced}, {"$set": {"hydra.output_dir": output_dir}}
                ),
                f"recording the output directory of experiment {doc['_id']}",
            )
            doc["hydra"]["output_dir"] = output_dir  # the observer's copy says the same
        return node

    def _run_claimed(
        self,
        db: Database,
        collection: ExperimentCollection,
        doc: ExperimentDoc,
        main: Any = None,
        sources: Callable[[], list[list[Any]]] | None = None,
    ) -> str:
        """Plan this rank, set it up and run the claimed experiment ``doc``; returns its outcome
        on this rank. ``main``: the app's script module (``job.main_module.load_script``), what
        the payload's script objects and ``__main__`` resolve to; None: their by-value copies.
        ``sources``: the snapshot files the Sacred run lists (``experiment.sources``), asked
        when it starts; None: none."""
        exp_id = doc["_id"]
        fenced = fence(doc)
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
                lambda: load_payload(db, self.payload_id, main), "loading the batch payload"
            )
            node = adapt_hydra_node(point_hydra_node(base, doc["hydra"]), plan)
            if JOB_ID_TOKEN in str(doc["hydra"].get("output_dir") or ""):
                node = self._with_job_id(collection, doc, node, plan, fenced)
            typed = payload.typed_hydra_base
            cfg = job_config(
                task_config(doc),
                node,
                plan.job_id,
                typed_base=pickle.loads(typed) if typed else None,
                base_node=base,
            )
            # Hydra's run_job writes .hydra/ and the app its outputs there: not into a
            # directory another user could redirect (checked at launch too; it may change)
            sweep = cfg.hydra.sweep
            problem = job_dir_problem("hydra.sweep.dir", os.path.join(sweep.dir, sweep.subdir))
            if problem is not None:
                raise UnsafePathError(problem)
        except Exception:
            # Claimed but cannot start (malformed rank variables, a payload gone, a library
            # that fails to import while seeding...): FAILED with this rank's trace, never left
            # RUNNING for the waiter to call KILLED.
            where = plan.global_rank if plan is not None else rank_label(os.environ)
            log.exception("Experiment %s could not start on rank %s", exp_id, where)
            restart = int((doc.get("execution") or {}).get("restart") or 0)
            record_rank_failure(collection, exp_id, where, traceback.format_exc(), restart)
            fail_if_a_rank_failed(collection, exp_id, restart)
            rank.set_current_plan(None)
            return states.FAILED

        holder: dict[str, Any] = {}
        restart = int((doc.get("execution") or {}).get("restart") or 0)

        def task() -> Any:
            collector = getattr(self, "_collector", None)
            if collector is not None:  # the job's first task: the start-up is over
                collector.resume()
            requeue._enter_task()
            ret = _run_hydra_job(payload, cfg)
            holder["ret"] = ret
            if ret.status.name == "FAILED":
                raise ret._return_value
            value, problems = storable_result(ret._return_value)
            value = bounded_result(value, problems)
            if problems:
                log.warning(
                    "Experiment %s: (part of) the result cannot be stored in MongoDB and is "
                    "stored as its repr: %s",
                    exp_id,
                    "; ".join(problems),
                )
            if plan.is_primary and plan.world_size > 1:  # no COMPLETED before every rank ended
                await_other_ranks(collection, exp_id, plan.world_size, restart)
            return value

        usage = stats.sample(reset_gpu_peak=True) if plan.is_primary else None
        pruner = (node.get("launcher") or {}).get("pruner")
        pruning.bind(collection, doc, pruner, plan, fenced)  # seml_hydra.report
        try:
            with script_as_main(main):
                if plan.attach_observers:
                    extra = (node.get("launcher") or {}).get("observers") or []
                    observers: list[Any] = []
                    try:
                        run_observed(
                            db,
                            self.collection,
                            doc,
                            task,
                            extra,
                            fence=fenced,
                            sources=sources,
                            observers=observers,
                        )
                    finally:  # the rank whose observer saved the outcome (else: unknown)
                        self._over_stop = all(o.over_stop for o in observers)
                else:
                    task()
            outcome = states.COMPLETED
            pruning.note_unreported()  # why nothing was stopped early, once in the job's log
        except Exception:
            outcome = states.FAILED
            log.exception("Experiment %s failed on rank %d", exp_id, plan.global_rank)
            self._on_task_error()
            if plan.is_primary:  # Sacred records the task's failure; this covers Sacred's own
                # matches only when Sacred's observer did not record the failure itself: the
                # output since its last saved heartbeat is then missing
                trace = trace_lines()
                kept.write_or_keep(
                    collection,
                    {
                        "_id": exp_id,
                        "status": states.RUNNING,
                        "fail_trace": {"$exists": False},
                        **fenced,
                    },
                    {
                        "$set": {
                            "status": states.FAILED,
                            "fail_trace": trace,
                            "captured_out_incomplete": True,
                        }
                    },
                    f"recording the failure of experiment {exp_id}",
                )
            else:
                record_rank_failure(
                    collection, exp_id, plan.global_rank, traceback.format_exc(), restart
                )
        finally:
            rank.set_current_plan(None)
            pruning.unbind()
        if plan.world_size > 1 and not plan.is_primary:  # after its failure, if any
            record_rank_end(collection, exp_id, plan.global_rank, restart, outcome)
        if usage is not None:  # SEML's collect_stats (seml_hydra.job.stats)
            stats.record(collection, exp_id, usage, fenced)
        # A failure on any rank fails the experiment. Sacred's observer (primary) writes its own
        # status, so: the primary re-checks the other ranks' failures after its last save, and a
        # failing rank that reports after that finds COMPLETED and turns it to FAILED itself.
        if plan.world_size > 1 and (plan.is_primary or outcome == states.FAILED):
            fail_if_a_rank_failed(collection, exp_id, restart)
        ret = holder.get("ret")
        if ret is not None and plan.is_primary:
            fields = {
                "hydra.working_dir": ret.working_dir,
                "hydra.task_name": ret.task_name,
                "hydra.job_id": plan.job_id,
            }
            kept.write_or_keep(
                collection,
                {"_id": exp_id, **fenced},
                {"$set": fields},
                f"recording the working directory of experiment {exp_id}",
            )
        return outcome


def _world_size() -> int:
    """This job's number of ranks from the environment (1 when it cannot tell)."""
    try:
        return placement(os.environ).world_size
    except ValueError:
        return 1


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
