"""What a second local user could use besides a directory's mode bits: POSIX ACLs (access
and default), ``PATH``/``PYTHONPATH`` entries others can add files to, a umask that lets
others write, and an interpreter that ignores ``PYTHONSAFEPATH`` (``core.paths``,
``core.jobenv``, ``job.entry``)."""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path

import pytest

from seml_hydra.core import jobenv
from seml_hydra.core.paths import (
    ACL_GROUP,
    ACL_GROUP_OBJ,
    ACL_MASK,
    ACL_OTHER,
    ACL_USER,
    ACL_USER_OBJ,
    AclEntry,
    acl_write_grants,
    launch_paths_problem,
    parse_acl,
    program_lookup_problem,
    unsafe_file,
    unsafe_path_part,
)
from seml_hydra.job import entry

OTHER_UID = 54321
ME = os.geteuid()


def private(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True)
    path.chmod(0o755)
    return path


def setfacl(*args: str) -> None:
    subprocess.run(["setfacl", *args], check=True)


def acl_bytes(*entries: tuple[int, int, int]) -> bytes:
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


UNDEFINED = 0xFFFFFFFF


def test_an_acl_value_is_parsed_into_its_entries():
    data = acl_bytes(
        (ACL_USER_OBJ, 7, UNDEFINED), (ACL_USER, 7, OTHER_UID), (ACL_MASK, 5, UNDEFINED)
    )
    assert parse_acl(data) == [
        AclEntry(ACL_USER_OBJ, 7, None),
        AclEntry(ACL_USER, 7, OTHER_UID),
        AclEntry(ACL_MASK, 5, None),
    ]
    with pytest.raises(ValueError):
        parse_acl(b"\x01\x00\x00\x00")
    with pytest.raises(ValueError):
        parse_acl(data[:-1])


def test_only_entries_that_let_another_user_write_are_grants():
    def shared(gid: int) -> bool:
        return gid == 100

    owner = [AclEntry(ACL_USER_OBJ, 7, None), AclEntry(ACL_GROUP_OBJ, 5, None),
             AclEntry(ACL_OTHER, 5, None)]  # fmt: skip
    other = AclEntry(ACL_USER, 7, OTHER_UID)
    assert acl_write_grants([*owner, other], ME, 0, shared) == [other]
    # the mask caps named entries and the group; other is never masked
    assert acl_write_grants([*owner, other, AclEntry(ACL_MASK, 5, None)], ME, 0, shared) == []
    # naming only the owner (or root) grants nothing
    assert acl_write_grants([*owner, AclEntry(ACL_USER, 7, ME)], ME, 0, shared) == []
    group = AclEntry(ACL_GROUP, 7, 100)
    assert acl_write_grants([*owner, group], ME, 0, shared) == [group]
    assert acl_write_grants([*owner, AclEntry(ACL_GROUP, 7, 5)], ME, 0, shared) == []
    group_obj = AclEntry(ACL_GROUP_OBJ, 7, None)
    assert acl_write_grants([group_obj], ME, 100, shared) == [group_obj]
    assert acl_write_grants([group_obj], ME, 5, shared) == []
    assert acl_write_grants([AclEntry(ACL_OTHER, 2, None)], ME, 0, shared) != []


def test_a_default_acl_opening_what_is_made_below_is_named(tmp_path):
    sweep = private(tmp_path / "project")
    assert unsafe_path_part(sweep / "multirun" / "2026") is None
    setfacl("-d", "-m", f"u:{OTHER_UID}:rwx", str(sweep))
    assert unsafe_path_part(sweep / "multirun" / "2026") == (
        f"{sweep} has a default ACL that lets other users write what is made in it "
        f"(default:user:{OTHER_UID}:rwx)"
    )
    made = sweep / "multirun"
    made.mkdir()  # inherits the ACL as its access ACL (and as its default)
    assert unsafe_path_part(made) == (
        f"{made} is a directory users of its ACL (user:{OTHER_UID}:rwx) can write "
        "(mode 0775, no sticky bit)"
    )


def test_a_default_acl_above_the_deepest_existing_directory_is_not_judged(tmp_path):
    top = private(tmp_path / "top")
    setfacl("-d", "-m", f"u:{OTHER_UID}:rwx", str(top))
    mine = top / "mine"
    mine.mkdir()
    setfacl("-b", str(mine))  # made private again: nothing is made in `top` any more
    assert unsafe_path_part(mine / "multirun") is None


