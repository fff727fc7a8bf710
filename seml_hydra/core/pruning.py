"""Early-stopping rules for the experiments of one launch (pure): the launcher field ``pruner``
and the decisions ``seml_hydra.report`` takes from what the launch's other experiments reported.

``hydra.launcher.pruner={rule: asha, metric: loss, mode: min}`` picks a rule and the metric it
watches (``mode``: ``min`` when smaller is better, ``max`` otherwise). The rules:

``asha``: asynchronous successive halving (Li et al., "A System for Massively Parallel
    Hyperparameter Tuning", MLSys 2020, Algorithm 2). Rung ``k`` sits at step
    ``min_step * reduction_factor**k`` (below ``max_step`` when it is set: the last step is the
    end of the run, not a rung). An experiment reaching a rung records its value there and goes
    on only while it is among the top ``1/reduction_factor`` of the values recorded at that rung
    so far by the launch's experiments, itself included (:func:`asha_promotes`). The paper
    pauses a configuration that is not promoted yet and may promote it later; a stopped Slurm
    task cannot be resumed, so, as Optuna's ``SuccessiveHalvingPruner`` does (optuna 2.10,
    ``optuna/pruners/_successive_halving.py``, ``_is_trial_promotable_to_next_rung``), while a
    rung holds fewer than ``reduction_factor`` values the best of them goes on. Defaults:
    ``min_step`` 1, ``reduction_factor`` 3 (the paper's), ``max_step`` null.
``median``: the median stopping rule (Golovin et al., "Google Vizier", KDD 2017) as Optuna's
    ``MedianPruner`` applies it (optuna 2.10, ``optuna/pruners/_percentile.py``,
    ``PercentilePruner.prune`` with percentile 50): no decision before ``min_experiments``
    experiments of the launch COMPLETED without being pruned (Optuna's ``n_startup_trials``,
    default 5), nor at a step below ``warmup_steps`` (``n_warmup_steps``, default 0); then stop
    when the experiment's best value so far is worse than the median of the values those
    completed experiments reported at the same step (no decision when none did). A NaN best
    value stops it. ``max_step`` (default null), as ASHA's: the run's last step; no decision
    at it or past it (Optuna's pruner has no such bound: an Optuna run stops reporting there),
    so a run that reports to its end is never stopped at its last step, which would save
    nothing (:func:`at_or_past_end`).

Steps are the integers the task passes to ``report``; a report that skips a rung's step
decides that rung (and any other it passed) with its value.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: rule name -> {parameter: default}
RULES: Mapping[str, Mapping[str, Any]] = {
    "asha": {"min_step": 1, "reduction_factor": 3, "max_step": None},
    "median": {"warmup_steps": 0, "min_experiments": 5, "max_step": None},
}
MODES = ("min", "max")
#: keys every rule accepts
COMMON_KEYS = ("rule", "metric", "mode")


@dataclass(frozen=True)
class Pruner:
    """A checked ``hydra.launcher.pruner`` (:func:`parse_pruner`).

    Attributes:
        rule: ``"asha"`` or ``"median"``.
        metric: the name passed to ``report`` the rule watches.
        mode: ``"min"`` (smaller is better) or ``"max"``.
        params: the rule's parameters with their defaults filled in (:data:`RULES`).
    """

    rule: str
    metric: str
    mode: str
    params: Mapping[str, Any]


def parse_pruner(node: Any) -> Pruner | None:
    """The :class:`Pruner` a launcher's ``pruner`` value asks for, or None for null (off).

    ``node``: a mapping ``{rule, metric, mode?, <the rule's parameters>}``. Raises
    ``ValueError`` with one line saying what is wrong and what to write instead: not a
    mapping, a missing or empty ``metric``, an unknown rule or mode, a parameter of another
    rule or none, a parameter that is not an integer of the right range.
    """
    if node is None:
        return None
    example = "e.g. 'hydra.launcher.pruner={rule: asha, metric: loss, mode: min}' (null: off)"
    if not isinstance(node, Mapping):
        raise ValueError(f"hydra.launcher.pruner={node!r}: must be a mapping, {example}")
    rule = node.get("rule")
    if not isinstance(rule, str) or rule not in RULES:
        raise ValueError(
            f"hydra.launcher.pruner.rule={rule!r}: unknown rule; use one of "
            f"{', '.join(RULES)}, {example}"
        )
    metric = node.get("metric")
    if not isinstance(metric, str) or not metric:
        raise ValueError(
            "hydra.launcher.pruner has no metric: name the metric the task passes to "
            f"seml_hydra.report, {example}"
        )
    mode = node.get("mode", "min")
    if mode not in MODES:
        raise ValueError(f"hydra.launcher.pruner.mode={mode!r}: must be min or max")
    defaults = RULES[rule]
    unknown = sorted(str(k) for k in node if k not in COMMON_KEYS and k not in defaults)
    if unknown:
        raise ValueError(
            f"hydra.launcher.pruner: {', '.join(unknown)} is not a parameter of rule {rule} "
            f"(its parameters: {', '.join(defaults)})"
        )
    params = {k: node.get(k, default) for k, default in defaults.items()}
    lowest = {"min_step": 1, "reduction_factor": 2, "max_step": 1}
    for key, value in params.items():
        if value is None and defaults[key] is None:
            continue
        low = lowest.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"hydra.launcher.pruner.{key}={value!r}: must be an integer >= {low}")
    return Pruner(rule=rule, metric=metric, mode=mode, params=params)


def better(a: float, b: float, mode: str) -> bool:
    """Whether value ``a`` is strictly better than ``b`` under ``mode`` (pure)."""
    return a < b if mode == "min" else a > b


def rung_step(pruner: Pruner, rung: int) -> int:
    """The step of ASHA rung ``rung`` (0, 1, ...): ``min_step * reduction_factor**rung``."""
    min_step: int = pruner.params["min_step"]
    factor: int = pruner.params["reduction_factor"]
    step: int = min_step * factor**rung
    return step


def at_or_past_end(pruner: Pruner, step: int) -> bool:
    """Whether ``step`` is at or past the rule's ``max_step`` (the run's last step), where no
    rule decides: ASHA has no rung there, the median rule stops nothing (pure; False without
    ``max_step``)."""
    max_step = pruner.params.get("max_step")
    return max_step is not None and step >= max_step


def rungs_reached(pruner: Pruner, step: int, decided: int) -> list[int]:
    """The ASHA rungs a report at ``step`` decides, in order, when rungs ``0 .. decided-1``
    are decided already: every rung at or below ``step``, below ``max_step`` when it is set
    (pure)."""
    rungs = []
    rung = decided
    while rung_step(pruner, rung) <= step:
        if at_or_past_end(pruner, rung_step(pruner, rung)):
            break
        rungs.append(rung)
        rung += 1
    return rungs


def asha_promotes(
    value: float, competing: Sequence[float], reduction_factor: int, mode: str
) -> bool:
    """Whether ``value`` goes on past its rung (pure): it is among the best
    ``max(1, len(competing) // reduction_factor)`` of ``competing`` (the values recorded at the
    rung so far, ``value`` itself included; ties go on). A NaN value never goes on; NaN
    competitors count as worst."""
    if math.isnan(value):
        return False
    keep = max(1, len(competing) // reduction_factor)
    ordered = sorted((v for v in competing if not math.isnan(v)), reverse=(mode == "max"))
    if len(ordered) < keep:
        return True  # the NaN ones fill the bottom
    threshold = ordered[keep - 1]
    return not better(threshold, value, mode)


def median_prunes(
    best: float,
    completed_at_step: Sequence[float],
    n_completed: int,
    step: int,
    pruner: Pruner,
) -> bool:
    """Whether the median rule stops an experiment at ``step`` (pure).

    ``best``: the experiment's best value of the metric so far (this step included);
    ``completed_at_step``: the values the launch's experiments that COMPLETED unpruned reported
    at this same step; ``n_completed``: how many experiments COMPLETED unpruned (reporting this
    step or not). See the module docstring for the rule."""
    if n_completed == 0 or n_completed < pruner.params["min_experiments"]:
        return False
    if step < pruner.params["warmup_steps"] or at_or_past_end(pruner, step):
        return False
    if math.isnan(best):
        return True
    values = [v for v in completed_at_step if not math.isnan(v)]
    if not values:
        return False
    return better(statistics.median(values), best, pruner.mode)


def best_value(values: Sequence[float], mode: str) -> float:
    """The best of ``values`` under ``mode``, NaN ignored (NaN when all are; pure)."""
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return math.nan
    return min(finite) if mode == "min" else max(finite)


def unreported_message(metric: str, reported: Sequence[str]) -> str:
    """What the job's log says once when a run ended without reporting the metric its
    ``pruner`` watches (pure): nothing could be stopped early, and why. ``reported``: the
    other names the task passed to ``report``, if any."""
    other = f" (it reported {', '.join(repr(n) for n in sorted(reported))})" if reported else ""
    return (
        f"hydra.launcher.pruner watches the metric {metric!r}, which the task never reported "
        f"with seml_hydra.report{other}, so nothing was stopped early: report it "
        f"(seml_hydra.report({metric!r}, value, step); log_scalar only logs), or set "
        "pruner.metric to the name the task reports"
    )
