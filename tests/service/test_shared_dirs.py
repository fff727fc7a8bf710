"""Another local user cannot run code as you through the sweep dir or the submitit folder: the
launcher refuses, before staging, a sweep dir or submitit folder another user could redirect,
and a job refuses a pickle that another user could have written (real mongod, Slurm testbed,
a second local user)."""

from __future__ import annotations

import os
import pickle
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.mongo import statuses
from support.paths import GATE_APP, ROOT
from support.run import launch_gate, run_app, seml_ok
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


def test_a_default_acl_for_another_user_on_the_sweep_dir_is_refused_before_anything_is_written(
    slurm, test_db, tmp_path, other_user
):
    """``setfacl -d -m u:<other>:rwx`` on the project folder: every directory and pickle the
    launch would make below it would be theirs to write too."""
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["setfacl", "-d", "-m", f"u:{other_user.name}:rwx", str(project)], check=True)
    proc = launch_gate(tmp_path, "x=1", f"hydra.sweep.dir={project}/multirun", "gate=", check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if "Error:" in x]
    assert f"{project} has a default ACL that lets other users write what is made in it " in line
    assert f"(default:user:{other_user.name}:rwx)" in line and "Traceback" not in proc.stderr
    assert list(project.iterdir()) == []  # nor multirun.yaml: judged before Hydra writes it
    assert test_db["gate"].count_documents({}) == 0


def test_a_sweep_dir_others_can_write_gets_no_multirun_yaml(slurm, test_db, tmp_path, shared_tmp):
    shared_tmp.mkdir()
    shared_tmp.chmod(0o777)
    proc = launch_gate(tmp_path, "x=1", f"hydra.sweep.dir={shared_tmp}/multirun", "gate=",
                       check=False)  # fmt: skip
    assert proc.returncode == 1 and "every user can write" in proc.stderr
    assert list(shared_tmp.iterdir()) == []  # Hydra's sweeper never made the sweep dir


SITECUSTOMIZE = (
    "import os, pathlib\n"
    "if os.environ.get('SEML_HYDRA_DB_URL') or os.environ.get('SUBMITIT_FOLDER'):\n"
    "    pathlib.Path(os.environ['PWNED']).write_text('ran as the job user')\n"
)


@pytest.mark.parametrize("variable", ["PYTHONPATH", "PATH", "LD_LIBRARY_PATH"])
def test_a_search_path_entry_another_user_can_fill_is_refused_at_launch(
    slurm, test_db, tmp_path, shared_tmp, other_user, variable
):
    """Another user's folder (or one they may add files to) on the PYTHONPATH, PATH or
    LD_LIBRARY_PATH the jobs inherit: their ``sitecustomize.py``, ``python3`` or a shared
    library the job's interpreter loads (``libbz2.so.1.0``, loaded when the job imports
    ``bz2``: its constructor runs as the job's user) would run in every job."""
    other_user.run("mkdir", "-m", "1777", str(shared_tmp), check=True)
    other_user.run("sh", "-c", f"cat > {shared_tmp}/sitecustomize.py", input=SITECUSTOMIZE,
                   check=True)  # fmt: skip
    pwned = tmp_path / "pwned"
    value = f"{shared_tmp}:{os.environ.get(variable, '')}".rstrip(":")
    proc = run_app(GATE_APP, "-m", "hydra/launcher=seml", "hydra.launcher.wait=false", "x=1",
                   "gate=", cwd=tmp_path, env={variable: value, "PWNED": str(pwned)})  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if "Error:" in x]
    assert (
        f"{variable} entry '{shared_tmp}': {shared_tmp} is a directory other users can add" in line
    )
    assert test_db["gate"].count_documents({}) == 0 and not pwned.exists()


