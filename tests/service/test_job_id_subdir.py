"""``hydra.sweep.subdir=${hydra.job.num}_${hydra.job.id}`` (hydra-submitit-launcher users'
usual subdir) on the Slurm testbed: as under hydra-submitit-launcher, each job's output dir is
named with its Slurm ``<array>_<task>`` id, and the document records the resolved directory
when the job starts."""

from __future__ import annotations

from support.run import run_app


def test_the_slurm_job_id_in_the_sweep_subdir_names_each_jobs_output_dir(slurm, test_db, tmp_path):
    proc = run_app(
        "fail.py",
        "-m",
        "hydra/launcher=seml",
        "fail_on=-1",
        "x=1,2",
        "hydra.launcher.poll_interval_s=0.3",
        f"hydra.sweep.dir={tmp_path}/multirun",
        "hydra.sweep.subdir=${hydra.job.num}_${hydra.job.id}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    docs = sorted(test_db["fail"].find(), key=lambda d: d["_id"])
    assert [d["status"] for d in docs] == ["COMPLETED", "COMPLETED"]
    for num, doc in enumerate(docs):
        job_id = doc["hydra"]["job_id"]
        assert "_" in job_id  # <array>_<task>
        output_dir = tmp_path / "multirun" / f"{num}_{job_id}"
        assert doc["hydra"]["output_dir"] == str(output_dir)
        saved = (output_dir / ".hydra" / "hydra.yaml").read_text()
        assert f"id: '{job_id}'" in saved and "seml-job-id" not in saved
        assert (output_dir / "fail.log").exists()