def test_acls_that_grant_others_no_write_are_fine(tmp_path):
    folder = private(tmp_path / "f")
    setfacl("-m", f"u:{ME}:rwx", str(folder))  # names only the owner: the mask shows rwx
    setfacl("-d", "-m", f"u:{ME}:rwx,u:{OTHER_UID}:r-x", str(folder))
    assert os.stat(folder).st_mode & 0o020
    assert unsafe_path_part(folder / "multirun") is None
    pkl = folder / "1_submitted.pkl"
    pkl.write_bytes(b"x")  # inherits the default ACL: readable by them, writable by you
    assert unsafe_file(pkl) is None


def test_a_pickle_an_acl_lets_another_user_write_is_not_trusted(tmp_path):
    pkl = private(tmp_path / "f") / "1_submitted.pkl"
    pkl.write_bytes(b"x")
    pkl.chmod(0o644)
    setfacl("-m", f"u:{OTHER_UID}:rw", str(pkl))
    assert unsafe_file(pkl) == (f"{pkl} can be written by other users (mode 0664)")


def test_a_search_path_entry_others_can_add_files_to_is_named(tmp_path):
    shared = private(tmp_path / "shared")
    shared.chmod(0o1777)  # sticky or not: they add their own sitecustomize.py
    mine = private(tmp_path / "mine")
    cwd = str(mine)
    assert jobenv.environment_problem({"PYTHONPATH": f"{mine}", "PATH": "/usr/bin"}, cwd) is None
    problem = jobenv.environment_problem({"PYTHONPATH": f"{mine}:{shared}"}, cwd)
    assert problem.startswith(f"PYTHONPATH entry '{shared}': {shared} is a directory other")
    assert "sitecustomize.py" in problem and "\n" not in problem
    problem = jobenv.environment_problem({"PATH": f"{shared}/bin:/usr/bin"}, cwd)
    assert problem.startswith(f"PATH entry '{shared}/bin': {shared}/bin does not exist and")
    problem = jobenv.environment_problem({"LD_LIBRARY_PATH": f"{mine}:{shared}"}, cwd)
    assert problem.startswith(f"LD_LIBRARY_PATH entry '{shared}': {shared} is a directory other")
    assert "shared library" in problem  # its constructor would run in every job
    setfacl("-m", f"u:{OTHER_UID}:rwx", str(mine))  # an ACL opens it to them
    assert "users of its ACL" in jobenv.environment_problem({"PATH": ":/usr/bin"}, cwd)


@pytest.mark.parametrize(
    ("name", "planted"),
    [
        ("PYTHONHOME", "standard-library module"),
        ("PYTHONUSERBASE", "site-packages .pth file"),
        ("PYTHONPYCACHEPREFIX", "compiled module (.pyc)"),
    ],
)
def test_a_python_directory_variable_others_can_add_files_to_is_named(tmp_path, name, planted):
    shared = private(tmp_path / "shared")
    shared.chmod(0o1777)  # e.g. a pycache prefix under /tmp: they plant a matching .pyc
    mine = private(tmp_path / "mine")
    assert jobenv.environment_problem({name: str(mine)}, str(mine)) is None
    problem = jobenv.environment_problem({name: str(shared)}, str(mine))
    assert problem.startswith(f"{name} entry '{shared}': {shared} is a directory other")
    assert planted in problem and "\n" not in problem


def test_an_ld_preload_library_in_a_directory_others_can_add_files_to_is_named(tmp_path):
    shared = private(tmp_path / "shared")
    shared.chmod(0o1777)  # they replace the library before the job starts
    mine = private(tmp_path / "mine")
    preload = f"libc_fast.so {mine}/libmine.so"  # a bare name is looked up, not judged here
    assert jobenv.environment_problem({"LD_PRELOAD": preload}, str(mine)) is None
    problem = jobenv.environment_problem({"LD_PRELOAD": f"{preload}:{shared}/lib.so"}, str(mine))
    assert problem.startswith(f"LD_PRELOAD entry '{shared}/lib.so': {shared}/lib.so does not")
    assert f"and {shared} is a directory other users can add files to" in problem
    assert "shared library" in problem