def test_a_umask_that_lets_others_write_still_makes_private_job_files(slurm, test_db, tmp_path):
    """``umask 000``: the sweep dir, submitit's folders and pickles, Hydra's ``.hydra/`` and
    the job's log files are made without write for other users all the same (the jobs run).
    The group keeps its write here: root's group is its own (``core.jobenv.private_umask``)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / GATE_APP), "-m", "hydra/launcher=seml",
         "x=1", "gate="],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, umask=0o000,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert statuses(test_db["gate"]) == {1: "COMPLETED"}
    made = [p for p in (tmp_path / "multirun").rglob("*")]
    names = {p.name for p in made}
    assert {"multirun.yaml", "config.yaml", ".hydra", ".submitit"} <= names
    assert any(n.endswith("_submitted.pkl") for n in names)
    assert any(n.endswith(".out") for n in names)
    open_to_others = [f"{p} {p.stat().st_mode & 0o777:04o}" for p in [tmp_path / "multirun", *made]
                      if p.stat().st_mode & 0o002]  # fmt: skip
    assert open_to_others == []


PY310 = Path("/root/.pyenv/versions/3.10.13/bin/python")


def test_a_job_on_python_3_10_refuses_a_working_directory_opened_since_the_launch(
    slurm, test_db, tmp_path
):
    """Python 3.10 ignores PYTHONSAFEPATH: a job whose working directory became one others can
    add files to cannot keep it off the import path of the processes its task starts."""
    assert PY310.exists(), "the 3.10 interpreter of this machine"
    wrapper = tmp_path / "py310"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={ROOT} exec {PY310} "$@"\n')
    wrapper.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    proc = run_app(GATE_APP, "-m", "hydra/launcher=seml", "hydra.launcher.wait=false", "x=1",
                   "gate=", f"hydra.launcher.python={wrapper}",
                   f"hydra.sweep.dir={tmp_path}/multirun",
                   "+hydra.launcher.additional_parameters.hold=true", cwd=work)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    array = test_db["gate"].find_one({"_id": 1})["slurm"][0]["array_id"]
    work.chmod(0o1777)  # every user may add files there now
    subprocess.run(["scontrol", "release", str(array)], check=True)
    wait_until("the job ends", lambda: squeue_tasks(array) == {})
    logs = "".join(p.read_text() for p in tmp_path.glob("multirun/**/.submitit/**/*_log.err"))
    assert "seml-hydra: not starting the job: Python 3.10 ignores PYTHONSAFEPATH, and" in logs
    assert f"{work} is a directory other users can add files to (mode 1777)" in logs


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_submitit_folder_gone_before_the_job_starts_ends_its_experiment_with_a_reason(
    slurm, test_db, tmp_path, how
):
    """Deleted: Slurm cannot open the job's output there and fails it; replaced (made again
    empty): the job finds no pickle. Either way the experiment ends KILLED, and its trace
    says what happened to the folder instead of a traceback."""
    launch_gate(tmp_path, "x=1", "gate=", "+hydra.launcher.additional_parameters.hold=true")
    coll = test_db["gate"]
    array = coll.find_one({"_id": 1})["slurm"][0]["array_id"]
    [folder] = list(tmp_path.glob("multirun/**/.submitit"))
    shutil.rmtree(folder)
    job_folder = folder / f"{array}_0"
    if how == "replaced":
        job_folder.mkdir(parents=True, mode=0o700)
    subprocess.run(["scontrol", "release", str(array)], check=True)
    wait_until("the job ends", lambda: squeue_tasks(array) == {})
    seml_ok("gate", "status")  # detects the dead job
    doc = coll.find_one({"_id": 1})
    assert doc["status"] == "KILLED"
    trace = "".join(doc["fail_trace"])
    assert "Traceback" not in trace
    # the folder of the array's sbatch script: the reason names it
    assert f"the job's submitit folder {folder / str(array)} is gone (deleted or replaced" in trace
    if how == "replaced":
        log = (job_folder / f"{array}_0_0_log.out").read_text()
        assert log.startswith(f"seml-hydra: the job's pickle {job_folder}/{array}_0_submitted")
        assert "Traceback" not in (job_folder / f"{array}_0_0_log.err").read_text()


def test_a_job_folder_another_user_made_first_in_tmp_cancels_the_array_before_it_starts(
    slurm, test_db, tmp_path, other_user
):
    """``submitit_folder=/tmp/<name>-%j``: /tmp is fine at launch (sticky), but another user
    can make ``/tmp/<name>-<next job id>_0`` first, with a link where Slurm will write the
    job's output. submitit then moves the pickle into their folder: the launcher sees it
    before the array starts, cancels it, and nothing is written through the link."""
    name = f"/tmp/seml-hydra-race-{secrets.token_hex(4)}"
    victim = tmp_path / "victim-file"
    victim.write_text("precious\n")
    tmp_path.chmod(0o755)  # the link's target must be reachable for the attack to matter
    probe = subprocess.run(  # the latest job id: the next ones follow it
        ["sbatch", "--parsable", "--hold", "--wrap=true"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    subprocess.run(["scancel", probe], check=True)
    first = int(probe.split(";")[0])
    script = (
        f"for i in $(seq {first + 1} {first + 300}); do mkdir -m 0777 {name}-${{i}}_0 && "
        f"ln -s {victim} {name}-${{i}}_0/${{i}}_0_0_log.out; done"
    )
    try:
        other_user.run("sh", "-c", script, check=True, timeout=120)
        proc = launch_gate(tmp_path, "x=1", "gate=", f"hydra.launcher.submitit_folder={name}-%j",
                           check=False)  # fmt: skip
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert f"is a directory of another user (uid {other_user.uid})" in proc.stderr
        assert "the array was cancelled before it started" in proc.stderr
        assert statuses(test_db["gate"]) == {1: "STAGED"}
        array = test_db["gate"].find_one({"_id": 1})["slurm"][0].get("array_id")
        assert array is None
        assert victim.read_text() == "precious\n"
    finally:
        subprocess.run(f"rm -rf {name}-*", shell=True, check=False)


def test_a_job_refuses_a_pythonpath_entry_opened_to_others_since_the_launch(
    slurm, test_db, tmp_path, shared_tmp, other_user
):
    """The jobs inherit the launch's PYTHONPATH: an entry others may add files to by the time
    the job starts (here: after the launch judged it) stops the job before it loads its
    pickle, in one line of its log."""
    lib = shared_tmp
    lib.mkdir(mode=0o755)
    proc = run_app(GATE_APP, "-m", "hydra/launcher=seml", "hydra.launcher.wait=false", "x=1",
                   "gate=", "+hydra.launcher.additional_parameters.hold=true", cwd=tmp_path,
                   env={"PYTHONPATH": str(lib)})  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    array = test_db["gate"].find_one({"_id": 1})["slurm"][0]["array_id"]
    lib.chmod(0o1777)
    pwned = tmp_path / "pwned"  # what their module writes if it runs as the job's user
    other_user.run("sh", "-c", f"cat > {lib}/submitit.py",
                   input=f"open({str(pwned)!r}, 'w').write('ran')\n", check=True)  # fmt: skip
    subprocess.run(["scontrol", "release", str(array)], check=True)
    wait_until("the job ends", lambda: squeue_tasks(array) == {})
    [log] = list(tmp_path.glob("multirun/**/.submitit/**/*_log.err"))
    lines = log.read_text().splitlines()
    assert lines == [
        f"seml-hydra: not starting the job: PYTHONPATH entry '{lib}': {lib} is a directory "
        "other users can add files to (mode 1777), so another user could put a module (a "
        f"sitecustomize.py too) there that your jobs would run as you. Take it out of "
        "PYTHONPATH (or take others' write access away); the task was not run (what Python "
        "loads at its start before this check is named in the security model)."
    ]
    assert not pwned.exists()  # their submitit.py was never imported


#: What another user's ``libbz2.so.1.0`` does: its constructor leaves a file (when loaded in a
#: Slurm job); the ``BZ2_*`` functions ``_bz2`` links against are stubs that always fail.
EVIL_LIBBZ2_C = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
    const char *pwned = getenv("PWNED");
    if (pwned && getenv("SLURM_JOB_ID")) { FILE *f = fopen(pwned, "w"); if (f) fclose(f); }
}
int BZ2_bzCompressInit(void *s, int b, int v, int w) { return -3; }
int BZ2_bzCompress(void *s, int a) { return -1; }
int BZ2_bzCompressEnd(void *s) { return 0; }
int BZ2_bzDecompressInit(void *s, int v, int m) { return -3; }
int BZ2_bzDecompress(void *s) { return -1; }
int BZ2_bzDecompressEnd(void *s) { return 0; }
"""


