"""The path-safety rule (``core.paths``) and the job's pickle check (``job.entry``): what
another local user could redirect is told, what only you (or root) can change passes."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from seml_hydra.core.paths import (
    job_dir_problem,
    unsafe_file,
    unsafe_files,
    unsafe_import_dir,
    unsafe_path_part,
)
from seml_hydra.job import entry

OTHER_UID = 54321  # no such user needed: ownership is a number

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root (CI runs as root)")


def private(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True)
    return path


def test_a_private_tree_and_a_sticky_shared_one_are_safe(tmp_path):
    assert unsafe_path_part(private(tmp_path / "a" / "b") / "not-yet" / "%j") is None
    sticky = private(tmp_path / "tmp")
    sticky.chmod(0o1777)  # as /tmp: others add entries, cannot touch yours
    assert unsafe_path_part(private(sticky / "mine")) is None


def test_a_directory_every_user_can_write_is_named(tmp_path):
    shared = private(tmp_path / "x")
    shared.chmod(0o777)
    problem = unsafe_path_part(shared / "multirun" / ".submitit")
    assert problem == f"{shared} is a directory every user can write (mode 0777, no sticky bit)"


@root_only
def test_a_group_writable_directory_is_named_when_its_group_holds_other_users(tmp_path):
    shared = private(tmp_path / "project")
    shared.chmod(0o770)
    os.chown(shared, -1, 1)  # gid 1 (daemon): not the user's private group
    assert unsafe_path_part(shared / "multirun") == (
        f"{shared} is a directory group daemon can write (mode 0770, no sticky bit)"
    )
    os.chown(shared, -1, 0)  # root's own group (named root, no other member): yours alone
    assert unsafe_path_part(shared / "multirun") is None


@root_only
def test_another_users_directory_or_link_on_the_path_is_named(tmp_path):
    theirs = private(tmp_path / "theirs")
    os.chown(theirs, OTHER_UID, OTHER_UID)
    assert unsafe_path_part(theirs / "multirun") == (
        f"{theirs} is a directory of another user (uid {OTHER_UID})"
    )
    mine = private(tmp_path / "mine")
    link = tmp_path / "link"
    link.symlink_to(mine)
    os.lchown(link, OTHER_UID, OTHER_UID)  # they can point it anywhere at any moment
    assert (
        unsafe_path_part(link / "x")
        == f"{link} is a symbolic link of another user (uid {OTHER_UID})"
    )
    yours = tmp_path / "yours"
    yours.symlink_to(theirs)  # a link of yours into their directory: judged resolved too
    assert unsafe_path_part(yours) == f"{theirs} is a directory of another user (uid {OTHER_UID})"


def test_job_dir_problem_says_what_to_do(tmp_path):
    shared = private(tmp_path / "x")
    shared.chmod(0o777)
    message = job_dir_problem("hydra.sweep.dir", shared / "multirun")
    assert message.startswith(f"hydra.sweep.dir={shared}/multirun: {shared} is a directory")
    assert "run their code as you" in message and "Choose a directory of yours" in message
    assert job_dir_problem("hydra.sweep.dir", private(tmp_path / "ok")) is None


def test_a_file_others_can_write_or_a_link_is_not_trusted(tmp_path):
    folder = private(tmp_path / "f")
    pkl = folder / "1_submitted.pkl"
    pkl.write_bytes(b"x")
    pkl.chmod(0o644)
    assert unsafe_file(pkl) is None
    pkl.chmod(0o666)
    assert unsafe_file(pkl) == f"{pkl} can be written by other users (mode 0666)"
    pkl.chmod(0o644)
    link = folder / "2_submitted.pkl"
    link.symlink_to(pkl)
    assert "not a regular file" in unsafe_file(link)
    folder.chmod(0o777)
    assert "every user can write" in unsafe_file(pkl)


def _job_pickles(folder: Path, count: int) -> list[Path]:
    """``count`` pickles, each in its job's folder below ``folder`` (``.submitit/%j``)."""
    pickles = []
    for i in range(count):
        pkl = private(folder / f"7_{i}") / f"7_{i}_submitted.pkl"
        pkl.write_bytes(b"x")
        pkl.chmod(0o600)
        pickles.append(pkl)
    return pickles


