"""The experiment's seed in ``config.seed``, as Sacred keeps it (Omniboard shows
``config.seed``), while the task's cfg stays the app's own: an app without a ``seed`` key never
sees one, an app with one sees its own value, which is the experiment's seed."""

from __future__ import annotations

import subprocess
from pathlib import Path

from support.run import run_app


def run_seed_app(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return run_app(
        "../tests/apps/seed_app.py",
        "-m",
        "hydra/launcher=seml_local",
        "hydra.launcher.poll_interval_s=0.3",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        *args,
        cwd=tmp_path,
        check=True,
    )


def test_an_app_without_a_seed_key_has_config_seed_stored_and_not_in_its_cfg(test_db, tmp_path):
    run_seed_app(tmp_path, "x=3")
    (doc,) = test_db["seed_app"].find()
    assert isinstance(doc["seed"], int)
    assert doc["config"] == {"x": 3, "seed": doc["seed"]}
    assert doc["result"] == {"cfg": {"x": 3}, "plan_seed": doc["seed"]}
    # the drawn seed is not part of the experiment's identity: the same point is not staged again
    again = run_seed_app(tmp_path, "x=3")
    assert test_db["seed_app"].count_documents({}) == 1, again.stdout


def test_an_app_with_its_own_seed_key_keeps_it_and_it_is_the_experiments_seed(test_db, tmp_path):
    run_seed_app(tmp_path, "x=3", "+seed=5")
    (doc,) = test_db["seed_app"].find()
    assert doc["seed"] == 5
    assert doc["config"] == {"x": 3, "seed": 5}
    assert doc["result"] == {"cfg": {"x": 3, "seed": 5}, "plan_seed": 5}
