"""The primary rank's Sacred observer (:class:`DocumentObserver`): a ``MongoObserver`` that
overwrites the experiment's own document (as SEML does), so the document IS the Sacred run
(``start_time``, ``heartbeat``, ``host``, ``captured_out``, ``result``, ``stop_time``,
``fail_trace``), riding out an unreachable MongoDB; and its pure helpers.

Importing this module imports Sacred (``seml_hydra.job.sacred_compat.import_sacred``):
``seml_hydra.job.observed.run_observed`` imports it when a run starts, so importing
``seml_hydra`` does not import Sacred."""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from seml_hydra.core import states
from seml_hydra.job import heartbeat, kept
from seml_hydra.job.failfast import STOP_REASON
from seml_hydra.job.heartbeat import bounded_output
from seml_hydra.job.sacred_compat import import_sacred
from seml_hydra.store.db.collections import metrics_collection_name
from seml_hydra.store.db.retry import is_connection_error, retrying, short_reason
from seml_hydra.store.snapshot.sacred_sources import sacred_source_copies

log = logging.getLogger(__name__)

import_sacred()  # Sacred's import without setuptools' ``pkg_resources`` (sacred_compat)
from sacred.observers import MongoObserver  # noqa: E402

if TYPE_CHECKING:
    from seml_hydra.core.schema import Database

#: how long the final save waits for Sacred's heartbeat thread to end (seconds): a beat in
#: flight reads the run's last output; past this, ``captured_out_incomplete`` is set
FINAL_BEAT_WAIT_S = 30.0


