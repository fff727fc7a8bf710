"""Around sbatch: a task that Slurm starts before submitit has created its output folder
(hydra-ecosystem/hydra#2100; seen in CI: an idle node started both tasks 10 ms after sbatch,
Slurm 22.05 failed them with "Could not open stdout file"), and an array whose submission is
interrupted after sbatch created it. Arrays are submitted with a start time a minute ahead,
brought forward once the folders exist (``launch.submit.deferred_start``); an interrupted
submission cancels its array (``launch.submit.cancel_unrecorded_array``)."""

import textwrap

import pytest
from conftest import ROOT, run_python

pytestmark = [pytest.mark.slurm, pytest.mark.mongo]


def test_tasks_started_before_their_output_folder_exists_still_run(test_db, tmp_path):
    wrapper = tmp_path / "late_folders.py"
    wrapper.write_text(
        textwrap.dedent(
            """
            import runpy, sys, time
            from submitit.core import utils

            original = utils.JobPaths.move_temporary_file

            def late(self, *args, **kwargs):  # the folder appears 5 s after sbatch returned
                time.sleep(5)
                return original(self, *args, **kwargs)

            utils.JobPaths.move_temporary_file = late
            app = sys.argv[1]
            sys.argv = sys.argv[1:]
            runpy.run_path(app, run_name="__main__")
            """
        )
    )
    proc = run_python(
        str(wrapper),
        str(ROOT / "examples" / "fail.py"),
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.collection=early",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "x=1,3",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    docs = list(test_db["early"].find({}, {"status": 1, "result": 1}))
    assert sorted((d["status"], d["result"]) for d in docs) == [
        ("COMPLETED", 10),
        ("COMPLETED", 30),
    ]
    # the documents record the options the user gave, not the submission's own start time
    assert "begin" not in test_db["early"].find_one()["slurm"][0]["sbatch_options"]


def test_an_array_created_by_an_interrupted_submission_is_cancelled(test_db, tmp_path):
    """Ctrl-C after sbatch created the array but before submitit handed the job back (here:
    while submitit moves the first job file): the experiments go back to STAGED, and the array,
    which no document records, is cancelled, instead of starting at its deferred begin time and
    failing on experiments no longer PENDING (attacker finding, session 7)."""
    import subprocess

    wrapper = tmp_path / "interrupted.py"
    wrapper.write_text(
        textwrap.dedent(
            """
            import runpy, sys
            from submitit.core import utils

            def interrupted(self, *args, **kwargs):  # sbatch has returned: the array exists
                raise KeyboardInterrupt

            utils.JobPaths.move_temporary_file = interrupted
            app = sys.argv[1]
            sys.argv = sys.argv[1:]
            runpy.run_path(app, run_name="__main__")
            """
        )
    )
    collection = f"interrupted_{tmp_path.name}"[-60:]
    proc = run_python(
        str(wrapper),
        str(ROOT / "examples" / "fail.py"),
        "-m",
        "hydra/launcher=seml",
        f"hydra.launcher.collection={collection}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "x=1,3",
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    assert sorted(d["status"] for d in test_db[collection].find()) == ["STAGED", "STAGED"]
    queued = subprocess.run(
        ["squeue", "-h", "-a", "-o", "%i %k %T"], capture_output=True, text=True, check=True
    ).stdout
    assert collection not in queued, queued