def _launch_held_then_open_to_others(test_db, tmp_path, variable, entry, plant):
    """Launch a one-point gate sweep held in Slurm with ``entry`` (mode 0755, judged safe at
    launch) as ``variable``, then open ``entry`` to others (mode 1777), let ``plant(entry)`` add
    another user's file there and release the array. Returns the job's stderr lines and the
    path the planted code writes when it runs in the job."""
    entry.mkdir(mode=0o755)
    pwned = tmp_path / "pwned"
    proc = run_app(GATE_APP, "-m", "hydra/launcher=seml", "hydra.launcher.wait=false", "x=1",
                   "gate=", "+hydra.launcher.additional_parameters.hold=true", cwd=tmp_path,
                   env={variable: str(entry), "PWNED": str(pwned)})  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    array = test_db["gate"].find_one({"_id": 1})["slurm"][0]["array_id"]
    entry.chmod(0o1777)
    plant(entry)
    subprocess.run(["scontrol", "release", str(array)], check=True)
    wait_until("the job ends", lambda: squeue_tasks(array) == {})
    [log] = list(tmp_path.glob("multirun/**/.submitit/**/*_log.err"))
    return log.read_text().splitlines(), pwned


#: What another user's module does when it runs inside a Slurm job: leaves a file.
JOB_PLANT = (
    "import os, pathlib\n"
    "if os.environ.get('SLURM_JOB_ID'):\n"
    "    pathlib.Path(os.environ['PWNED']).write_text('ran as the job user')\n"
)


