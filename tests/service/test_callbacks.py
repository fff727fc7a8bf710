"""Callbacks and the output layout behave as with Hydra's basic launcher: the
app's ``on_job_start``/``on_job_end`` run for every point, in the job, and each point's files
are under ``multirun/<date>/<time>/<num>/``."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[1] / "apps" / "callbacks_app.py"


def launch(tmp_path: Path, launcher: str) -> tuple[subprocess.CompletedProcess, Path]:
    marks = tmp_path / "marks"
    marks.mkdir()
    overrides = [f"hydra/launcher={launcher}", f"mark_dir={marks}", "x=1,2"]
    if launcher != "basic":
        overrides += ["hydra.launcher.collection=callbacks", "hydra.launcher.timeout_min=5"]
    proc = subprocess.run(
        [sys.executable, str(APP), "-m", *overrides],
        cwd=tmp_path,
        env={**os.environ, "HYDRA_FULL_ERROR": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc, marks


@pytest.mark.parametrize(
    "launcher",
    [
        "basic",
        "seml_local",
        pytest.param("seml", marks=pytest.mark.slurm),
    ],
)
def test_callbacks_run_per_point_and_outputs_are_under_multirun_date_time_num(
    launcher, request, test_db, tmp_path
):
    if launcher == "seml":
        request.getfixturevalue("slurm")
    proc, marks = launch(tmp_path, launcher)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in marks.iterdir()) == ["end_1", "end_2", "start_1", "start_2"]
    assert (marks / "end_1").read_text() == "2" and (marks / "end_2").read_text() == "4"
    sweeps = list((tmp_path / "multirun").glob("*/*"))  # multirun/<date>/<time>
    assert len(sweeps) == 1, sweeps
    for num in ("0", "1"):
        point = sweeps[0] / num
        assert (point / ".hydra" / "config.yaml").is_file(), sorted(sweeps[0].rglob("*"))
    # on_job_start runs where the basic launcher runs it: the launch dir (hydra.job.chdir is
    # false with version_base=None), not the submitit folder or the snapshot
    started = {Path((marks / f"start_{x}").read_text()).resolve() for x in (1, 2)}
    assert started == {tmp_path.resolve()}
    if launcher != "basic":
        assert test_db["callbacks"].count_documents({"status": "COMPLETED"}) == 2