class DocumentObserver(MongoObserver):
    """Sacred's observer of one experiment's run, writing into the experiment's own document.

    Every save matches the document's ``_id`` and the run's fence (an earlier run a requeued
    task took over writes nothing); every save but the final one (``final=False``: the
    heartbeats) also matches only while the document has no fail-fast stop
    (``seml_hydra.job.failfast.STOP_REASON`` absent) and is not FAILED (another rank of the run
    failed: ``job.failures``), so a heartbeat never writes RUNNING over an outcome a waiting
    launcher may already have read. Never writes ``config``: the document keeps the config staged for it (Sacred would
    store its own copy with an added ``seed`` key). Never creates the document either:
    Sacred's ``final_save`` upserts, which would bring back, as a fragment, an experiment
    deleted while it ran (``seml delete --no-cancel``).

    Rides out an unreachable MongoDB: a heartbeat that cannot be saved logs one line and
    the next one saves again (the entry holds everything); metrics that could not be sent
    go with the next heartbeat; the final save (result, captured output, status) is retried
    through ``seml_hydra.store.db.retry.retrying`` (Sacred 0.8.7 gives up after a few attempts
    and leaves the run in a pickle on the node) and, past ``SEML_MONGODB_RETRY_S``, kept in
    memory and written when MongoDB is back before the job ends (``seml_hydra.job.kept``).
    One lock per observer orders its heartbeat thread's saves and the final save, and no
    heartbeat writes once the final save began.

    The final save holds the run's whole output, taken from the run itself
    (:meth:`_take_final_output`), not from the last heartbeat: Sacred 0.8.7 hands the last
    output to the observer only through the heartbeat thread's last beat, which its
    ``_stop_heartbeat`` waits 2 s for (a beat waiting for an unreachable MongoDB takes
    longer), and its capture keeps the output printed after the last read in
    ``CapturedStdout.final``, which no beat reads once the capture is closed (a failing
    task). When the heartbeat thread does not end in :data:`FINAL_BEAT_WAIT_S`, the
    document gets ``captured_out_incomplete: true``.

    Each save sends only what changed since the last one the server acknowledged, the new
    output appended to ``captured_out`` by the server (``seml_hydra.job.heartbeat``): the
    bytes of a beat grow with the output printed since the previous beat, not with the
    run's length (Sacred 0.8.7 resends the whole entry, up to the 1 MB output cap)."""

    def __init__(
        self,
        db: Database,
        collection_name: str,
        doc: Mapping[str, Any],
        *,
        fence: Mapping[str, Any] | None = None,
        sources: Callable[[], list[list[Any]]] | None = None,
    ) -> None:
        """An observer of the run of ``doc`` (a mapping with its ``_id`` and ``seml`` block)
        in collection ``collection_name`` of ``db`` (a pymongo ``Database``); ``fence`` and
        ``sources`` as ``seml_hydra.job.observed.run_observed`` takes them. Its entry starts
        as ``{"_id": doc["_id"]}``: Sacred's overwrite of that document, without the read of
        it Sacred's ``overwrite=<id>`` makes. Sacred's constructor creates a GridFS handle
        (pymongo errors when the server is unreachable: the caller retries)."""
        #: one lock per observer: its heartbeat thread's saves, the final save, metrics
        self._lock = threading.RLock()
        #: True once the job is being requeued: nothing more is saved (freeze_observers)
        self.frozen = False
        self._finished = False
        #: set when the final save begins: the heartbeat thread saves nothing more
        self._closing = False
        #: Sacred's run (the experiment's pre-run hook sets it: :meth:`bind_run`)
        self._run: Any = None
        #: the fields ``completed_event`` sets
        self._completed: dict[str, Any] | None = None
        self._unsent: dict[str, dict[str, list[Any]]] | None = None
        #: the entry of the last save the server acknowledged, or None when unknown
        self._stored: dict[str, Any] | None = None
        #: False once the server refused an update pipeline (MongoDB < 4.2)
        self._appends = True
        #: whether the final save may have written the run's outcome over a fail-fast stop's
        #: mark (``job.failfast.unmark_completed`` then has work): True until a final save
        #: matched the document without the mark (not known for a save kept for later)
        self.over_stop = True
        self._db, self._doc, self._fence, self._sources = db, doc, dict(fence or {}), sources
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            super().__init__(client=db.client, db_name=db.name, collection=collection_name)
        self.overwrite = {"_id": doc["_id"]}
        # the collection's own metrics collection: Sacred's default, the one shared ``metrics``
        # keyed by ``run_id`` alone, mixes the runs of collections whose ids all start at 1
        self.metrics = db[metrics_collection_name(collection_name)]

    def bind_run(self, run: Any) -> None:
        """Keep Sacred's ``run`` (a pre-run hook): the final save reads its output from it."""
        self._run = run

    def started_event(self, ex_info: Any, *args: Any, **kwargs: Any) -> Any:
        return super().started_event(
            sacred_experiment_info(
                ex_info,
                self._doc.get("seml") or {},
                self._sources() if self._sources is not None else [],
            ),
            *args,
            **kwargs,
        )

    def save_sources(self, ex_info: Mapping[str, Any]) -> list[list[Any]]:
        return retrying(
            lambda: sacred_source_copies(self._db, ex_info["sources"]),
            f"storing the sources of experiment {self._doc['_id']} for Sacred",
        )

    def _entry(self) -> dict[str, Any]:
        # a copy: swapping ``run_entry`` itself would lose what the main thread writes into
        # it meanwhile (Sacred's completed_event sets status and result while a heartbeat
        # save waits for the server)
        return {k: v for k, v in self.run_entry.items() if k != "config"}

    def _filter(
        self, entry: Mapping[str, Any], *, final: bool = True, unstopped: bool = False
    ) -> dict[str, Any]:
        # the fence: an earlier run that a requeued task took over writes nothing; and no
        # save but the final one writes RUNNING over a fail-fast stop (job.failfast;
        # INTERRUPTED on the scancel) or over FAILED (another rank of this run failed,
        # job.failures), which a waiting launcher may already have read; ``unstopped``: a
        # final save's first try, only where there is no stop
        where: dict[str, Any] = {"_id": entry["_id"], **self._fence}
        if not final or unstopped:
            where[STOP_REASON] = {"$exists": False}
        if not final:
            where["status"] = {"$ne": states.FAILED}
        return where

    @contextlib.contextmanager
    def _without_config(self) -> Iterator[None]:
        entry, runs = self.run_entry, self.runs
        self.run_entry = self._entry()
        self.runs = _WithoutUpsert(runs, self._fence)
        try:
            yield
        finally:
            self.run_entry, self.runs = entry, runs

    def save(self) -> None:
        with self._lock:
            if self.frozen or self._finished or self._closing:
                return
            _untee_log_handlers()
            entry = self._entry()
            try:
                self._send(entry, final=False)
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
        if self.frozen or self._finished:
            return
        self._closing = True
        self._take_final_output()
        self.run_entry.update(self._completed or {})
        with self._lock:
            if self.frozen or self._finished:
                return
            self._finished = True
            _untee_log_handlers()
            # a new heartbeat guards the final append of output (heartbeat.save_update)
            self.run_entry["heartbeat"] = heartbeat.next_heartbeat(
                self.run_entry.get("heartbeat"),
                datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None),
            )
            entry = self._entry()
            what = f"saving the outcome of experiment {entry['_id']} ({entry['status']})"
            try:
                retrying(lambda: self._send_final(entry), what)
            except Exception as error:
                if is_connection_error(error):  # past SEML_MONGODB_RETRY_S
                    update = heartbeat.full_update(entry)
                    kept.keep(self.runs, self._filter(entry), update, what, error)
                    return
                with self._without_config():  # Sacred's own path: unencodable entries
                    super().final_save(attempts)

    def _take_final_output(self) -> None:
        # Sacred 0.8.7 (run.py, stdout_capturing.py): wait for the heartbeat thread, whose
        # beat in flight may still read the output, then add what the closed capture kept
        # in ``final`` to the run's ``captured_out``
        run = self._run
        if run is None:
            return
        beat = getattr(run, "_heartbeat", None)
        if isinstance(beat, threading.Thread) and beat is not threading.current_thread():
            beat.join(timeout=FINAL_BEAT_WAIT_S)
            if beat.is_alive():
                log.warning(
                    "Experiment %s: Sacred's heartbeat did not end within %g s; its "
                    "captured_out may miss the last output (the job's output file has it)",
                    self._doc["_id"],
                    FINAL_BEAT_WAIT_S,
                )
                self.run_entry["captured_out_incomplete"] = True
        capture = getattr(run, "_output_file", None)
        rest = getattr(capture, "final", None)
        if rest and capture is not None and getattr(capture, "closed", False):
            capture.final = None
            if isinstance(rest, bytes):
                rest = rest.decode("utf-8", "replace")
            text = (run.captured_out or "") + rest
            run.captured_out = bounded_output(text)
        if isinstance(run.captured_out, str):
            self.run_entry["captured_out"] = run.captured_out

    def _send_final(self, entry: dict[str, Any]) -> None:
        """The final save: first where the document holds no fail-fast stop (the usual
        case, one write); where it matched nothing (a stop, or a fence another run took),
        again without that condition, :attr:`over_stop` left True."""
        if self._send(entry, unstopped=True):
            self.over_stop = False
        else:
            self._send(entry)

    def _send(self, entry: dict[str, Any], *, final: bool = True, unstopped: bool = False) -> bool:
        """Save ``entry`` (:meth:`_filter` of ``final`` and ``unstopped``); whether the
        document matched."""
        # what changed since the last acknowledged save; an append whose guard fails (the
        # server holds something else: a lost answer, another writer) sends it all
        from pymongo.errors import OperationFailure

        update, guard = heartbeat.save_update(self._stored, entry, append=self._appends)
        where = self._filter(entry, final=final, unstopped=unstopped)
        try:
            result = self.runs.update_one({**where, **guard}, update)
        except OperationFailure:
            if not isinstance(update, list):
                raise
            self._appends, result = False, None  # no update pipelines before MongoDB 4.2
        if guard and not (result and result.matched_count):
            result = self.runs.update_one(where, heartbeat.full_update(entry))
        self._stored = heartbeat.snapshot(entry) if result.matched_count else None
        return bool(result.matched_count)

    # The task's value is already plain (``documents.storable_result``): Sacred's
    # ``flatten`` (jsonpickle) would store a datetime, bytes or a tuple as a
    # ``{"py/...": ...}`` dict instead of the BSON date, binary or array MongoDB can query.
    def heartbeat_event(self, info: Any, captured_out: Any, beat_time: Any, result: Any) -> None:
        if self._closing:  # its last beat, after the final save began: nothing to add
            return
        super().heartbeat_event(info, captured_out, beat_time, None)  # stored at completion

    def completed_event(self, stop_time: Any, result: Any) -> None:
        # set again after the heartbeat thread ended (``final_save``): a beat of it that
        # was under way sets ``result`` to None
        self._completed = {"stop_time": stop_time, "result": result, "status": "COMPLETED"}
        self.run_entry.update(self._completed)
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
                    self._doc["_id"],
                    short_reason(error),
                    "the next heartbeat sends them" if resend else "these values are lost",
                )


