"""The job's start-up (issue 20 point 3): Python's cyclic garbage collector is off from the
runner's call to the first task, which starts with it on and the start-up's objects frozen
(``seml_hydra.job.collector``); the experiment completes as before. Runs the job code through
``hydra/launcher=seml_local`` (the same ``JobRunner`` as a Slurm job, in a process of its own)."""

from __future__ import annotations

from conftest import run_app


def test_the_task_starts_with_the_collector_on_and_the_start_up_frozen(test_db, tmp_path):
    proc = run_app(
        "../tests/apps/gc_app.py", "-m", "hydra/launcher=seml_local", "x=1", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = test_db["gc_app"].find_one({"config.x": 1})
    assert doc["status"] == "COMPLETED", doc.get("fail_trace")
    # collector on, start-up frozen, and the task's own cyclic garbage is collected
    assert doc["result"] == [True, True, True]