def test_the_pickles_of_a_submission_are_judged_with_their_shared_folder_walked_once(
    tmp_path, monkeypatch
):
    folder = private(tmp_path / "sweep" / ".submitit")
    pickles = _job_pickles(folder, 20)
    seen: list[str] = []
    real_lstat = os.lstat

    def counted(path, *args, **kwargs):
        seen.append(str(path))
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", counted)
    assert unsafe_files(pickles) is None
    # the walk along the path as given, its resolution (realpath) and the walk along the
    # resolved form: 3 times, not 3 times a pickle
    assert seen.count(str(tmp_path)) == 3 and seen.count(str(folder)) == 3
    assert all(seen.count(str(p.parent)) == 1 and seen.count(str(p)) == 1 for p in pickles)


def test_one_job_folder_or_pickle_others_can_change_is_named_among_a_submissions(tmp_path):
    folder = private(tmp_path / ".submitit")
    pickles = _job_pickles(folder, 3)
    pickles[1].parent.chmod(0o777)
    assert unsafe_files(pickles) == (
        f"{pickles[1].parent} is a directory every user can write (mode 0777, no sticky bit)"
    )
    pickles[1].parent.chmod(0o700)
    pickles[2].chmod(0o666)
    assert unsafe_files(pickles) == f"{pickles[2]} can be written by other users (mode 0666)"
    pickles[2].chmod(0o600)
    opened = private(tmp_path / "open")
    opened.chmod(0o777)
    moved = opened / "7_0"
    pickles[0].parent.rename(moved)
    pickles[0].parent.symlink_to(moved)  # a job folder that is a link: its target is judged
    assert unsafe_files(pickles) == (
        f"{opened} is a directory every user can write (mode 0777, no sticky bit)"
    )
    assert unsafe_files(pickles[1:]) is None


@root_only
def test_a_file_of_another_user_is_not_trusted(tmp_path):
    pkl = private(tmp_path / "f") / "1_submitted.pkl"
    pkl.write_bytes(b"x")
    os.chown(pkl, OTHER_UID, OTHER_UID)
    assert unsafe_file(pkl) == f"{pkl} belongs to another user (uid {OTHER_UID})"


