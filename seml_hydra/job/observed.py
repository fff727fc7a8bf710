"""The primary rank's Sacred run (:func:`run_observed`), observed by
``seml_hydra.job.observer.DocumentObserver``, which overwrites the experiment's own document
(as SEML does), so the document IS the Sacred run; the bounds on what it stores (captured
output, result); and freezing the observer when the job is being requeued. Sacred itself, and
the observer's module, are imported when a run starts."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from seml_hydra.job import metrics
from seml_hydra.job.heartbeat import bounded_output
from seml_hydra.job.sacred_compat import experiment
from seml_hydra.store.db.retry import retrying

if TYPE_CHECKING:
    from seml_hydra.core.schema import Database

#: a result larger than this (bytes of BSON) is stored as a truncated repr: a MongoDB document
#: holds at most 16 MB, and the result shares it with the captured output and the config
MAX_RESULT_BYTES = 4 * 1024 * 1024


def bounded_result(value: Any, problems: list[str]) -> Any:
    """``value``, or a truncated repr of it when its BSON is above :data:`MAX_RESULT_BYTES`
    (then a line is added to ``problems``)."""
    import bson

    size = len(bson.encode({"result": value}))
    if size <= MAX_RESULT_BYTES:
        return value
    problems.append(f"result: {size} bytes, above the {MAX_RESULT_BYTES} bytes kept")
    return repr(value)[:1000] + f"... <{size} bytes, truncated>"


def run_observed(
    db: Database,
    collection_name: str,
    doc: Mapping[str, Any],
    task: Any,
    extra_observers: Sequence[Mapping[str, Any]] = (),
    *,
    fence: Mapping[str, Any] | None = None,
    sources: Callable[[], list[list[Any]]] | None = None,
    observers: list[Any] | None = None,
) -> Any:
    """Run ``task`` as a Sacred run whose ``MongoObserver`` overwrites document ``doc['_id']``.

    ``fence``: a filter every save of the observer must also match
    (``seml_hydra.job.claim.fence``), else the save writes nothing. ``sources``: asked when the
    run starts, the code snapshot files the run lists as Sacred's ``experiment.sources``
    (``seml_hydra.job.observer.sacred_experiment_info``); None: none. ``extra_observers``: Hydra
    nodes of more Sacred observers, instantiated. Returns what ``task`` returned. The observer
    is ``seml_hydra.job.observer.DocumentObserver`` (what it writes, and when); it is appended
    to ``observers`` when given (its ``over_stop`` tells, after the run, whether the final
    save may have written over a fail-fast stop).

    Sacred 0.8.7 (``observers/mongo.py``) loads the whole document when asked to overwrite and
    writes it back with ``$set`` on every heartbeat, which would undo fields other processes
    change meanwhile (``slurm``, a CLI's INTERRUPTED). So the observer's entry starts from
    ``{"_id": ...}`` alone and only ever holds the fields Sacred owns. Metrics go to the
    collection's own metrics collection (``collections.metrics_collection_name``), and the result
    is written as the task returned it (already plain: ``documents.storable_result``), not
    through Sacred's jsonpickle ``flatten``.
    """
    from hydra.utils import instantiate

    from seml_hydra.job.observer import DocumentObserver  # imports Sacred

    # the app's own sources are snapshotted by seml-hydra and its git state is in the
    # document's ``git`` block: the Experiment discovers neither
    ex = experiment(doc.get("seml", {}).get("name", collection_name))
    from sacred import SETTINGS

    SETTINGS.CAPTURE_MODE = "sys"
    SETTINGS.CONFIG.READ_ONLY_CONFIG = False
    quiet = logging.getLogger("seml_hydra.sacred")
    quiet.setLevel(logging.WARNING)
    ex.logger = quiet
    ex.captured_out_filter = bounded_output
    ex.add_config({**doc["config"], "seed": doc.get("seed", 0)})
    ex.main(task)
    ex.pre_run_hook(lambda _run: metrics.bind_run(_run))  # seml_hydra.job.metrics.log_scalar

    observer = retrying(
        lambda: DocumentObserver(db, collection_name, doc, fence=fence, sources=sources),
        f"starting the Sacred run of experiment {doc['_id']}",
    )
    ex.observers.append(observer)
    if observers is not None:
        observers.append(observer)
    # a function of ``_run`` (Sacred injects its run by that name; a bound method cannot be
    # captured: Sacred sets an attribute on the function)
    ex.pre_run_hook(lambda _run: observer.bind_run(_run))
    _ACTIVE_OBSERVERS.append(observer)
    for node in extra_observers:
        ex.observers.append(instantiate(node))
    try:
        return ex.run().result
    finally:
        _ACTIVE_OBSERVERS.remove(observer)


#: the document observers of runs in progress in this process (``freeze_observers``)
_ACTIVE_OBSERVERS: list[Any] = []


def freeze_observers() -> None:
    """Stop the running experiment's observer from writing: the job is being requeued, and
    Sacred would otherwise record the exit as FAILED over RESCHEDULED."""
    for observer in _ACTIVE_OBSERVERS:
        observer.frozen = True
