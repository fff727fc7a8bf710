"""Slurm resources per sweep point: one array per resource set, presets as a config group, arrays
cut at the cluster's MaxArraySize (the testbed sets it to 8), reserved sbatch options refused."""

from __future__ import annotations

import subprocess

from support.run import run_app, run_points, seml_ok
from support.wait import wait_until

from seml_hydra.slurm.client import max_array_size, scontrol_show_job

FAST = ["hydra.launcher.poll_interval_s=0.3"]


def arrays_of(collection) -> dict[int, list[dict]]:
    """``{array id: [documents]}``."""
    arrays: dict[int, list[dict]] = {}
    for doc in collection.find():
        arrays.setdefault(doc["slurm"][0]["array_id"], []).append(doc)
    return arrays


def test_sweep_over_two_resource_presets_makes_two_arrays_with_their_own_options(
    slurm, test_db, tmp_path
):
    proc = run_app(
        "train.py", "-m", "hydra/launcher=seml", "+slurm=cpu,multinode", *FAST, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    arrays = arrays_of(test_db["train"])
    assert len(arrays) == 2
    seen = {}
    for array_id, docs in arrays.items():
        (doc,) = docs
        assert doc["status"] == "COMPLETED"
        job = scontrol_show_job(str(array_id))[0]
        preset = doc["hydra"]["choices"]["slurm"]
        seen[preset] = (job["NumNodes"], doc["slurm"][0]["sbatch_options"])
        assert job["Comment"] == "train"
    assert seen["cpu"][0] == "1" and seen["multinode"][0] == "2"
    assert seen["cpu"][1]["cpus-per-task"] == 2 and seen["cpu"][1]["mem"] == "4G"
    assert seen["multinode"][1]["nodes"] == 2 and seen["multinode"][1]["ntasks"] == 2


def test_tasks_per_node_per_point_gives_one_array_with_one_task_and_one_with_two(
    slurm, test_db, tmp_path
):
    """Hydra refuses ``hydra.launcher.tasks_per_node=1,2`` itself (hydra.* keys cannot be swept:
    ``ConfigLoaderImpl.validate_sweep_overrides_legal``); the app's config makes the launcher
    read an app value, ``ntasks``, which is swept instead."""
    import sys

    from support.paths import ROOT

    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests/apps/tasks_app.py"),
            "-m",
            "hydra/launcher=seml",
            "ntasks=1,2",
            *FAST,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    arrays = arrays_of(test_db["tasks_app"])
    assert len(arrays) == 2
    tasks = {
        docs[0]["config"]["ntasks"]: scontrol_show_job(str(a))[0]["NumTasks"]
        for a, docs in arrays.items()
    }
    assert tasks == {1: "1", 2: "2"}
    results = {d["config"]["ntasks"]: d["result"] for d in test_db["tasks_app"].find()}
    assert results == {1: 1, 2: 2}


def test_sweep_larger_than_max_array_size_is_split_saying_why_and_all_points_run(
    slurm, test_db, tmp_path
):
    limit = max_array_size()
    assert limit == 8, "the testbed sets MaxArraySize=8 (tools/testbed/slurm.conf)"
    proc = run_points(10, *FAST, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr  # one "Submitted" line per array, each saying why
    for k in (1, 2):
        assert f"array {k} of 2: Slurm's MaxArraySize (8) allows at most 8 tasks" in out, out
    arrays = arrays_of(test_db["fail"])
    assert sorted(len(docs) for docs in arrays.values()) == [2, 8]
    assert test_db["fail"].count_documents({"status": "COMPLETED"}) == 10


def test_seml_start_of_more_than_max_array_size_says_why_it_makes_several_arrays(
    slurm, test_db, tmp_path
):
    """``seml <col> start`` cuts arrays at MaxArraySize as the launcher does; its "Started"
    lines say so too (they were two bare lines, as the launcher's were before)."""
    proc = run_points(10, *FAST, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    seml_ok("fail", "reset", "-s", "COMPLETED", "-y")
    out = seml_ok("fail", "start")
    for k, ids in ((1, "1-8"), (2, "9-10")):
        assert f"({ids}) as slurm job " in out, out
        assert f"array {k} of 2: Slurm's MaxArraySize (8) allows at most 8 tasks" in out, out
    wait_until(
        "the restarted experiments complete",
        lambda: test_db["fail"].count_documents({"status": "COMPLETED"}) == 10,
        timeout=120,
    )


def test_array_parallelism_holds_for_the_whole_sweep_when_it_is_split(slurm, test_db, tmp_path):
    """``array_parallelism=1`` over 10 points (arrays of 8 and 2): Slurm's ``%1`` throttles
    within one array only, so the second array ran beside the first; now it waits for it
    (``afterany``), and no task of it starts before the first array's last task ended."""
    proc = run_points(10, "hydra.launcher.array_parallelism=1", *FAST, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert test_db["fail"].count_documents({"status": "COMPLETED"}) == 10
    arrays = arrays_of(test_db["fail"])
    first, second = sorted(arrays, key=lambda a: len(arrays[a]), reverse=True)  # 8, then 2
    assert_one_after_another(first, second)


def assert_one_after_another(first: int, second: int) -> None:
    """No task of array ``second`` started before the last task of array ``first`` ended
    (sacct, whole seconds)."""
    from seml_hydra.slurm.client import sacct_jobs

    ended = max(row.end for row in sacct_jobs([str(first)]))
    started = min(row.start for row in sacct_jobs([str(second)]))
    assert started >= ended, (started, ended)


def test_array_parallelism_holds_across_resource_groups(slurm, test_db, tmp_path):
    """``ntasks=1,2`` are two resource groups, two arrays; with ``array_parallelism=1`` the
    second waits for the first as a split array does (second attacker, session 7: each group
    had its own limit, and a task of each ran at once)."""
    from support.paths import ROOT
    from support.run import run_python

    proc = run_python(
        str(ROOT / "tests/apps/tasks_app.py"),
        "-m",
        "hydra/launcher=seml",
        "ntasks=1,2",
        "hydra.launcher.array_parallelism=1",
        *FAST,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    first, second = sorted(arrays_of(test_db["tasks_app"]))  # in submission order
    assert_one_after_another(first, second)
    # each "Submitted" line says which group it is (they differed only in the job id)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("Submitted")]
    assert len(lines) == 2 and "ntasks=1" in lines[0] and "ntasks=2" in lines[1], lines


def test_reserved_sbatch_option_is_refused_before_staging(test_db, tmp_path):
    proc = run_app(
        "fail.py",
        "-m",
        "hydra/launcher=seml_local",
        "+hydra.launcher.additional_parameters.comment=mine",
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    assert "additional_parameters sets comment" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert test_db["fail"].count_documents({}) == 0
