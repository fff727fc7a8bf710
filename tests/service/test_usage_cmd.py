"""``seml <col> usage`` and the waiting launcher's right-sizing line, on the Slurm testbed with
its accounting (sacct) and a real mongod: an over-sized request is told, with a suggestion."""

from __future__ import annotations

import json

import pytest
from support.run import run_app, run_points, seml_ok

pytestmark = pytest.mark.slurm


def test_an_oversized_request_is_told_by_the_launcher_and_usage(slurm, test_db, tmp_path):
    proc = run_points(3, "hydra.launcher.mem_gb=2", "hydra.launcher.timeout_min=60", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "used less than a quarter of its request (memory " in proc.stdout
    assert "`seml fail usage` suggests smaller requests." in proc.stdout
    [group] = json.loads(seml_ok("fail", "usage", "--format", "json"))
    assert group["experiments"] == group["ran"] == 3
    # the types the documents and sbatch use: array ids and CPU/GPU counts are integers
    array = test_db["fail"].find_one({"_id": 1})["slurm"][0]["array_id"]
    assert group["arrays"] == [array] and isinstance(array, int)
    assert type(group["requested"]["cpus"]) is int  # gpus: null, none allocated here
    assert group["requested"]["mem_mb"] == 2048 and group["requested"]["time_min"] == 60
    assert 0 < group["used"]["max_rss_mb"] < 512 and group["used"]["elapsed_min"] < 5
    assert group["suggested"]["mem_mb"] == 1024 and group["suggested"]["time_min"] == 5
    assert group["advice"][0].startswith("mem_gb: 2 -> 1: largest ")
    table = seml_ok("fail", "usage", "-v")
    assert "timeout_min: 60 -> 5: longest " in table
    assert table.count("(COMPLETED)") == 3  # one row per experiment with -v
    markdown = seml_ok("fail", "usage", "-f", "markdown")
    assert "| batch | arrays |" in markdown
    # the suggestions are a list after a blank line, not rows of the table (GitHub's tables
    # go on until a blank line)
    assert "|\n\n- batch 1 [" in markdown and "\nbatch 1 [" not in markdown


def test_a_launch_that_ran_nothing_new_gets_no_line_about_earlier_batches(slurm, test_db, tmp_path):
    """The same sweep launched again: every point is skipped as COMPLETED, nothing is
    submitted, and the first launch's over-sized batch is not told again (it was, each time)."""
    args = ("hydra.launcher.mem_gb=2", "hydra.launcher.timeout_min=60")
    first = run_points(2, *args, cwd=tmp_path)
    assert "used less than a quarter of its request" in first.stdout, first.stdout
    again = run_points(2, *args, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Skipped 2 point(s) already in the collection as COMPLETED" in again.stdout
    assert "less than a quarter" not in again.stdout, again.stdout


def test_a_launch_that_waits_for_points_an_earlier_one_left_running_gets_the_line(
    slurm, test_db, tmp_path
):
    """wait=false (or Ctrl-C, which detaches), then the same sweep again: the second launch
    waits for the RUNNING points until they end, so it is the one to tell their over-sized
    request (the first never saw them end); only points already COMPLETED are left out."""
    args = (
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.collection=sleep",
        "hydra.launcher.snapshot=false",
        "hydra.launcher.poll_interval_s=0.3",
        "hydra.launcher.mem_gb=2",
        "hydra.launcher.timeout_min=60",
        "seconds=4,5",
    )
    first = run_app("../tests/apps/sleep_app.py", *args, "hydra.launcher.wait=false", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "less than a quarter" not in first.stdout
    again = run_app("../tests/apps/sleep_app.py", *args, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Skipped 2 point(s) already in the collection as" in again.stdout, again.stdout
    assert "(waiting for them)" in again.stdout, again.stdout
    assert "Batch 1 (array " in again.stdout and "less than a quarter" in again.stdout, again.stdout


def test_a_request_that_fits_gets_no_line(slurm, test_db, tmp_path):
    proc = run_points(1, "hydra.launcher.mem_gb=null", "hydra.launcher.timeout_min=1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "less than a quarter" not in proc.stdout