@pytest.mark.parametrize("module", ["sitecustomize", "shlex"])
def test_a_module_planted_in_a_pythonpath_entry_opened_since_the_launch_never_runs(
    slurm, test_db, tmp_path, shared_tmp, other_user, module
):
    """The job refuses a PYTHONPATH entry others may add files to since the launch, and the
    refusal comes before Python's ``site`` imports a ``sitecustomize.py`` from it and before the
    job's own check imports a standard module (``shlex``) a file there would shadow: the planted
    module never runs as the job's user."""

    def plant(entry):
        other_user.run("sh", "-c", f"cat > {entry}/{module}.py", input=JOB_PLANT, check=True)

    lines, pwned = _launch_held_then_open_to_others(
        test_db, tmp_path, "PYTHONPATH", shared_tmp, plant
    )
    assert any("not starting the job: PYTHONPATH entry" in line for line in lines), lines
    assert not pwned.exists()  # their module never ran as the job's user


def test_a_library_planted_in_an_ld_library_path_entry_opened_since_the_launch_never_loads(
    slurm, test_db, tmp_path, shared_tmp, other_user
):
    """The job refuses an LD_LIBRARY_PATH entry others may add files to since the launch, but
    the job's own imports before that check (``shutil`` imports ``bz2``) must not load a
    ``libbz2.so.1.0`` planted there: its constructor must never run as the job's user."""

    def plant(entry):  # the other user builds their library right in the entry
        other_user.run("sh", "-c", f"cat > {entry}/libbz2.c", input=EVIL_LIBBZ2_C, check=True)
        other_user.run("cc", "-shared", "-fPIC", "-Wl,-soname,libbz2.so.1.0", "-o",
                       f"{entry}/libbz2.so.1.0", f"{entry}/libbz2.c", check=True)  # fmt: skip

    lines, pwned = _launch_held_then_open_to_others(
        test_db, tmp_path, "LD_LIBRARY_PATH", shared_tmp, plant
    )
    assert any("not starting the job: LD_LIBRARY_PATH entry" in line for line in lines), lines
    assert not pwned.exists()  # their library's constructor never ran as the job's user


def test_a_pyc_planted_in_a_pycache_prefix_opened_since_the_launch_never_runs(
    slurm, test_db, tmp_path, shared_tmp, other_user
):
    """The job refuses a PYTHONPYCACHEPREFIX others may add files to since the launch, but a
    compiled ``shlex`` planted there (the job's check imports ``shlex`` before it judges the
    prefix; Python loads the ``.pyc`` whose header matches the source's mtime and size) must
    never run as the job's user."""
    import importlib._bootstrap_external as bootstrap  # the same writer Python's import uses
    import shlex

    source = Path(shlex.__file__)
    planted = (
        f"{source.read_text()}\nimport os as _o, pathlib as _p\n"
        "if _o.environ.get('SLURM_JOB_ID'): _p.Path(_o.environ['PWNED']).write_text('ran')\n"
    )
    stat = source.stat()
    pyc = bootstrap._code_to_timestamp_pyc(
        compile(planted, str(source), "exec"), stat.st_mtime, stat.st_size
    )

    def plant(entry):  # their file, in the place Python looks for shlex's bytecode
        target = Path(f"{entry}{source.parent}") / f"shlex.{sys.implementation.cache_tag}.pyc"
        other_user.run("mkdir", "-p", str(target.parent), check=True)
        target.write_bytes(pyc)
        os.chown(target, other_user.uid, other_user.gid)

    lines, pwned = _launch_held_then_open_to_others(
        test_db, tmp_path, "PYTHONPYCACHEPREFIX", shared_tmp, plant
    )
    assert any("not starting the job: PYTHONPYCACHEPREFIX entry" in line for line in lines), lines
    assert not pwned.exists()  # their shlex.pyc never ran as the job's user