def test_a_file_entry_others_can_write_is_named(tmp_path):
    """A zip on PYTHONPATH (Python imports from it, a ``sitecustomize.py`` too) or a library
    LD_PRELOAD names is judged as a file: others may not write it, nor the directory it is in."""
    mine = private(tmp_path / "mine")
    archive, library = mine / "deps.zip", mine / "libfast.so"
    for path in (archive, library):
        path.write_bytes(b"PK")
        path.chmod(0o644)
    env = {"PYTHONPATH": str(archive), "LD_PRELOAD": str(library)}
    assert jobenv.environment_problem(env, str(mine)) is None
    archive.chmod(0o666)
    problem = jobenv.environment_problem(env, str(mine))
    assert problem.startswith(f"PYTHONPATH entry '{archive}': {archive} is a file other users")
    archive.chmod(0o644)
    library.chmod(0o646)
    problem = jobenv.environment_problem(env, str(mine))
    assert problem.startswith(f"LD_PRELOAD entry '{library}': {library} is a file other users")
    audit = {"LD_AUDIT": f"{mine}/libaudit.so"}  # loaded into every process, as LD_PRELOAD
    assert jobenv.environment_problem(audit, str(mine)) is None
    mine.chmod(0o777)
    problem = jobenv.environment_problem(audit, str(mine))
    assert problem.startswith(f"LD_AUDIT entry '{mine}/libaudit.so': {mine}/libaudit.so does")


def test_the_user_site_packages_under_pythonuserbase_is_judged(tmp_path):
    """``site`` reads ``.pth`` files from ``$PYTHONUSERBASE/lib/pythonX.Y/site-packages``:
    that directory is judged too, not only the base."""
    import sys

    base = private(tmp_path / "base")
    site_dir = base / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    site_dir = private(site_dir / "site-packages")
    assert jobenv.environment_problem({"PYTHONUSERBASE": str(base)}, str(base)) is None
    site_dir.chmod(0o1777)
    problem = jobenv.environment_problem({"PYTHONUSERBASE": str(base)}, str(base))
    assert problem.startswith(f"PYTHONUSERBASE entry '{base}': {site_dir} is a directory other")


@pytest.mark.skipif(ME != 0, reason="chown needs root (CI runs as root)")
def test_a_search_path_entry_of_an_admin_account_that_only_it_writes_is_fine(tmp_path):
    tools = private(tmp_path / "opt" / "slurm" / "bin")  # e.g. owned by the `slurm` account
    os.chown(tools, OTHER_UID, OTHER_UID)
    assert jobenv.environment_problem({"PATH": f"{tools}:/usr/bin"}, str(tmp_path)) is None
    tools.chmod(0o775)  # its group is another user's: more than its owner may add files
    assert "group 54321" in jobenv.environment_problem({"PATH": str(tools)}, str(tmp_path))


@pytest.mark.skipif(ME != 0, reason="chown needs root (CI runs as root)")
def test_a_search_path_entry_another_user_made_where_every_user_adds_entries_is_named(tmp_path):
    """An admin's tree is trusted as its owner is, but a directory another user made in a
    sticky directory every user can add to (their own ``/tmp/lib``, or a link of yours to it:
    an entry missing at launch they made since) is theirs to fill."""
    shared = private(tmp_path / "tmp")
    shared.chmod(0o1777)
    theirs = private(shared / "lib")
    os.chown(theirs, OTHER_UID, OTHER_UID)
    link = tmp_path / "mylib"
    link.symlink_to(theirs)
    for path in (theirs, link):
        problem = jobenv.environment_problem({"PYTHONPATH": str(path)}, str(tmp_path))
        assert problem is not None and f"{theirs} is a directory of another user" in problem
        assert f"in {shared}, where every user can add theirs" in problem


def test_a_python_found_by_path_lookup_is_judged(tmp_path):
    """The file found is judged; the entries are environment_problem's (judged once, with
    the others of PATH), not again for each program looked up."""
    shared = private(tmp_path / "shared")
    shared.chmod(0o1777)
    assert program_lookup_problem("python3", f"{shared}:/usr/bin", str(tmp_path)) is None
    assert "PATH entry" in jobenv.environment_problem({"PATH": f"{shared}:/usr/bin"}, "/")
    mine = private(tmp_path / "bin")
    (mine / "python3").write_text("#!/bin/sh\n")
    (mine / "python3").chmod(0o777)
    assert "can be written by other users" in program_lookup_problem(
        "python3", f"{mine}:{shared}", str(tmp_path)
    )


