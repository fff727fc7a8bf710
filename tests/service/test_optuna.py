"""``hydra/sweeper=optuna`` (hydra-optuna-sweeper) on the seml launchers: Optuna asks for
``n_jobs`` trials per launch, every trial is a document whose result goes back to the study
(a float or a ``numpy.float64``), the best parameters are printed and written to
``optimization_results.yaml``; a point Optuna suggests again returns the stored result and the
console says so. App: ``tests/apps/optuna_app.py``."""

from __future__ import annotations

import pytest
import yaml
from support.run import run_app

APP = "../tests/apps/optuna_app.py"
FAST = ["hydra.launcher.poll_interval_s=0.3", "hydra.launcher.snapshot=false"]
LAUNCHERS = ["seml_local", pytest.param("seml", marks=pytest.mark.slurm)]


def optuna_sweep(launcher: str, collection: str, *args: str, cwd):
    """Run the app's 6-trial Optuna sweep, 3 trials per launch; returns the CompletedProcess."""
    return run_app(
        APP,
        "-m",
        "hydra/sweeper=optuna",
        f"hydra/launcher={launcher}",
        f"hydra.launcher.collection={collection}",
        "hydra.sweeper.n_trials=6",
        "hydra.sweeper.n_jobs=3",
        "hydra.sweeper.sampler.seed=1",
        *FAST,
        *args,
        cwd=cwd,
        env={"HYDRA_FULL_ERROR": "1"},
    )


def optimization_results(cwd) -> dict:
    (path,) = cwd.glob("multirun/*/*/optimization_results.yaml")
    return yaml.safe_load(path.read_text())


def objective(x: float, kind: str = "a") -> float:
    """What tests/apps/optuna_app.py returns."""
    return (x - 0.3) ** 2 + (1.0 if kind == "b" else 0.0)


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("as_numpy", [False, True], ids=["float", "numpy-float64"])
def test_optuna_sweep_stores_every_trial_and_reports_the_best(
    launcher, as_numpy, request, test_db, tmp_path
):
    if launcher == "seml":
        request.getfixturevalue("slurm")
    proc = optuna_sweep(
        launcher, "optuna", "x=interval(-1,1)", f"as_numpy={str(as_numpy).lower()}", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    docs = list(test_db["optuna"].find())
    assert len(docs) == 6
    assert {d["status"] for d in docs} == {"COMPLETED"}
    for doc in docs:
        assert doc["result"] == pytest.approx(objective(doc["config"]["x"]))
    best = min(docs, key=lambda d: d["result"])
    results = optimization_results(tmp_path)
    assert results["best_params"] == {"x": best["config"]["x"]}
    assert results["best_value"] == pytest.approx(best["result"])
    assert f"Best parameters: {{'x': {best['config']['x']}}}" in proc.stdout + proc.stderr


def test_a_point_optuna_suggests_again_returns_the_stored_result(test_db, tmp_path):
    proc = optuna_sweep("seml_local", "repeat", "kind=choice(a,b)", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    docs = list(test_db["repeat"].find())
    # 6 trials over 2 points: each point is one document, run once
    assert sorted(d["config"]["kind"] for d in docs) == ["a", "b"]
    assert {d["status"] for d in docs} == {"COMPLETED"}
    # 3 trials per launch over 2 values: every launch repeats a point of its own, and the
    # second launch's points are all in the collection already
    assert proc.stdout.count("point(s) repeat another point of this launch") == 2
    assert "point(s) already in the collection as COMPLETED (returning them)" in proc.stdout
    results = optimization_results(tmp_path)
    assert results["best_params"] == {"kind": "a"}
    assert results["best_value"] == pytest.approx(objective(0.0, "a"))


def test_a_study_run_again_with_every_point_stored_writes_its_results(test_db, tmp_path):
    """The second run submits nothing (every trial's point is COMPLETED in the collection):
    the launcher creates the sweep dir as Hydra's basic launcher does, so Optuna can write
    ``optimization_results.yaml`` there."""
    first = optuna_sweep(
        "seml_local", "again", "kind=choice(a,b)", "hydra.sweep.dir=multirun/x/first", cwd=tmp_path
    )
    assert first.returncode == 0, first.stderr
    second = optuna_sweep(
        "seml_local", "again", "kind=choice(a,b)", "hydra.sweep.dir=multirun/x/second", cwd=tmp_path
    )
    assert second.returncode == 0, second.stderr
    assert "Submitted" not in second.stdout
    results = yaml.safe_load((tmp_path / "multirun/x/second/optimization_results.yaml").read_text())
    assert results["best_params"] == {"kind": "a"}
    assert test_db["again"].count_documents({}) == 2
