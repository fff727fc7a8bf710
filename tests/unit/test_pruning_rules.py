"""The early-stopping rules (``seml_hydra.core.pruning``) against their published definitions:
ASHA's promotion of the top 1/eta at each rung (Li et al., MLSys 2020) with the stopping
variant Optuna's SuccessiveHalvingPruner uses, and the median stopping rule as Optuna's
MedianPruner applies it, checked against Optuna's own code on random cases; and the launcher
field's refusals."""

from __future__ import annotations

import math
import random

import optuna
import pytest
from optuna.pruners._successive_halving import _is_trial_promotable_to_next_rung
from optuna.study import StudyDirection
from optuna.trial import TrialState, create_trial

from seml_hydra.core import pruning
from seml_hydra.core.pruning import asha_promotes, median_prunes, parse_pruner, rungs_reached

optuna.logging.set_verbosity(optuna.logging.WARNING)
# Optuna 2.10 marks create_trial/add_trial experimental
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


def asha(**params):
    return parse_pruner({"rule": "asha", "metric": "loss", **params})


def median(**params):
    return parse_pruner({"rule": "median", "metric": "loss", **params})


# -- ASHA ------------------------------------------------------------------------------------


def test_asha_rungs_are_at_min_step_times_powers_of_the_reduction_factor():
    p = asha()
    assert [pruning.rung_step(p, k) for k in range(4)] == [1, 3, 9, 27]
    assert [pruning.rung_step(asha(min_step=2, reduction_factor=4), k) for k in range(3)] == [
        2,
        8,
        32,
    ]


def test_a_report_decides_every_rung_it_reached_and_none_at_or_past_max_step():
    p = asha()
    assert rungs_reached(p, 0, 0) == []
    assert rungs_reached(p, 1, 0) == [0]
    assert rungs_reached(p, 2, 1) == []
    assert rungs_reached(p, 10, 0) == [0, 1, 2]  # a report that skipped rungs decides them all
    assert rungs_reached(p, 10, 2) == [2]
    assert rungs_reached(p, 27, 3) == [3]  # no max_step: 27 is a rung
    assert rungs_reached(asha(max_step=27), 27, 3) == []  # the end of the run, not a rung


def test_asha_keeps_the_top_third_of_a_rung():
    # 9 values at the rung (eta 3): the best 3 go on, the others stop
    values = [5.0, 1.0, 7.0, 3.0, 9.0, 2.0, 8.0, 4.0, 6.0]
    kept = [v for v in values if asha_promotes(v, values, 3, "min")]
    assert sorted(kept) == [1.0, 2.0, 3.0]
    kept = [v for v in values if asha_promotes(v, values, 3, "max")]
    assert sorted(kept) == [7.0, 8.0, 9.0]


def test_asha_is_asynchronous_the_first_ones_at_a_rung_go_on_while_best():
    # fewer than eta values at the rung: the best so far goes on (a stopped task cannot be
    # resumed later, as the paper's paused configurations are)
    assert asha_promotes(4.0, [4.0], 3, "min")
    assert asha_promotes(3.0, [4.0, 3.0], 3, "min")
    assert not asha_promotes(5.0, [4.0, 5.0], 3, "min")
    # ties go on
    assert asha_promotes(4.0, [4.0, 4.0, 4.0], 3, "min")


def test_asha_stops_a_nan_and_counts_nan_competitors_as_worst():
    assert not asha_promotes(math.nan, [math.nan], 3, "min")
    assert asha_promotes(9.0, [math.nan, math.nan, 9.0], 3, "min")


@pytest.mark.parametrize("mode", ["min", "max"])
@pytest.mark.parametrize("eta", [2, 3, 4])
def test_asha_promotes_as_optunas_successive_halving(mode, eta):
    direction = StudyDirection.MINIMIZE if mode == "min" else StudyDirection.MAXIMIZE
    rng = random.Random(eta)
    for _ in range(500):
        competing = [float(rng.randint(0, 9)) for _ in range(rng.randint(1, 12))]
        value = rng.choice(competing)
        expected = _is_trial_promotable_to_next_rung(value, list(competing), eta, direction)
        assert asha_promotes(value, competing, eta, mode) == expected, (value, competing)


# -- median ----------------------------------------------------------------------------------


def test_median_stops_a_best_value_worse_than_the_completed_median():
    p = median()
    assert median_prunes(3.0, [1.0, 2.0, 4.0, 5.0, 6.0], 5, 3, p) is False  # median 4
    assert median_prunes(5.0, [1.0, 2.0, 4.0, 5.0, 6.0], 5, 3, p) is True
    assert median_prunes(4.0, [1.0, 2.0, 4.0, 5.0, 6.0], 5, 3, p) is False  # equal: goes on
    maximize = median(mode="max")
    assert median_prunes(3.0, [1.0, 2.0, 4.0, 5.0, 6.0], 5, 3, maximize) is True


def test_median_waits_for_min_experiments_and_warmup_steps():
    values = [1.0, 1.0, 1.0, 1.0, 1.0]
    assert median_prunes(9.0, values[:4], 4, 3, median()) is False  # 4 < 5 completed
    assert median_prunes(9.0, values, 5, 3, median()) is True
    assert median_prunes(9.0, values, 5, 3, median(warmup_steps=4)) is False
    assert median_prunes(9.0, values, 5, 4, median(warmup_steps=4)) is True
    assert median_prunes(9.0, [], 5, 3, median()) is False  # nobody reported this step