def test_the_python_field_named_by_path_lookup_is_refused_at_launch(tmp_path, monkeypatch):
    mine = private(tmp_path / "bin")
    (mine / "python3").write_text("#!/bin/sh\n")
    (mine / "python3").chmod(0o777)
    monkeypatch.setenv("PATH", f"{mine}:/usr/bin:/bin")
    for python in ("python3", "exec python3", "FOO=1 exec python3"):
        problem = launch_paths_problem({"launcher": {"python": python}}, set(), str(tmp_path))
        assert problem is not None and f"{mine}/python3 can be written" in problem, python
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert launch_paths_problem({"launcher": {"python": "exec python3"}}, set(), "/") is None


def test_the_python_field_is_looked_up_from_the_jobs_working_directory(tmp_path, monkeypatch):
    """``seml start`` submits from each experiment's working directory: an empty PATH entry
    and a relative program mean that directory, not the one ``seml start`` runs in."""
    workdir = private(tmp_path / "work")
    for name in ("python3", "py.sh"):
        (workdir / name).write_text("#!/bin/sh\n")
        (workdir / name).chmod(0o777)
    monkeypatch.chdir(private(tmp_path / "elsewhere"))
    monkeypatch.setenv("PATH", ":/usr/bin:/bin")
    judged: set[str] = set()
    problem = launch_paths_problem({"launcher": {"python": "python3"}}, judged, str(workdir))
    assert problem is not None and f"{workdir}/python3 can be written" in problem
    problem = launch_paths_problem({"launcher": {"python": "./py.sh"}}, judged, str(workdir))
    assert problem is not None and f"{workdir}/py.sh can be written" in problem
    assert launch_paths_problem({"launcher": {"python": "python3"}}, judged, os.getcwd()) is None


def test_a_umask_gets_the_write_bits_of_others():
    assert jobenv.private_umask(0o000, group_shared=False) == 0o002
    assert jobenv.private_umask(0o000, group_shared=True) == 0o022
    assert jobenv.private_umask(0o002, group_shared=False) == 0o002
    assert jobenv.private_umask(0o077, group_shared=True) == 0o077


def test_tighten_umask_changes_the_process_umask_only_when_needed():
    old = os.umask(0o000)
    try:
        assert jobenv.tighten_umask() in ((0o000, 0o002), (0o000, 0o022))
        assert jobenv.tighten_umask() is None
        current = os.umask(0o022)
        assert current & 0o002
    finally:
        os.umask(old)


def test_python_older_than_3_11_is_refused_only_where_it_needs_pythonsafepath():
    unsafe = "/tmp is a directory other users can add files to (mode 1777)"
    assert jobenv.safe_path_problem((3, 11), unsafe) is None
    assert jobenv.safe_path_problem((3, 10), None) is None
    problem = jobenv.safe_path_problem((3, 10), unsafe)
    assert problem.startswith("Python 3.10 ignores PYTHONSAFEPATH, and /tmp is")


