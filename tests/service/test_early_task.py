"""Around sbatch: a task that Slurm starts before submitit has created its output folder
(hydra-ecosystem/hydra#2100; seen in CI: an idle node started both tasks 10 ms after sbatch,
Slurm 22.05 failed them with "Could not open stdout file"), and an array whose submission is
interrupted after sbatch created it. Arrays are submitted with a start time a minute ahead,
brought forward once the folders exist (``launch.submit.deferred_start``); an interrupted
submission cancels its array (``launch.submit.cancel_unrecorded_array``)."""

import textwrap

import pytest
from support.paths import ROOT
from support.run import run_python

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


def test_a_refused_submission_leaves_another_databases_array_of_the_same_name_alone(
    test_db, tmp_path
):
    """The same collection, batch 1 and submitit folder in two databases (a debug and a real
    one): a launch in the second that sbatch refuses (an unknown partition) made no array, and
    must not cancel the first one's, which is running or waiting (attacker finding, session 7:
    it was cancelled as "submitted by a process that died")."""
    import subprocess

    from support.mongo import MONGO_URL

    folder = str(tmp_path / "shared" / "%j")
    other = f"{test_db.name}_other"
    common = ["-m", "hydra/launcher=seml", "hydra.launcher.collection=twin"]
    common += [f"hydra.launcher.submitit_folder={folder}", "x=1"]
    first = run_python(
        str(ROOT / "examples" / "fail.py"),
        *common,
        "hydra.launcher.wait=false",
        "+hydra.launcher.additional_parameters.hold=true",
        env={"SEML_MONGODB_URI": f"{MONGO_URL}/{other}"},
        cwd=tmp_path,
    )
    client = test_db.client
    try:
        assert first.returncode == 0, first.stderr
        array = str(client[other]["twin"].find_one()["slurm"][0]["array_id"])
        refused = run_python(
            str(ROOT / "examples" / "fail.py"),
            *common,
            "hydra.launcher.partition=nosuchpart",
            cwd=tmp_path,
        )
        assert refused.returncode == 1 and "invalid partition" in refused.stderr
        assert "Cancelled Slurm array" not in refused.stderr + refused.stdout
        queued = subprocess.run(
            ["squeue", "-h", "-j", array, "-o", "%T"], capture_output=True, text=True
        ).stdout
        assert "PENDING" in queued, queued
    finally:
        for doc in client[other]["twin"].find({"slurm.0.array_id": {"$exists": True}}):
            subprocess.run(["scancel", str(doc["slurm"][0]["array_id"])], check=False)
        client.drop_database(other)