class _Marker:
    """Unpickling it writes the file ``path`` (what a forged pickle could do)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.write_text, (self.path, "ran"))


@pytest.fixture
def job_folder(tmp_path, monkeypatch):
    """A local submitit job (id 42, rank 0) whose pickle, once loaded, writes ``ran``."""
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "local")
    monkeypatch.setenv("SUBMITIT_LOCAL_JOB_ID", "42")
    monkeypatch.setenv("SUBMITIT_LOCAL_GLOBALID", "0")
    folder = private(tmp_path / "submitit")
    (folder / "42_submitted.pkl").write_bytes(pickle.dumps(_Marker(tmp_path / "ran")))
    return folder


def test_the_job_entry_refuses_a_pickle_others_can_write_without_loading_it(
    job_folder, tmp_path, capsys
):
    (job_folder / "42_submitted.pkl").chmod(0o666)
    assert entry.main([*entry.SUBMITIT_ARGS, str(job_folder)]) == 1
    assert not (tmp_path / "ran").exists()
    out = capsys.readouterr()
    err = out.err
    assert err.count("\n") == 1 and "not loading the job's pickle" in err
    assert out.out == err  # the job's .out file too: status reads a killed job's reason there
    assert "can be written by other users (mode 0666)" in err


def test_the_job_entry_loads_a_pickle_of_its_user(job_folder, tmp_path):
    (job_folder / "42_submitted.pkl").chmod(0o600)
    with pytest.raises(Exception):  # noqa: B017 (not a DelayedSubmission: submitit raises once loaded)
        entry.main([*entry.SUBMITIT_ARGS, str(job_folder)])
    assert (tmp_path / "ran").read_text() == "ran"


def test_the_job_entry_refuses_arguments_that_are_not_submitits(job_folder, tmp_path, capsys):
    assert entry.main(["-c", "print(1)", str(job_folder)]) == 1
    assert "unexpected job command arguments" in capsys.readouterr().err
    assert not (tmp_path / "ran").exists()


def _run_guarded(job_folder: Path, pythonpath: Path, *options: str):
    """Run a job's command as the launcher writes it (``job.entry.guarded_python``) with
    ``PYTHONPATH=pythonpath`` and interpreter ``options`` (the ``python`` field's words)."""
    import shlex
    import subprocess
    import sys

    python = entry.guarded_python(shlex.join([sys.executable, *options]))
    command = f"{python} {shlex.join([*entry.SUBMITIT_ARGS, str(job_folder)])}"
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run(command, shell=True, env=env, capture_output=True, text=True)


#: a module that records, when imported, whether Python ran ``site`` and in UTF-8 mode
_RECORDER = (
    "import sys, pathlib\n"
    "with open(pathlib.Path(__file__).with_name('ran'), 'a') as f:\n"
    "    f.write(f'{__name__} no_site={sys.flags.no_site} utf8={sys.flags.utf8_mode}\\n')\n"
)


@pytest.mark.parametrize("module", ["sitecustomize", "shlex"])
def test_a_module_in_a_pythonpath_entry_others_can_write_never_runs_before_the_refusal(
    job_folder, tmp_path, module
):
    """A ``sitecustomize.py`` (imported by Python's ``site``) or a module shadowing the
    standard library (``shlex``, imported by the job's own check) in a PYTHONPATH entry others
    can add files to is never imported: the guarded job refuses first."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / f"{module}.py").write_text(_RECORDER)
    shared.chmod(0o1777)
    proc = _run_guarded(job_folder, shared)
    assert proc.returncode == 1, proc.stderr
    assert "not starting the job: PYTHONPATH entry" in proc.stderr
    assert not (shared / "ran").exists()
    assert not (tmp_path / "ran").exists()  # nor the pickle loaded


def test_a_guarded_job_goes_on_as_a_normal_python_with_its_options(job_folder, tmp_path):
    """Once judged, the job replaces itself with the same Python started normally: ``site``
    ran (a ``sitecustomize.py`` of the user's own PYTHONPATH entry is imported once, with
    ``sys.flags.no_site`` off, so the task's Python children start as usual), the ``python``
    field's interpreter options kept (``-X utf8``), and the pickle loaded."""
    mine = private(tmp_path / "mine")
    (mine / "sitecustomize.py").write_text(_RECORDER)
    proc = _run_guarded(job_folder, mine, "-X", "utf8")
    assert proc.returncode != 0  # not a DelayedSubmission: submitit raises once it is loaded
    assert (mine / "ran").read_text() == "sitecustomize no_site=0 utf8=1\n"
    assert (tmp_path / "ran").read_text() == "ran"  # the pickle was loaded, in the second step


def test_a_guarded_job_finds_a_seml_hydra_that_is_only_on_pythonpath(job_folder, tmp_path):
    """A Python without seml-hydra installed (a base interpreter) that gets the package and
    its dependencies from PYTHONPATH (a checkout put there) still runs its job."""
    import shlex
    import subprocess
    import sys

    import submitit

    import seml_hydra

    base = Path(sys.base_prefix) / "bin" / "python3"
    checkout = Path(seml_hydra.__file__).parent.parent
    deps = Path(submitit.__file__).parent.parent
    python = entry.guarded_python(shlex.quote(str(base)))
    command = f"{python} {shlex.join([*entry.SUBMITIT_ARGS, str(job_folder)])}"
    env = {**os.environ, "PYTHONPATH": f"{checkout}:{deps}"}
    proc = subprocess.run(command, shell=True, env=env, capture_output=True, text=True)
    assert "No module named" not in proc.stderr
    assert (tmp_path / "ran").read_text() == "ran", proc.stderr


def test_a_guarded_job_without_seml_hydra_says_so_and_imports_none_from_pythonpath(tmp_path):
    """A job's Python without seml-hydra installed and without the launch's package directory
    (another machine's path) must not import a ``seml_hydra`` from a PYTHONPATH entry, not
    judged yet: it exits 1 with one line saying what to do."""
    import shlex
    import subprocess
    import sys

    planted = private(tmp_path / "entry") / "seml_hydra"
    (planted / "job").mkdir(parents=True)
    (planted / "__init__.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('x')\n")
    (planted / "job" / "__init__.py").write_text("")
    (planted / "job" / "entry.py").write_text("def guard(): return 0\n")
    base = Path(sys.base_prefix) / "bin" / "python3"
    program = entry.guard_program(str(tmp_path / "not-here"))
    command = f"{base} -I -S -u -c {shlex.quote(program)} -u -m submitit.core._submit x"
    env = {**os.environ, "PYTHONPATH": str(planted.parent)}
    proc = subprocess.run(command, shell=True, env=env, capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.startswith("seml-hydra: the job's Python has no seml_hydra installed")
    assert not (tmp_path / "ran").exists()


def test_the_interpreter_options_of_a_guarded_job_drop_only_the_added_isolation_and_no_site():
    guard = entry.guard_program()
    argv = ["py", "-X", "utf8", "-I", "-S", "-u", "-c", guard, "-u", "-m", "submitit._submit"]
    assert entry.interpreter_options(argv) == ["-X", "utf8", "-u"]
    user_own = ["py", "-S", "-E", "-I", "-S", "-u", "-c", guard, "-u"]  # the user's own stay
    assert entry.interpreter_options(user_own) == ["-S", "-E", "-u"]


def test_a_python_program_others_can_change_is_refused_at_launch(tmp_path):
    from seml_hydra.core.paths import launch_paths_problem

    wrapper = private(tmp_path / "bin") / "py.sh"
    wrapper.write_text('#!/bin/sh\nexec python3 "$@"\n')
    wrapper.chmod(0o755)
    node = {"sweep": {"dir": str(tmp_path / "m")}, "launcher": {"python": f"exec {wrapper}"}}
    assert launch_paths_problem(node, set(), str(tmp_path)) is None
    wrapper.chmod(0o777)
    problem = launch_paths_problem(node, set(), str(tmp_path))
    assert problem.startswith(f"hydra.launcher.python=exec {wrapper}: {wrapper} can be written")
    assert launch_paths_problem({"launcher": {"python": "python3"}}, set(), str(tmp_path)) is None


def test_a_directory_an_acl_opens_to_another_user_is_named(tmp_path):
    import subprocess

    opened = private(tmp_path / "p")
    opened.chmod(0o755)
    subprocess.run(["setfacl", "-m", f"u:{OTHER_UID}:rwx", str(opened)], check=True)
    assert unsafe_path_part(opened / "multirun") == (
        f"{opened} is a directory users of its ACL (user:{OTHER_UID}:rwx) can write "
        "(mode 0775, no sticky bit)"
    )
    assert f"users of its ACL (user:{OTHER_UID}:rwx)" in unsafe_import_dir(opened)


def test_relative_pythonpath_entries_are_left_out_of_the_jobs_environment():
    from seml_hydra.launch.submit import absolute_path_entries

    assert absolute_path_entries(":/opt/x:.:src:/y") == ("/opt/x:/y", ["", ".", "src"])
    assert absolute_path_entries("/a") == ("/a", [])


def test_every_program_the_python_field_names_is_judged(tmp_path):
    from seml_hydra.core.paths import launch_paths_problem

    open_dir = private(tmp_path / "open")
    open_dir.chmod(0o1777)
    wrapper = open_dir / "wrap.sh"
    wrapper.write_text("#!/bin/sh\n")
    wrapper.chmod(0o777)
    for python in (f"bash {wrapper}", f"/usr/bin/env {wrapper}"):
        problem = launch_paths_problem({"launcher": {"python": python}}, set(), str(tmp_path))
        assert problem is not None and "can be written by other users" in problem, python
    missing = f"{open_dir}/later-python"  # another user could create it before a job starts
    problem = launch_paths_problem({"launcher": {"python": missing}}, set(), str(tmp_path))
    assert problem is not None and "does not exist and" in problem
    assert (
        launch_paths_problem({"launcher": {"python": "/usr/bin/env python3"}}, set(), str(tmp_path))
        is None
    )
