"""Another local user cannot run code as you through the sweep dir or the submitit folder: the
launcher refuses, before staging, a sweep dir or submitit folder another user could redirect,
and a job refuses a pickle that another user could have written (real mongod, Slurm testbed,
a second local user)."""

from __future__ import annotations

import pickle
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest
from support.mongo import statuses
from support.run import launch_gate, run_app
from support.slurm import squeue_tasks
from support.wait import wait_until

pytestmark = pytest.mark.slurm


@pytest.fixture
def shared_tmp():
    """A fresh directory right under /tmp (where other users can reach it), removed after."""
    path = Path("/tmp") / f"seml-hydra-shared-{secrets.token_hex(4)}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("owner", ["other", "me"])
def test_a_sweep_dir_another_user_can_change_is_refused_before_staging(
    slurm, test_db, tmp_path, shared_tmp, other_user, owner
):
    if owner == "other":  # /tmp/multirun made first by another user (mode 0755)
        other_user.run("mkdir", "-m", "0755", str(shared_tmp), check=True)
        why = f"{shared_tmp} is a directory of another user (uid {other_user.uid})"
    else:  # a directory of yours that every user can write (mode 0777, no sticky bit)
        shared_tmp.mkdir()
        shared_tmp.chmod(0o777)
        why = f"{shared_tmp} is a directory every user can write (mode 0777, no sticky bit)"
    proc = launch_gate(
        tmp_path, "x=1,2", f"hydra.sweep.dir={shared_tmp}/multirun", "gate=", check=False
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert why in proc.stderr and "hydra.sweep.dir=" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert test_db["gate"].count_documents({}) == 0  # nothing staged, nothing submitted


def test_a_submitit_folder_another_user_can_change_is_refused_before_staging(
    slurm, test_db, tmp_path, shared_tmp
):
    shared_tmp.mkdir()
    shared_tmp.chmod(0o777)
    proc = launch_gate(
        tmp_path, "x=1", f"hydra.launcher.submitit_folder={shared_tmp}/%j", "gate=", check=False
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (
        "hydra.launcher.submitit_folder=" in proc.stderr and "every user can write" in proc.stderr
    )
    assert test_db["gate"].count_documents({}) == 0


class _Forged:
    """What another user's pickle does when loaded: writes the file ``marker``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (Path(self.marker), "ran as the job's user"))


def test_a_job_refuses_a_pickle_another_user_could_have_written(
    slurm, test_db, tmp_path, other_user
):
    # launched held, so the pickle can be swapped before the job starts, as the attacker did
    launch_gate(tmp_path, "x=1", "gate=", "+hydra.launcher.additional_parameters.hold=true")
    coll = test_db["gate"]
    array = coll.find_one({"_id": 1})["slurm"][0]["array_id"]
    [submitted] = list(tmp_path.glob("multirun/**/.submitit/**/*_submitted.pkl"))
    marker = tmp_path / "forged-code-ran"
    submitted.write_bytes(pickle.dumps(_Forged(str(marker))))
    # the other user's file (they could write it through a folder of theirs)
    subprocess.run(["chown", str(other_user.uid), str(submitted)], check=True)
    subprocess.run(["scontrol", "release", str(array)], check=True)
    wait_until("the job ends", lambda: squeue_tasks(array) == {})
    assert not marker.exists()  # the forged pickle was never loaded
    logs = "".join(p.read_text() for p in submitted.parent.glob("*_log.*"))
    assert f"not loading the job's pickle {submitted}" in logs
    assert f"belongs to another user (uid {other_user.uid})" in logs
    assert statuses(coll)[1] != "COMPLETED"


def test_a_job_does_not_write_into_a_sweep_dir_others_can_write_since_the_launch(
    slurm, test_db, tmp_path
):
    jobs = tmp_path / "jobs"
    launch_gate(
        tmp_path,
        "x=1",
        "gate=",
        f"hydra.launcher.submitit_folder={jobs}/%j",
        "+hydra.launcher.additional_parameters.hold=true",
    )
    coll = test_db["gate"]
    array = coll.find_one({"_id": 1})["slurm"][0]["array_id"]
    sweep_dir = tmp_path / "multirun"
    [day] = list(sweep_dir.iterdir())
    day.chmod(0o777)  # made writable by every user after the launch checked it
    subprocess.run(["scontrol", "release", str(array)], check=True)
    wait_until("experiment 1 ends", lambda: statuses(coll)[1] in ("COMPLETED", "FAILED"))
    assert statuses(coll)[1] == "FAILED"
    trace = "".join(coll.find_one({"_id": 1})["fail_trace"])
    assert f"{day} is a directory every user can write (mode 0777, no sticky bit)" in trace
    assert not list(day.rglob(".hydra"))  # Hydra wrote nothing there


PLANTED = (
    "import pathlib, os\npathlib.Path(os.environ['PWNED']).write_text('ran as the job user')\n"
)


def test_a_module_planted_in_the_launch_directory_never_runs_in_a_job(
    slurm, test_db, tmp_path, shared_tmp, other_user
):
    """A launch from a directory every user may add files to (sticky, as /tmp) is refused;
    one opened to them after the launch: another user's ``seml_hydra``, ``submitit`` and
    ``multiprocessing`` packages there are not what the job imports (``python -m`` would put
    the directory first on ``sys.path``), nor what the processes its task starts import."""
    shared_tmp.mkdir()
    shared_tmp.chmod(0o1777)
    pwned = tmp_path / "pwned"
    env = {"PWNED": str(pwned)}
    sweep = f"hydra.sweep.dir={tmp_path}/multirun"
    for launcher in ("seml", "seml_local"):
        refused = run_app("fail.py", "-m", f"hydra/launcher={launcher}", "fail_on=-1", "x=1",
                          sweep, cwd=shared_tmp, env=env)  # fmt: skip
        assert refused.returncode == 1 and "Not launching from here" in refused.stderr
    assert test_db["fail"].count_documents({}) == 0
    shared_tmp.chmod(0o755)  # a directory of yours at launch time...
    held = run_app("fail.py", "-m", "hydra/launcher=seml", "fail_on=-1", "x=1", sweep,
                   "hydra.launcher.wait=false", "+hydra.launcher.additional_parameters.hold=true",
                   cwd=shared_tmp, env=env)  # fmt: skip
    assert held.returncode == 0, held.stdout + held.stderr
    shared_tmp.chmod(0o1777)  # ... that every user may add files to before the job starts
    for package in ("seml_hydra", "submitit"):
        other_user.run("mkdir", str(shared_tmp / package), check=True)
        other_user.run(
            "sh", "-c", f"cat > {shared_tmp / package}/__init__.py", input=PLANTED, check=True
        )
    array = test_db["fail"].find_one({"_id": 1})["slurm"][0]["array_id"]
    subprocess.run(["scontrol", "release", str(array)], check=True)
    wait_until("the job ends", lambda: squeue_tasks(array) == {})
    assert statuses(test_db["fail"]) == {1: "COMPLETED"}
    assert not pwned.exists()


def test_seml_start_refuses_a_sweep_dir_others_can_write_since_the_launch(slurm, test_db, tmp_path):
    from typer.testing import CliRunner

    from seml_hydra.cli import app

    jobs = tmp_path / "jobs"
    launch_gate(
        tmp_path, "x=1", "gate=", f"hydra.launcher.submitit_folder={jobs}/%j",
        "+hydra.launcher.additional_parameters.hold=true",
    )  # fmt: skip
    runner = CliRunner()
    for args in (["gate", "cancel", "-y"], ["gate", "reset", "-y"]):
        assert runner.invoke(app, args, prog_name="seml").exit_code == 0
    assert statuses(test_db["gate"]) == {1: "STAGED"}
    [day] = list((tmp_path / "multirun").iterdir())
    day.chmod(0o777)
    result = runner.invoke(app, ["gate", "start"], prog_name="seml")
    assert result.exit_code == 1, result.output
    assert "hydra.sweep.dir=" in result.output and "every user can write" in result.output
    assert statuses(test_db["gate"]) == {1: "STAGED"}  # nothing submitted
