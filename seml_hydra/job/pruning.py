"""Early stopping from inside a Hydra task: :func:`report` logs a metric and says whether the
experiment should stop now, by the launch's ``hydra.launcher.pruner`` rule
(``seml_hydra.core.pruning``)::

    import seml_hydra

    for step in range(1, cfg.steps + 1):
        loss = train_one_epoch()
        if seml_hydra.report("loss", loss, step):
            break              # stopped early: return as usual
    return loss

What the decision reads and writes, all in MongoDB (no process runs beside the jobs): each
report of the watched metric sets ``pruning.values.<step>`` in the experiment's document, and
ASHA's rung values ``pruning.rungs.<rung>``; a decision compares them with the same fields of
the launch's other experiments (same ``batch_id``). A stopped experiment gets ``pruned:
{step, value, rule}`` and ends COMPLETED with the task's return value as its result; every
later report of it returns True too. On a multi-task experiment the primary rank (global rank
0) decides and writes ``pruning.decisions.<step>``; the other ranks wait for that field, so
every rank gets the same answer for a step (all ranks must report the same steps), also
after a requeue.

Outside a seml-hydra job (no experiment bound by the run step) :func:`report` logs nothing and
returns False; with no ``pruner`` it logs and returns False.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from seml_hydra.core import pruning, states
from seml_hydra.job import metrics
from seml_hydra.store.db.retry import retrying

if TYPE_CHECKING:
    from seml_hydra.core.schema import ExperimentCollection, ExperimentDoc

log = logging.getLogger(__name__)

#: seconds a non-primary rank waits at most between two reads of the primary's decision
MAX_DECISION_POLL_S = 1.0


@dataclass
class _Bound:
    """The experiment this process runs now and what its reports decided so far."""

    collection: ExperimentCollection
    exp_id: int
    batch_id: Any
    pruner: pruning.Pruner | None
    primary: bool
    world_size: int
    fence: Mapping[str, Any]
    values: dict[int, float] = field(default_factory=dict)
    #: the primary's answers of earlier attempts (a requeued run): the same again
    decisions: dict[int, bool] = field(default_factory=dict)
    rungs_decided: int = 0
    stopped: bool = False
    #: the names reported that the pruner does not watch (for :func:`note_unreported`)
    others: set[str] = field(default_factory=set)


_BOUND: _Bound | None = None


def bind(
    collection: ExperimentCollection,
    doc: Mapping[str, Any],
    pruner_node: Any,
    plan: Any,
    fence: Mapping[str, Any],
) -> None:
    """Register the experiment ``doc`` (claimed, as read then) this rank runs now (called by
    the run step, ``seml_hydra.job.runner``). ``pruner_node``: the point's
    ``hydra.launcher.pruner`` (checked at launch; one that no longer parses switches pruning
    off with a warning); ``plan``: this rank's ``RankPlan``; ``fence``: the filter every write
    of this run must also match (``seml_hydra.job.claim.fence``). What an earlier attempt of
    the experiment reported (a requeued run) is taken over from ``doc``."""
    global _BOUND
    try:
        pruner = pruning.parse_pruner(pruner_node)
    except ValueError as error:
        log.warning("Experiment %s: no early stopping: %s", doc["_id"], error)
        pruner = None
    stored = doc.get("pruning") or {}
    values = {int(k): float(v) for k, v in (stored.get("values") or {}).items()}
    _BOUND = _Bound(
        collection=collection,
        exp_id=doc["_id"],
        batch_id=doc.get("batch_id"),
        pruner=pruner,
        primary=bool(plan.is_primary),
        world_size=int(plan.world_size),
        fence=dict(fence),
        values=values,
        decisions={int(k): bool(v) for k, v in (stored.get("decisions") or {}).items()},
        rungs_decided=len(stored.get("rungs") or {}),
        stopped=bool(doc.get("pruned")),
    )
    if pruner is not None:
        _index_launches(collection)


def _index_launches(collection: ExperimentCollection) -> None:
    """An index on ``batch_id`` (a no-op when it exists): every decision reads the launch's
    other experiments. A user who may not create indexes decides without it."""
    from pymongo.errors import OperationFailure

    try:
        retrying(lambda: collection.create_index("batch_id"), "indexing the launches")
    except OperationFailure:
        pass


def note_unreported() -> None:
    """Say once in the job's log (a warning, the primary rank only) when the experiment's run
    ended without reporting the metric its ``pruner`` watches, in this run or an earlier
    attempt of it (``core.pruning.unreported_message``): the researcher learns why nothing was
    stopped. Called by the run step when the task returned; nothing without a pruner or
    outside a job."""
    bound = _BOUND
    if bound is None or bound.pruner is None or not bound.primary or bound.values:
        return
    message = pruning.unreported_message(bound.pruner.metric, sorted(bound.others))
    log.warning("Experiment %s: %s", bound.exp_id, message)


def unbind() -> None:
    """Forget the experiment (the run step, after the task ended)."""
    global _BOUND
    _BOUND = None


def report(name: str, value: float, step: int) -> bool:
    """Log ``value`` of metric ``name`` at ``step`` (as ``seml_hydra.log_scalar``; the
    primary rank only) and return True when the experiment should stop now.

    ``step``: an integer, increasing from one report to the next (epochs, iterations; the
    rule's ``min_step``, ``max_step`` and ``warmup_steps`` count in it). Only the pruner's
    ``metric`` is judged; other names are logged and return False. Once an experiment was
    stopped, every later report returns True. Outside a seml-hydra job: nothing is logged,
    returns False. Raises ``TypeError`` for a step that is not an integer or a value that is
    not a number.
    """
    bound = _BOUND
    if bound is None:
        return False
    if isinstance(step, bool) or not isinstance(step, int):
        raise TypeError(f"seml_hydra.report: step={step!r} must be an integer")
    value = float(value)
    metrics.log_scalar(name, value, step)
    if bound.pruner is None or name != bound.pruner.metric:
        bound.others.add(name)
        return False
    if not bound.primary:
        return _await_decision(bound, step)
    if step in bound.decisions:  # answered before this requeue: every rank got that answer
        return bound.decisions[step]
    if not bound.stopped:
        bound.stopped = _decide(bound, value, step)
    if bound.world_size > 1:
        retrying(
            lambda: bound.collection.update_one(
                {"_id": bound.exp_id, **bound.fence},
                {"$set": {f"pruning.decisions.{step}": bound.stopped}},
            ),
            f"recording the early-stopping decision of experiment {bound.exp_id}",
        )
    return bound.stopped


def _find_all(
    collection: ExperimentCollection, query: Mapping[str, Any], path: str
) -> list[ExperimentDoc]:
    """The documents matching ``query``, with only the field at ``path`` (and ``_id``)."""
    return list(collection.find(query, {path: 1}))


def _decide(bound: _Bound, value: float, step: int) -> bool:
    """The primary rank's decision for a report of the watched metric (records it first)."""
    assert bound.pruner is not None
    pruner, collection = bound.pruner, bound.collection
    bound.values[step] = value
    mine = {"_id": bound.exp_id, **bound.fence}
    what = f"early stopping of experiment {bound.exp_id}"
    update: dict[str, Any] = {f"pruning.values.{step}": value}
    stop = False
    if pruner.rule == "asha":
        rungs = pruning.rungs_reached(pruner, step, bound.rungs_decided)
        if not rungs:
            retrying(lambda: collection.update_one(mine, {"$set": update}), what)
        for rung in rungs:
            # recorded before the others are read: of two experiments reaching a rung at the
            # same time, at least one sees the other
            key = f"pruning.rungs.{rung}"
            update[key] = value
            retrying(lambda: collection.update_one(mine, {"$set": update}), what)
            others = {
                "batch_id": bound.batch_id,
                "_id": {"$ne": bound.exp_id},
                key: {"$exists": True},
            }
            docs = retrying(functools.partial(_find_all, collection, others, key), what)
            competing = [float(d["pruning"]["rungs"][str(rung)]) for d in docs] + [value]
            bound.rungs_decided = rung + 1
            if not pruning.asha_promotes(
                value, competing, pruner.params["reduction_factor"], pruner.mode
            ):
                stop = True
                break
    else:
        retrying(lambda: collection.update_one(mine, {"$set": update}), what)
        done = {
            "batch_id": bound.batch_id,
            "_id": {"$ne": bound.exp_id},
            "status": states.COMPLETED,
            "pruned": {"$exists": False},
        }
        key = f"pruning.values.{step}"
        docs = retrying(lambda: list(collection.find(done, {key: 1})), what)
        at_step = [
            float(d["pruning"]["values"][str(step)])
            for d in docs
            if str(step) in ((d.get("pruning") or {}).get("values") or {})
        ]
        best = pruning.best_value(list(bound.values.values()), pruner.mode)
        stop = pruning.median_prunes(best, at_step, len(docs), step, pruner)
    if stop:
        retrying(
            lambda: collection.update_one(
                mine,
                {"$set": {"pruned": {"step": step, "value": value, "rule": pruner.rule}}},
            ),
            what,
        )
        log.info(
            "Experiment %s: stopped early at step %s (%s=%s, rule %s)",
            bound.exp_id,
            step,
            pruner.metric,
            value,
            pruner.rule,
        )
    return stop


def _await_decision(bound: _Bound, step: int) -> bool:
    """A non-primary rank: the primary's decision for ``step``, read from the document (waits
    until it is there; True when the experiment is no longer RUNNING, so no rank waits for a
    primary that is gone)."""
    key = f"pruning.decisions.{step}"
    pause = 0.02
    while True:
        doc = retrying(
            lambda: bound.collection.find_one({"_id": bound.exp_id}, {key: 1, "status": 1}),
            f"reading the early-stopping decision of experiment {bound.exp_id}",
        )
        if doc is None:
            return True
        decisions = (doc.get("pruning") or {}).get("decisions") or {}
        if str(step) in decisions:
            return bool(decisions[str(step)])
        if doc.get("status") != states.RUNNING:
            return True
        time.sleep(pause)
        pause = min(MAX_DECISION_POLL_S, pause * 2)