def test_the_job_entry_refuses_a_pythonpath_entry_others_can_write(tmp_path, monkeypatch, capsys):
    shared = private(tmp_path / "shared")
    shared.chmod(0o777)
    monkeypatch.chdir(private(tmp_path / "work"))
    monkeypatch.setenv("PYTHONPATH", str(shared))
    assert entry.main([*entry.SUBMITIT_ARGS, str(tmp_path / "folder")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"seml-hydra: not starting the job: PYTHONPATH entry '{shared}'")


def test_the_pickles_submitit_just_wrote_are_judged_before_the_jobs_start(tmp_path):
    from types import SimpleNamespace

    from seml_hydra.launch.submit import job_files_problem

    folder = private(tmp_path / "submitit")
    pkl = folder / "7_0_submitted.pkl"
    pkl.write_bytes(b"x")
    pkl.chmod(0o600)
    job = SimpleNamespace(paths=SimpleNamespace(submitted_pickle=pkl))
    assert job_files_problem([job]) is None
    setfacl("-m", f"u:{OTHER_UID}:rwx", str(folder))  # inherited, say, from a default ACL
    assert job_files_problem([job]) == (
        f"{folder} is a directory users of its ACL (user:{OTHER_UID}:rwx) can write "
        "(mode 0775, no sticky bit)"
    )


def test_a_missing_sbatch_script_says_whether_its_folder_is_gone(tmp_path):
    from seml_hydra.track.outputs import gone_folder_problem

    folder = tmp_path / ".submitit" / "12"
    assert gone_folder_problem([str(folder)], "12") == (
        f"not read: the job's submitit folder {folder} is gone (deleted or replaced after the "
        "launch: the job found neither its pickle nor its sbatch script there)"
    )
    folder.mkdir(parents=True)
    assert gone_folder_problem([str(folder)], "12").startswith(
        f"not read: the submitit folder {folder} holds no sbatch script of job 12"
    )


@pytest.mark.parametrize("option", ["-X pycache_prefix={}", "-Xpycache_prefix={}"])
def test_a_pycache_prefix_option_of_the_python_field_others_can_fill_is_refused(tmp_path, option):
    """``-X pycache_prefix=DIR`` in ``hydra.launcher.python``: Python loads compiled modules
    from DIR from its start (its ``encodings`` too), and the job's isolated start keeps an
    option (it drops ``PYTHONPYCACHEPREFIX``): DIR is judged at launch as that variable is."""
    mine, shared = private(tmp_path / "mine"), private(tmp_path / "shared")
    shared.chmod(0o1777)
    python = f"/usr/bin/python3 -u {option.format(mine)}"
    assert launch_paths_problem({"launcher": {"python": python}}, set(), str(tmp_path)) is None
    python = f"/usr/bin/python3 -u {option.format(shared)}"
    problem = launch_paths_problem({"launcher": {"python": python}}, set(), str(tmp_path))
    assert problem.startswith(f"hydra.launcher.python={python}: -X pycache_prefix={shared}: ")
    assert "compiled modules" in problem and "\n" not in problem


@pytest.mark.parametrize(
    ("name", "value", "opened", "planted"),
    [
        ("BASH_ENV", "{mine}/env.sh", "{mine}", "shell script"),
        ("OPENSSL_CONF", "{mine}/openssl.cnf", "{mine}", "configuration loading a library"),
        ("OPENSSL_MODULES", "{mine}", "{mine}", "shared library"),
        ("GCONV_PATH", "{mine}", "{mine}", "shared library"),
        ("PYTHONHOME", "{mine}", "{mine}/lib", "standard-library module"),
        ("PYTHONPLATLIBDIR", "{mine}", "{mine}/{version}", "standard-library module"),
    ],
)
def test_a_variable_naming_code_the_job_loads_is_judged_where_it_is_read(
    tmp_path, name, value, opened, planted
):
    """Variables whose files or directories a job's shell, interpreter or libraries load code
    from are judged where that code is read: a file (``BASH_ENV``, ``OPENSSL_CONF``) in a
    directory others can add to, the standard library's ``lib``/``lib/pythonX.Y`` under
    ``PYTHONHOME`` (its zip is read from there), an absolute ``PYTHONPLATLIBDIR``'s
    ``pythonX.Y``."""
    import sys

    mine = private(tmp_path / "mine")
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    opened_dir = Path(opened.format(mine=mine, version=version))
    opened_dir.mkdir(parents=True, exist_ok=True)
    env = {name: value.format(mine=mine)}
    assert jobenv.environment_problem(env, str(mine)) is None
    opened_dir.chmod(0o1777)
    problem = jobenv.environment_problem(env, str(mine))
    assert problem is not None and problem.startswith(f"{name} entry ")
    assert str(opened_dir) in problem and planted in problem


def test_a_loader_variable_with_a_dollar_token_is_refused(tmp_path):
    """``$LIB``, ``$PLATFORM`` and ``$ORIGIN`` are expanded by the dynamic loader: the path it
    loads is not the one written, so it cannot be judged."""
    mine = private(tmp_path / "mine")
    for name in ("LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"):
        problem = jobenv.environment_problem({name: f"{mine}/$LIB/libfast.so"}, str(mine))
        assert problem is not None and "$ token the loader expands" in problem
