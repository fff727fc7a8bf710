"""The job's first step (``job.entry.guard_program``): another local user plants code in
something on a job's search paths that was safe at launch and opened to others before the job
started (or a file entry the launch check must judge as a file). The planted code must never
run as the job's user (real mongod, the Slurm testbed, a second local user). And what a
normal user's job needs still works: seml-hydra from the user site, spawn workers importing
site-packages, interpreter options. (Found by an outside tester of the first guard.)"""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

import pytest
from support.mongo import statuses
from support.paths import GATE_APP, ROOT
from support.planted import JOB_PLANT, LOW_LEVEL_PLANT
from support.run import run_app
from support.slurm import release_and_wait

pytestmark = pytest.mark.slurm

#: the interpreter without seml-hydra installed (the venv's base), the checkout and its deps
BASE_PYTHON = Path(sys.base_prefix) / "bin" / "python3"
PYVER = f"python{sys.version_info[0]}.{sys.version_info[1]}"


def _deps() -> Path:
    import submitit

    return Path(submitit.__file__).parent.parent


def _held(test_db, tmp_path, *args, cwd=None, env=None):
    """Launch a one-point gate sweep held in Slurm; returns its array id."""
    proc = run_app(GATE_APP, "-m", "hydra/launcher=seml", "hydra.launcher.wait=false", "x=1",
                   "gate=", "+hydra.launcher.additional_parameters.hold=true",
                   f"hydra.sweep.dir={tmp_path}/multirun", *args, cwd=cwd or tmp_path,
                   env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return test_db["gate"].find_one({"_id": 1})["slurm"][0]["array_id"]


def _release_and_wait(tmp_path, array):
    """Release the held array, wait until it ends; returns its tasks' stderr."""
    release_and_wait(array)
    logs = tmp_path.glob("multirun/**/.submitit/**/*_log.err")
    return "".join(p.read_text() for p in logs)


def test_a_sitecustomize_in_the_launch_dir_behind_an_empty_pythonpath_entry_never_runs(
    slurm, test_db, tmp_path, shared_tmp, other_user, monkeypatch
):
    """``setup: ["export PYTHONPATH=$HOME/lib:$PYTHONPATH"]`` (the usual idiom) with no
    PYTHONPATH at launch leaves an empty entry, which Python reads as the working directory:
    the launch directory, opened to others since the launch, must not be searched while
    ``site`` imports ``sitecustomize`` (the first guard kept it there), and the job refuses
    the entry."""
    monkeypatch.delenv("PYTHONPATH", raising=False)
    lib = tmp_path / "lib"
    lib.mkdir()
    shared_tmp.mkdir(mode=0o755)  # the launch directory, yours at launch time
    pwned = tmp_path / "pwned"
    array = _held(test_db, tmp_path, f'hydra.launcher.setup=["export PYTHONPATH={lib}:$PYTHONPATH"]',
                  cwd=shared_tmp, env={"PWNED": str(pwned)})  # fmt: skip
    shared_tmp.chmod(0o1777)  # ... opened to others before the job starts
    other_user.run("sh", "-c", f"cat > {shared_tmp}/sitecustomize.py", input=JOB_PLANT, check=True)
    logs = _release_and_wait(tmp_path, array)
    assert "not starting the job: PYTHONPATH entry ''" in logs, logs
    assert not pwned.exists(), logs  # their sitecustomize.py must never run as the job's user


def test_an_encodings_pyc_planted_in_a_pycache_prefix_opened_since_the_launch_never_runs(
    slurm, test_db, tmp_path, shared_tmp, other_user
):
    """The interpreter imports ``encodings`` (not frozen) at its start, with
    ``sys.pycache_prefix`` already set from PYTHONPYCACHEPREFIX: the guard turns the prefix off
    too late, so a compiled ``encodings.aliases`` planted under the prefix runs before the
    check (the existing test plants ``shlex``, imported after)."""
    import importlib._bootstrap_external as bootstrap
    from encodings import aliases

    source = Path(aliases.__file__)
    planted = f"{source.read_text()}\n{LOW_LEVEL_PLANT}"
    stat = source.stat()
    pyc = bootstrap._code_to_timestamp_pyc(
        compile(planted, str(source), "exec"), stat.st_mtime, stat.st_size
    )
    shared_tmp.mkdir(mode=0o755)
    pwned = tmp_path / "pwned"
    array = _held(test_db, tmp_path,
                  env={"PYTHONPYCACHEPREFIX": str(shared_tmp), "PWNED": str(pwned)})  # fmt: skip
    shared_tmp.chmod(0o1777)
    target = Path(f"{shared_tmp}{source.parent}") / f"aliases.{sys.implementation.cache_tag}.pyc"
    other_user.run("mkdir", "-p", str(target.parent), check=True)
    target.write_bytes(pyc)
    os.chown(target, other_user.uid, other_user.gid)
    logs = _release_and_wait(tmp_path, array)
    assert "not starting the job: PYTHONPYCACHEPREFIX entry" in logs, logs
    assert not pwned.exists(), logs  # their encodings/aliases.pyc must never run as the job's user


def test_an_encodings_package_planted_in_a_pythonpath_entry_opened_since_the_launch_never_runs(
    slurm, test_db, tmp_path, shared_tmp, other_user
):
    """The interpreter imports ``encodings`` at its start, from ``sys.path`` as it is then:
    the PYTHONPATH entries come before the standard library, with ``-S`` too. An
    ``encodings/__init__.py`` planted in an entry opened to others since the launch runs as
    the job's user before the guard (the existing tests plant ``sitecustomize`` and ``shlex``,
    imported after the guard took the entries off ``sys.path``)."""
    shared_tmp.mkdir(mode=0o755)
    pwned = tmp_path / "pwned"
    array = _held(test_db, tmp_path, env={"PYTHONPATH": str(shared_tmp), "PWNED": str(pwned)})
    shared_tmp.chmod(0o1777)
    other_user.run("mkdir", str(shared_tmp / "encodings"), check=True)
    other_user.run("sh", "-c", f"cat > {shared_tmp}/encodings/__init__.py",
                   input=LOW_LEVEL_PLANT, check=True)  # fmt: skip
    logs = _release_and_wait(tmp_path, array)
    assert not pwned.exists(), logs  # their encodings package must never run as the job's user


def test_a_missing_pythonpath_entry_another_user_makes_in_a_dir_opened_since_the_launch(
    slurm, test_db, tmp_path, shared_tmp, other_user
):
    """A PYTHONPATH entry not there at launch is judged by its nearest existing directory
    (yours, 0755: fine). That directory is opened to others (sticky, 1777) before the job
    starts and another user makes the entry (their directory, mode 0755) with a
    ``sitecustomize.py``: the job refuses it (theirs, where every user adds entries), and
    their module never runs."""
    shared_tmp.mkdir(mode=0o755)
    entry = shared_tmp / "lib"
    pwned = tmp_path / "pwned"
    array = _held(test_db, tmp_path, env={"PYTHONPATH": str(entry), "PWNED": str(pwned)})
    shared_tmp.chmod(0o1777)
    other_user.run("mkdir", "-m", "0755", str(entry), check=True)
    other_user.run("sh", "-c", f"cat > {entry}/sitecustomize.py", input=JOB_PLANT, check=True)
    logs = _release_and_wait(tmp_path, array)
    assert f"{entry} is a directory of another user" in logs, logs
    assert not pwned.exists(), logs  # their sitecustomize.py must never run as the job's user


def _zip(path: Path, files: dict[str, str]) -> bytes:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path.read_bytes()


def test_a_sitecustomize_rewritten_into_a_zip_pythonpath_entry_never_runs(
    slurm, test_db, tmp_path, shared_tmp, other_user
):
    """The zip entry of PYTHONPATH is made writable by others (chmod 0666) after the launch:
    they rewrite it with a ``sitecustomize.py``, which the job's second step (a normal Python
    start) imports before ``main()`` judges again; ``main()``'s check passes anyway."""
    shared_tmp.mkdir(mode=0o755)
    archive = shared_tmp / "deps.zip"
    _zip(archive, {"helper.py": "X = 1\n"})
    archive.chmod(0o644)
    pwned = tmp_path / "pwned"
    array = _held(test_db, tmp_path, env={"PYTHONPATH": str(archive), "PWNED": str(pwned)})
    archive.chmod(0o666)  # opened to others before the job starts
    evil = _zip(tmp_path / "evil.zip", {"helper.py": "X = 1\n", "sitecustomize.py": JOB_PLANT})
    other_user.run("sh", "-c", f"cat > {archive}", input=evil.decode("latin-1"),
                   encoding="latin-1", check=True)  # fmt: skip
    logs = _release_and_wait(tmp_path, array)
    assert not pwned.exists(), logs  # their sitecustomize.py must never run as the job's user


def test_a_seml_hydra_planted_in_an_earlier_pythonpath_entry_never_runs(
    slurm, test_db, tmp_path, shared_tmp, other_user
):
    """seml-hydra not installed, a checkout on PYTHONPATH : the guard
    imports ``seml_hydra`` from the *first* PYTHONPATH entry holding a ``seml_hydra``
    directory, judged by nothing: an entry before the checkout, opened to others since the
    launch, gets their ``seml_hydra/__init__.py`` run as the job's user."""
    shared_tmp.mkdir(mode=0o755)
    pwned = tmp_path / "pwned"
    pythonpath = f"{shared_tmp}:{ROOT}:{_deps()}"
    array = _held(test_db, tmp_path, f"hydra.launcher.python={BASE_PYTHON}",
                  env={"PYTHONPATH": pythonpath, "PWNED": str(pwned)})  # fmt: skip
    shared_tmp.chmod(0o1777)
    other_user.run("mkdir", str(shared_tmp / "seml_hydra"), check=True)
    other_user.run("sh", "-c", f"cat > {shared_tmp}/seml_hydra/__init__.py", input=JOB_PLANT,
                   check=True)  # fmt: skip
    logs = _release_and_wait(tmp_path, array)
    assert not pwned.exists(), logs  # their seml_hydra must never run as the job's user


def test_a_pth_planted_in_the_user_site_of_pythonuserbase_opened_since_the_launch_never_runs(
    slurm, test_db, tmp_path, shared_tmp, other_user
):
    """PYTHONUSERBASE is judged, but not the directory Python reads from it
    (``$PYTHONUSERBASE/lib/pythonX.Y/site-packages``): opened to others after the launch, a
    ``.pth`` planted there runs in the job's second step (a normal start with the user site)
    before ``main()`` judges again, which passes (the base itself is still 0755)."""
    site_dir = shared_tmp / "lib" / PYVER / "site-packages"
    site_dir.mkdir(parents=True)
    for part in (shared_tmp, shared_tmp / "lib", shared_tmp / "lib" / PYVER, site_dir):
        part.chmod(0o755)
    pwned = tmp_path / "pwned"
    env = {"PYTHONPATH": f"{ROOT}:{_deps()}", "PYTHONUSERBASE": str(shared_tmp),
           "PWNED": str(pwned)}  # fmt: skip
    array = _held(test_db, tmp_path, f"hydra.launcher.python={BASE_PYTHON}", env=env)
    site_dir.chmod(0o1777)
    line = "import os, pathlib; os.environ.get('SLURM_JOB_ID') and pathlib.Path(os.environ['PWNED']).write_text('ran')\n"  # noqa: E501
    other_user.run("sh", "-c", f"cat > {site_dir}/zz-planted.pth", input=line, check=True)
    logs = _release_and_wait(tmp_path, array)
    assert not pwned.exists(), logs  # their .pth must never run as the job's user


def test_a_warning_category_module_planted_in_a_pythonpath_entry_never_runs(
    slurm, test_db, tmp_path, shared_tmp, other_user
):
    """``PYTHONWARNINGS=ignore::urllib3.exceptions.InsecureRequestWarning`` (a common way to
    quiet a cluster's self-signed certificates): the interpreter imports ``warnings`` at its
    start and it imports the category's module, from ``sys.path`` as it is then: with ``-S``
    the PYTHONPATH entries and the standard library, no site-packages. A ``urllib3`` planted
    in a PYTHONPATH entry opened to others since the launch runs before the guard judges."""
    shared_tmp.mkdir(mode=0o755)
    pwned = tmp_path / "pwned"
    env = {"PYTHONPATH": str(shared_tmp), "PWNED": str(pwned),
           "PYTHONWARNINGS": "ignore::urllib3.exceptions.InsecureRequestWarning"}  # fmt: skip
    array = _held(test_db, tmp_path, env=env)
    shared_tmp.chmod(0o1777)
    other_user.run("mkdir", str(shared_tmp / "urllib3"), check=True)
    other_user.run("sh", "-c", f"cat > {shared_tmp}/urllib3/__init__.py", input=JOB_PLANT,
                   check=True)  # fmt: skip
    logs = _release_and_wait(tmp_path, array)
    assert "not starting the job: PYTHONPATH entry" in logs, logs
    assert not pwned.exists(), logs  # their urllib3 must never run as the job's user


# --- regressions for normal users ---------------------------------------------------------


def test_a_seml_hydra_installed_in_the_user_site_runs_its_job(slurm, test_db, tmp_path):
    """``pip install --user seml-hydra`` (here: an editable user install, a ``.pth`` in the
    user site) with a base interpreter: the launcher works, but the guard runs ``site.main()``
    without the user site and finds no ``seml_hydra``: every job fails with
    ``ModuleNotFoundError`` before it starts."""
    userbase = tmp_path / "userbase"
    site_dir = userbase / "lib" / PYVER / "site-packages"
    site_dir.mkdir(parents=True)
    (site_dir / "seml_hydra_user.pth").write_text(f"{ROOT}\n{ROOT}/launcher\n{_deps()}\n")
    proc = run_app(GATE_APP, "-m", "hydra/launcher=seml", "x=1", "gate=",
                   f"hydra.launcher.python={BASE_PYTHON}", f"hydra.sweep.dir={tmp_path}/multirun",
                   cwd=tmp_path, env={"PYTHONUSERBASE": str(userbase)})  # fmt: skip
    logs = "".join(p.read_text() for p in tmp_path.glob("multirun/**/.submitit/**/*_log.err"))
    assert "No module named 'seml_hydra'" not in logs, logs
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert statuses(test_db["gate"]) == {1: "COMPLETED"}


SPAWN_APP = """
import multiprocessing as mp, sys
import hydra
from omegaconf import DictConfig

def work(_):
    import omegaconf  # a site-packages module, in a spawned worker
    return (omegaconf.__name__, sys.flags.no_site, sys.flags.utf8_mode)

@hydra.main(version_base="1.3", config_path=None, config_name=None)
def main(cfg: DictConfig):
    with mp.get_context("spawn").Pool(1) as pool:
        result = pool.map(work, [0])
    open(cfg.out, "w").write(repr(result))

if __name__ == "__main__":
    main()
"""


def test_spawn_workers_and_interpreter_options_still_work(slurm, test_db, tmp_path):
    """A task whose multiprocessing ``spawn`` workers import site-packages, with ``-X utf8`` in
    ``hydra.launcher.python``."""
    app = tmp_path / "spawn_app.py"
    app.write_text(SPAWN_APP)
    out = tmp_path / "out.txt"
    proc = run_app(str(app), "-m", "hydra/launcher=seml", f"+out={out}", "+x=1",
                   f"hydra.launcher.python='{sys.executable} -X utf8'",
                   "hydra.launcher.collection=spawnapp",
                   f"hydra.sweep.dir={tmp_path}/multirun", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert out.read_text() == "[('omegaconf', 0, 1)]"