def sacred_experiment_info(
    ex_info: Mapping[str, Any], seml: Mapping[str, Any], sources: Sequence[Sequence[Any]] = ()
) -> dict[str, Any]:
    """Sacred's ``experiment`` block of a run (``ex_info``) with the app's script as Sacred
    would record it for a run of the script itself (pure): ``base_dir`` the script's folder,
    ``mainfile`` its name (relative to ``base_dir``, as Sacred has it) and ``sources`` the
    files of the code snapshot given as ``sources`` (``[[path relative to the project root,
    GridFS id], ...]``: the runner gives those of the modules loaded when the run starts, as
    Sacred's own discovery lists them; the observer stores them as Sacred's copies:
    :func:`sacred_source_copies`). ``seml``: the document's ``seml`` block; without
    ``executable`` the block is returned as Sacred made it, but for ``sources``."""
    info = dict(ex_info)
    info["sources"] = [[str(rel), file_id] for rel, file_id in sources]
    executable = seml.get("executable")
    if executable:
        info["base_dir"] = os.path.dirname(str(executable))
        info["mainfile"] = os.path.basename(str(executable))
    return info


def _untee_log_handlers() -> None:
    """Point the root logger's stream handlers back at the real stream once Sacred's output
    capture is over. Hydra configures logging inside the captured run, so its console handler
    writes to Sacred's tee, whose buffer is closed after the run: every later log line (the
    final save's retries, the next experiment's claim) would end in a "Logging error"."""
    for handler in logging.getLogger().handlers:
        if not isinstance(handler, logging.StreamHandler):
            continue
        stream = handler.stream
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