def _optuna_median_decision(completed, mine, step, n_startup, warmup, direction):
    study = optuna.create_study(
        direction=direction,
        pruner=optuna.pruners.MedianPruner(n_startup_trials=n_startup, n_warmup_steps=warmup),
    )
    for curve in completed:
        study.add_trial(
            create_trial(state=TrialState.COMPLETE, value=0.0, intermediate_values=curve)
        )
    trial = study.ask()
    for s, v in mine.items():
        trial.report(v, s)
    return study.pruner.prune(study, study._storage.get_trial(trial._trial_id))


def _median_cases(seed: int, n_steps: int):
    """150 random cases ``(completed curves, my values so far, step, n_startup, warmup)``:
    up to 8 completed experiments, each reporting 80% of ``n_steps`` steps."""
    rng = random.Random(seed)
    for _ in range(150):
        steps = list(range(n_steps))
        completed = [
            {s: float(rng.randint(0, 9)) for s in steps if rng.random() < 0.8}
            for _ in range(rng.randint(0, 8))
        ]
        step = rng.choice(steps)
        mine = {s: float(rng.randint(0, 9)) for s in steps if s <= step}
        yield completed, mine, step, rng.randint(0, 5), rng.randint(0, 3)


def _our_median_decision(completed, mine, step, mode, **params) -> bool:
    at_step = [c[step] for c in completed if step in c]
    best = pruning.best_value(list(mine.values()), mode)
    return median_prunes(best, at_step, len(completed), step, median(mode=mode, **params))


@pytest.mark.parametrize("mode", ["min", "max"])
def test_median_decides_as_optunas_median_pruner(mode):
    for completed, mine, step, n_startup, warmup in _median_cases(7 if mode == "min" else 8, 6):
        expected = _optuna_median_decision(completed, mine, step, n_startup, warmup, mode + "imize")
        ours = _our_median_decision(
            completed, mine, step, mode, min_experiments=n_startup, warmup_steps=warmup
        )
        assert ours == expected


def test_median_decides_nothing_at_or_past_max_step_and_as_optunas_before_it():
    """Before ``max_step`` the median rule is Optuna's MedianPruner's decision; at the run's
    last step and past it nothing is stopped, even a value far worse than the median."""
    for completed, mine, step, n_startup, warmup in _median_cases(9, 7):
        decided = _our_median_decision(
            completed, mine, step, "min", min_experiments=n_startup, warmup_steps=warmup, max_step=4
        )
        if step >= 4:
            assert decided is False
        else:
            optuna_says = _optuna_median_decision(
                completed, mine, step, n_startup, warmup, "minimize"
            )
            assert decided == optuna_says
    worst = [1.0, 1.0, 1.0, 1.0, 1.0]
    assert median_prunes(9.0, worst, 5, 3, median(max_step=4)) is True
    assert median_prunes(9.0, worst, 5, 4, median(max_step=4)) is False  # its last step
    assert median_prunes(9.0, worst, 5, 5, median(max_step=4)) is False  # past it
    assert median_prunes(math.nan, worst, 5, 4, median(max_step=4)) is False


def test_median_and_asha_stop_deciding_at_the_same_max_step():
    for max_step in (1, 3, 9, 10, 27):
        a, m = asha(max_step=max_step), median(max_step=max_step, min_experiments=1)
        for step in range(1, 40):
            asha_decides = (
                bool(rungs_reached(a, step, 0))
                and max(pruning.rung_step(a, r) for r in rungs_reached(a, step, 0)) == step
            )
            median_decides = median_prunes(9.0, [1.0], 1, step, m)
            if step >= max_step:
                assert not asha_decides and not median_decides, (max_step, step)
            elif asha_decides:
                assert median_decides, (max_step, step)


# -- the launcher field ----------------------------------------------------------------------


def test_null_is_off_and_defaults_are_filled_in():
    assert parse_pruner(None) is None
    p = asha()
    assert (p.rule, p.metric, p.mode) == ("asha", "loss", "min")
    assert dict(p.params) == {"min_step": 1, "reduction_factor": 3, "max_step": None}
    assert dict(median().params) == {"warmup_steps": 0, "min_experiments": 5, "max_step": None}


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"rule": "asha"}, "has no metric"),
        ({"rule": "asha", "metric": ""}, "has no metric"),
        ({"rule": "hyperband", "metric": "loss"}, "rule='hyperband': unknown rule"),
        ({"metric": "loss"}, "rule=None: unknown rule"),
        # a list (unhashable) is no rule name either, not a TypeError from the lookup
        ({"rule": ["asha"], "metric": "loss"}, r"rule=\['asha'\]: unknown rule"),
        ({"rule": "asha", "metric": "loss", "mode": "lowest"}, "must be min or max"),
        ({"rule": "asha", "metric": "loss", "warmup_steps": 2}, "not a parameter of rule asha"),
        ({"rule": "asha", "metric": "loss", "reduction_factor": 1}, "integer >= 2"),
        ({"rule": "asha", "metric": "loss", "min_step": 0}, "integer >= 1"),
        ({"rule": "median", "metric": "loss", "min_experiments": -1}, "integer >= 0"),
        ("asha", "must be a mapping"),
    ],
)
def test_a_bad_pruner_is_refused_in_one_line(node, message):
    with pytest.raises(ValueError, match=message) as caught:
        parse_pruner(node)
    assert "\n" not in str(caught.value)


def test_the_unreported_metric_message_names_it_and_what_was_reported():
    message = pruning.unreported_message("val_loss", ["loss", "acc"])
    assert message.startswith(
        "hydra.launcher.pruner watches the metric 'val_loss', which the task never reported "
        "with seml_hydra.report (it reported 'acc', 'loss'), so nothing was stopped early"
    )
    assert "\n" not in message
    assert "(it reported" not in pruning.unreported_message("loss", [])
