"""Code snapshots: which files are taken, GridFS storage and deduplication, byte-for-byte
restore, the per-node directory, and `seml <collection> restore-sources`."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import pytest
from support.mongo import snapshot_files as files_of
from support.snapshots import import_value, module_snapshot, registry_of

from seml_hydra.manage.inspection import snapshot_of
from seml_hydra.manage.selection import ManageError
from seml_hydra.store.server import tunnel
from seml_hydra.store.snapshot import node as snapshots
from seml_hydra.store.snapshot import sources


def make_project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src" / "mypkg").mkdir(parents=True)
    (root / "src" / "mypkg" / "model.py").write_text("VALUE = 1\n")
    (root / "train.py").write_text("import mypkg\n")
    (root / "conf" / "model").mkdir(parents=True)
    (root / "conf" / "config.yaml").write_text("x: 1\n")
    (root / "conf" / "model" / "a.yaml").write_text("y: 2\n")
    (root / "conf" / "notes.txt").write_text("not a config\n")
    (root / ".venv" / "lib" / "site-packages" / "dep").mkdir(parents=True)
    (root / ".venv" / "pyvenv.cfg").write_text("home = /usr\n")
    (root / ".venv" / "lib" / "site-packages" / "dep" / "__init__.py").write_text("")
    (root / "env2" / "lib").mkdir(parents=True)
    (root / "env2" / "pyvenv.cfg").write_text("")
    (root / "env2" / "lib" / "x.py").write_text("")
    (root / "big.py").write_bytes(b"#" * 3000)
    (root / "data.bin").write_bytes(b"\0" * 100)
    return root


def test_select_sources_takes_imported_project_modules_and_config_files_only(tmp_path):
    root = make_project(tmp_path)
    modules = [
        str(root / "train.py"),
        str(root / "src" / "mypkg" / "model.py"),
        str(root / ".venv" / "lib" / "site-packages" / "dep" / "__init__.py"),
        str(root / "env2" / "lib" / "x.py"),
        str(root / "big.py"),
        "/usr/lib/python3/os.py",
    ]
    files, skipped = sources.select_sources(modules, [root / "conf"], root, max_file_kb=2)
    assert [f.rel_path for f in files] == [
        "conf/config.yaml",
        "conf/model/a.yaml",
        "src/mypkg/model.py",
        "train.py",
    ]
    assert [Path(p).name for p, _ in skipped] == ["big.py"]
    assert "above the 2 KB cap" in skipped[0][1]


def test_project_root_is_the_git_root_else_the_app_directory(tmp_path):
    import subprocess

    app = tmp_path / "repo" / "apps"
    app.mkdir(parents=True)
    assert sources.project_root(app) == app.resolve()
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    assert sources.project_root(app) == (tmp_path / "repo").resolve()
    assert sources.project_root(app, str(tmp_path)) == tmp_path.resolve()


def test_upload_deduplicates_by_content_and_restore_is_byte_for_byte(test_db, tmp_path):
    root = make_project(tmp_path)
    files, _ = sources.select_sources(
        [str(root / "train.py"), str(root / "src/mypkg/model.py")], [root / "conf"], root
    )
    first = sources.upload_sources(test_db, "col", 1, files)
    second = sources.upload_sources(test_db, "col", 1, files)
    assert first == second
    (root / "train.py").write_text("import mypkg  # edited\n")
    third = sources.upload_sources(test_db, "col", 1, files)
    changed = {rel for (rel, a), (_, b) in zip(first, third) if a != b}
    assert changed == {"train.py"}
    out = tmp_path / "out"
    snapshots.write_sources(test_db, first, out)
    for f in files:
        restored = (out / f.rel_path).read_bytes()
        if f.rel_path != "train.py":
            assert restored == f.path.read_bytes()
    assert (out / "train.py").read_text() == "import mypkg\n"


def test_upload_never_reuses_a_file_of_another_batch(test_db, tmp_path):
    """SEML 0.5.7's ``delete`` removes a batch's files by ``metadata.batch_id``: a batch naming
    another batch's file would lose it, so every batch gets its own copies."""
    root = make_project(tmp_path)
    files, _ = sources.select_sources([str(root / "train.py")], [root / "conf"], root)
    first = sources.upload_sources(test_db, "col", 1, files)
    second = sources.upload_sources(test_db, "col", 2, files)
    assert {i for _, i in first}.isdisjoint({i for _, i in second})
    for _, file_id in second:
        assert test_db["fs.files"].find_one({"_id": file_id})["metadata"]["batch_id"] == 2


def test_write_sources_refuses_paths_outside_the_target(test_db, tmp_path):
    import gridfs

    file_id = gridfs.GridFS(test_db).put(b"x", filename="../evil.py")
    with pytest.raises(snapshots.SourceSnapshotError, match="leaves"):
        snapshots.write_sources(test_db, [["../evil.py", file_id]], tmp_path / "t")


def test_restore_sources_into_a_directory_another_user_can_write_follows_no_link(
    test_db, tmp_path, other_user
):
    """A 0777 target is refused in one line. One that was 0777 while another user planted
    symlinks at the temporary names of the next pids (``.app.py.<pid>.tmp``), a symlink at a
    file of the snapshot and one at a directory of it, all pointing into a victim directory:
    ``restore-sources`` writes nothing there, the linked file is replaced by the snapshot's,
    the linked directory is refused in one line."""
    import shutil

    import gridfs
    from typer.testing import CliRunner

    from seml_hydra.cli import app

    shared = Path(tempfile.mkdtemp(prefix="seml-hydra-test-restore-", dir="/tmp"))
    try:
        shared.chmod(0o755)
        victim = shared / "victim"
        victim.mkdir(mode=0o755)
        (victim / "secret.txt").write_text("VICTIM\n")
        target = shared / "target"
        target.mkdir()
        target.chmod(0o777)
        fs = gridfs.GridFS(test_db)
        snap = [["app.py", fs.put(b"APP\n")], ["lib/util.py", fs.put(b"UTIL\n")]]
        test_db["exps"].insert_one(
            {"_id": 1, "batch_id": 1, "status": "COMPLETED", "seml": {"source_files": snap}}
        )
        pid = os.getpid()
        plant = " && ".join(
            f"ln -s {victim}/written-{p} {target}/.app.py.{p}.tmp"
            for p in range(max(pid - 50, 2), pid + 50)
        )
        other_user.run("sh", "-c", plant, check=True)
        runner = CliRunner()
        result = runner.invoke(app, ["exps", "restore-sources", str(target), "-y"])
        assert result.exit_code == 1 and "every user can write" in result.output
        assert not list(victim.glob("written-*")) and not (target / "app.py").exists()
        target.chmod(0o755)  # closed again: what was planted meanwhile stays
        result = runner.invoke(app, ["exps", "restore-sources", str(target), "-y"])
        assert result.exit_code == 0, result.output
        assert not list(victim.glob("written-*"))
        assert (target / "app.py").read_bytes() == b"APP\n"
        # a file of the snapshot that is a link: the link is replaced, its target untouched
        (target / "app.py").unlink()
        target.chmod(0o777)
        other_user.run("ln", "-s", str(victim / "secret.txt"), str(target / "app.py"), check=True)
        target.chmod(0o755)
        result = runner.invoke(app, ["exps", "restore-sources", str(target), "-y"])
        assert result.exit_code == 0, result.output
        assert (victim / "secret.txt").read_text() == "VICTIM\n"
        assert not (target / "app.py").is_symlink()
        assert (target / "app.py").read_bytes() == b"APP\n"
        # a directory of the snapshot that is a link (out of the target): refused
        shutil.rmtree(target / "lib")
        target.chmod(0o777)
        other_user.run("ln", "-s", str(victim), str(target / "lib"), check=True)
        target.chmod(0o755)
        result = runner.invoke(app, ["exps", "restore-sources", str(target), "-y"])
        assert result.exit_code == 1
        assert "symbolic link" in result.output and "Traceback" not in result.output
        assert sorted(p.name for p in victim.iterdir()) == ["secret.txt"]
        # inside the target, to another directory of it: refused as well
        (target / "lib").unlink()
        (target / "elsewhere").mkdir()
        target.chmod(0o777)
        other_user.run("ln", "-s", str(target / "elsewhere"), str(target / "lib"), check=True)
        target.chmod(0o755)
        result = runner.invoke(app, ["exps", "restore-sources", str(target), "-y"])
        assert result.exit_code == 1 and "symbolic link" in result.output
        assert not list((target / "elsewhere").iterdir())
    finally:
        shutil.rmtree(shared, ignore_errors=True)


@pytest.fixture
def shared_tmp(monkeypatch):
    """A directory like /tmp (mode 1777, every user may create in it) as the temporary
    directory, and no runtime directory set: the snapshots' base is ``<it>/seml-hydra-<uid>``,
    a name another user can take first."""
    import shutil

    shared = Path(tempfile.mkdtemp(prefix="seml-hydra-test-shared-", dir="/tmp"))
    shared.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    monkeypatch.delenv("SEML_HYDRA_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    yield shared
    shutil.rmtree(shared, ignore_errors=True)


def test_materialized_runs_from_the_snapshot_and_keeps_only_its_directory(
    test_db, tmp_path, private_runtime
):
    root = make_project(tmp_path)
    files, _ = sources.select_sources([str(root / "src/mypkg/model.py")], [], root)
    snapshot = sources.upload_sources(test_db, "col", 1, files)
    private_runtime.mkdir(mode=0o700)
    sibling = private_runtime / "other_dir"
    sibling.mkdir()
    cwd = Path.cwd()
    with snapshots.materialized(test_db, snapshot, "7_0") as directory:
        assert directory.parent == private_runtime
        assert directory.stat().st_mode & 0o777 == 0o700
        assert Path.cwd() == cwd  # Hydra decides the working directory, not the snapshot
        assert sys.path[:2] == [str(directory / "src"), str(directory)]
        import importlib

        mypkg_model = importlib.import_module("mypkg.model")
        assert mypkg_model.VALUE == 1
        with snapshots.materialized(test_db, snapshot, "7_0") as again:  # a second rank
            assert again == directory
        assert directory.exists()  # the first rank still uses it
    sys.modules.pop("mypkg.model", None)
    sys.modules.pop("mypkg", None)
    assert Path.cwd() == cwd
    assert directory.exists() and sibling.exists()  # kept for the next tasks of this code
    assert str(directory) not in sys.path


def test_a_kept_snapshot_runs_the_next_wave_without_writing_it_again(
    test_db, tmp_path, private_runtime
):
    """The next task of the same code on the node (the array's next wave, a requeue, a later
    launch of unchanged code) runs from the directory the last task left, within KEEP_S: it
    reads nothing from GridFS (its files are gone here) and writes nothing."""
    import json

    snapshot = module_snapshot(test_db, tmp_path, "kept_a", 1)
    private_runtime.mkdir(mode=0o700)
    with snapshots.materialized(test_db, snapshot, "slurm_9") as first:
        assert import_value("kept_a") == 1
    state = json.loads(registry_of(private_runtime, first).read_text())
    assert state["users"] == [] and time.time() - state["left"] < 60
    test_db["fs.files"].delete_many({})
    test_db["fs.chunks"].delete_many({})
    with snapshots.materialized(test_db, snapshot, "slurm_9") as again:
        assert again == first
        assert import_value("kept_a") == 1


def test_a_kept_snapshot_missing_a_file_or_too_old_is_written_anew_and_removed(
    test_db, tmp_path, private_runtime
):
    """A kept directory a cleaner of old temporary files emptied is not run from: the next
    task writes a new one. One no task came back to within KEEP_S is removed by the next job
    on the node, with its registry and lock; one a running task uses stays."""
    import json
    import socket

    snapshot = module_snapshot(test_db, tmp_path, "kept_b", 1)
    other = module_snapshot(test_db, tmp_path, "kept_c", 2)
    private_runtime.mkdir(mode=0o700)
    with snapshots.materialized(test_db, snapshot, "slurm_10") as first:
        pass
    (first / "kept_b.py").unlink()
    with snapshots.materialized(test_db, snapshot, "slurm_10") as second:
        assert second != first and not first.exists()
        assert import_value("kept_b") == 1
    registry = registry_of(private_runtime, second)
    state = json.loads(registry.read_text())
    state["left"] -= snapshots.KEEP_S + 1
    registry.write_text(json.dumps(state))
    with snapshots.materialized(test_db, other, "slurm_11") as third:
        assert import_value("kept_c") == 2
    assert third.exists() and not second.exists()
    assert not registry.exists() and not registry.with_suffix(".lock").exists()
    assert snapshots.remove_stale_snapshots(private_runtime, socket.gethostname()) == []
    later = time.time() + snapshots.KEEP_S + 1
    cleaned = snapshots.remove_stale_snapshots(private_runtime, socket.gethostname(), now=later)
    assert cleaned == [third.name.rsplit("-", 1)[0]] and not third.exists()


def test_materialized_fails_clearly_when_the_node_cannot_create_the_directory(
    test_db, tmp_path, monkeypatch
):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("")
    monkeypatch.setenv("SEML_HYDRA_RUNTIME_DIR", str(blocker / "runtime"))
    with pytest.raises(snapshots.SourceSnapshotError, match="cannot create the private runtime"):
        with snapshots.materialized(test_db, [], "8_0"):
            pass


def test_a_module_planted_by_another_user_at_the_old_shared_path_is_not_imported(
    test_db, tmp_path, shared_tmp, other_user
):
    """The old predictable ``<tmp>/seml_hydra_src_<key>`` with a counter saying "in use",
    made by another user with a module of the snapshot's name: the job imports its own."""
    snapshot = module_snapshot(test_db, tmp_path, "planted_a", 1)
    key = "semltest_41_0"
    planted = shared_tmp / f"seml_hydra_src_{key}"
    other_user.run(
        "sh",
        "-c",
        f"mkdir -m 755 {planted} && echo 'VALUE = 666' > {planted}/planted_a.py"
        f" && echo 1 > {shared_tmp}/.seml_hydra_src_{key}.users",
        check=True,
    )
    with snapshots.materialized(test_db, snapshot, key) as directory:
        assert import_value("planted_a") == 1
        assert directory.parent == shared_tmp / f"seml-hydra-{os.getuid()}"
        assert str(planted) not in sys.path
    assert (planted / "planted_a.py").exists()  # not ours: left alone


def test_a_lock_another_user_holds_does_not_hang_the_job(test_db, tmp_path, shared_tmp, other_user):
    """Another user holds the old shared lock file of the job's key (``flock``): the job's lock
    is in its private directory, so it starts at once. (The thread join is a guard against the
    old behaviour, a job hanging for ever.)"""
    import subprocess
    import threading

    from support.wait import wait_until

    snapshot = module_snapshot(test_db, tmp_path, "planted_b", 1)
    key = "semltest_42_0"
    lock = shared_tmp / f".seml_hydra_src_{key}.lock"
    holder = subprocess.Popen(
        ["runuser", "-u", other_user.name, "--", "flock", str(lock), "cat"],
        stdin=subprocess.PIPE,
        cwd="/",
    )
    try:
        wait_until("the other user holds the lock", lambda: _is_locked(lock), timeout=30)
        outcome = {}

        def job():
            with snapshots.materialized(test_db, snapshot, key):
                outcome["value"] = import_value("planted_b")

        thread = threading.Thread(target=job, daemon=True)
        thread.start()
        thread.join(60)
        assert not thread.is_alive(), "the job waits for a lock another user holds"
        assert outcome == {"value": 1}
    finally:
        holder.kill()
        holder.wait()


def _is_locked(path: Path) -> bool:
    import fcntl

    if not path.exists():
        return False
    with open(path) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def test_a_lock_that_stays_held_fails_the_job_clearly(
    test_db, tmp_path, private_runtime, monkeypatch
):
    """A rank stuck while holding the node's snapshot lock: the others fail after
    ``LOCK_TIMEOUT_S`` with a message saying so, instead of waiting for ever."""
    import socket
    import subprocess

    from support.wait import wait_until

    snapshot = module_snapshot(test_db, tmp_path, "locked_c", 1)
    private_runtime.mkdir(mode=0o700)
    lock = private_runtime / f"src-slurm_43_0-{socket.gethostname()}.lock"
    holder = subprocess.Popen(["flock", str(lock), "cat"], stdin=subprocess.PIPE)
    try:
        wait_until("a stuck rank holds the lock", lambda: _is_locked(lock), timeout=30)
        monkeypatch.setattr(snapshots, "LOCK_TIMEOUT_S", 0.2)
        with pytest.raises(snapshots.SourceSnapshotError, match="stayed held for"):
            with snapshots.materialized(test_db, snapshot, "slurm_43_0"):
                pass
    finally:
        holder.kill()
        holder.wait()
    assert "locked_c" not in sys.modules


@pytest.fixture
def private_home(monkeypatch):
    """A short private HOME (the fallback runtime directory is under it; short, as a Unix
    socket path has at most 107 bytes)."""
    import shutil

    home = Path(tempfile.mkdtemp(prefix="f3h", dir="/tmp"))
    monkeypatch.setenv("HOME", str(home))
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.mark.parametrize("planted_as", ["open directory", "symlink", "home taken too"])
def test_a_snapshot_base_taken_by_another_user_is_passed_over_with_a_warning(
    test_db, tmp_path, shared_tmp, private_home, other_user, caplog, planted_as
):
    """Another user takes the name of this user's usual base first (a directory of theirs
    holding a module, or a symlink to one): the job still runs, from a private directory
    (under the home, else a fresh one of this process), imports its own module and not the
    planted one, and one warning names the taken path."""
    import logging
    import socket

    snapshot = module_snapshot(test_db, tmp_path, "planted_d", 1)
    base = shared_tmp / f"seml-hydra-{os.getuid()}"
    theirs = shared_tmp / "theirs"
    if planted_as == "symlink":
        plant = f"mkdir -m 777 {theirs} && ln -s {theirs} {base} && target={theirs}"
    else:
        plant = f"mkdir -m 777 {base} && target={base}"
    other_user.run("sh", "-c", f"{plant} && echo 'VALUE = 666' > $target/planted_d.py", check=True)
    fallback = private_home / ".cache" / "seml-hydra" / "run" / socket.gethostname()
    if planted_as == "home taken too":  # (only root could do that in a real home)
        fallback.mkdir(parents=True)
        os.chown(fallback, other_user.uid, other_user.gid)
        fallback.chmod(0o777)
        (fallback / "planted_d.py").write_text("VALUE = 667\n")
    path_before = list(sys.path)
    with caplog.at_level(logging.WARNING, logger="seml_hydra.store.server.tunnel"):
        with snapshots.materialized(test_db, snapshot, f"semltest_44_{len(planted_as)}") as where:
            assert import_value("planted_d") == 1
            if planted_as == "home taken too":
                assert where.parent.parent == shared_tmp
                assert where.parent.name.startswith(f"seml-hydra-{os.getuid()}-")
            else:
                assert where.parent == fallback
            assert tunnel.private_dir_problem(where.parent) is None
    assert sys.path == path_before
    assert "planted_d" not in sys.modules
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(base) in warnings[0]
    assert "Ask the administrator to remove it" in warnings[0]
    if planted_as == "home taken too":
        assert str(fallback) in warnings[0] and "not shared with other processes" in warnings[0]


def test_leftovers_of_killed_jobs_are_removed_and_a_wrapped_pid_never_reuses_one(
    test_db, tmp_path, private_runtime
):
    """Local jobs are keyed by their process id. A killed job left its snapshot (old code)
    and a registry naming a process with this pid but another start time (the pid wrapped
    since): the new job writes a fresh snapshot. Another killed job's leftovers on this host
    are removed; another host's are left alone (its processes cannot be checked here)."""
    import json
    import socket
    import subprocess

    host = socket.gethostname()
    snapshot = module_snapshot(test_db, tmp_path, "stale_e", 1)
    private_runtime.mkdir(mode=0o700)
    key = f"local_{os.getpid()}_0"

    def leftover(stem: str, users: list) -> Path:
        directory = private_runtime / f"{stem}-0123456789abcdef"
        directory.mkdir(mode=0o700)
        (directory / "stale_e.py").write_text("VALUE = 2\n")
        (private_runtime / f"{stem}.json").write_text(
            json.dumps({"dir": directory.name, "users": users})
        )
        (private_runtime / f"{stem}.lock").write_text("")
        return directory

    dead = subprocess.Popen(["true"])
    dead.wait()
    wrapped = leftover(f"src-{key}-{host}", [[os.getpid(), "1"]])
    killed = leftover(f"src-slurm_45_0-{host}", [[dead.pid, None]])
    elsewhere = leftover("src-slurm_46_0-otherhost", [[dead.pid, None]])
    with snapshots.materialized(test_db, snapshot, key) as directory:
        assert directory != wrapped
        assert import_value("stale_e") == 1
        assert not wrapped.exists()
        assert not killed.exists()
        assert not (private_runtime / f"src-slurm_45_0-{host}.json").exists()
        assert not (private_runtime / f"src-slurm_45_0-{host}.lock").exists()
        assert elsewhere.exists()
    assert directory.exists()  # kept for the next tasks of this code
    assert sorted(p.name for p in private_runtime.iterdir() if not p.name.endswith(".lock")) == (
        sorted(
            [
                elsewhere.name,
                "src-slurm_46_0-otherhost.json",
                directory.name,
                f"src-{key}-{host}.json",
            ]
        )
    )


def test_snapshot_of_refuses_several_snapshots_and_names_the_batches():
    docs = [
        {"batch_id": 1, "seml": {"source_files": [["a.py", "id1"]]}},
        {"batch_id": 2, "seml": {"source_files": [["a.py", "id2"]]}},
    ]
    with pytest.raises(ManageError, match="batches 1, 2"):
        snapshot_of(docs)
    assert snapshot_of(docs[:1]) == {"source_files": [["a.py", "id1"]]}
    assert snapshot_of([{"batch_id": 1, "seml": {}}]) is None
    # a launch's manifest, and an older document's list: two snapshots
    manifest = {"batch_id": 3, "seml": {"source_manifest": "m1"}}
    assert snapshot_of([manifest, {**manifest, "batch_id": 4}]) == {"source_manifest": "m1"}
    with pytest.raises(ManageError, match="batches 1, 3"):
        snapshot_of([docs[0], manifest])


def test_restore_sources_command_writes_the_launched_files_and_refuses_bad_selections(
    test_db, tmp_path
):
    from typer.testing import CliRunner

    from seml_hydra.cli import app

    root = make_project(tmp_path)
    files, _ = sources.select_sources([str(root / "train.py")], [root / "conf"], root)
    snap1 = sources.upload_sources(test_db, "exps", 1, files)
    (root / "train.py").write_text("changed\n")
    snap2 = sources.upload_sources(test_db, "exps", 2, files)
    manifest = sources.put_manifest(test_db, "exps", 2, root, snap2)
    gone = sources.put_manifest(test_db, "exps", 3, root, snap2)
    test_db["fs.files"].delete_one({"_id": gone})
    # batch 1 as documents of earlier versions have it (the list in each), batch 2 as a launch
    # stores it now (a manifest the documents name)
    test_db["exps"].insert_many(
        [
            {"_id": 1, "batch_id": 1, "status": "COMPLETED", "seml": {"source_files": snap1}},
            {"_id": 2, "batch_id": 2, "status": "COMPLETED", "seml": {"source_manifest": manifest}},
            {"_id": 3, "batch_id": 3, "status": "COMPLETED", "seml": {"source_manifest": gone}},
        ]
    )
    runner = CliRunner()
    out = tmp_path / "restored"
    result = runner.invoke(app, ["exps", "restore-sources", str(out)])
    assert result.exit_code == 1 and "batches 1, 2, 3" in result.output
    result = runner.invoke(app, ["exps", "restore-sources", str(out), "-b", "3"])
    assert result.exit_code == 1 and f"manifest {gone} is not in GridFS" in result.output
    assert "Traceback" not in result.output and not out.exists()
    result = runner.invoke(app, ["exps", "restore-sources", str(out), "-b", "1"])
    assert result.exit_code == 0, result.output
    assert (out / "train.py").read_text() == "import mypkg\n"
    result = runner.invoke(app, ["exps", "download-sources", str(out), "-b", "2"], input="n\n")
    assert result.exit_code == 1 and "not empty" in result.output
    assert (out / "train.py").read_text() == "import mypkg\n"
    result = runner.invoke(app, ["exps", "download-sources", str(out), "-b", "2", "-y"])
    assert result.exit_code == 0 and (out / "train.py").read_text() == "changed\n"
    result = runner.invoke(app, ["exps", "restore-sources", str(out), "-id", "9"])
    assert result.exit_code == 1 and "No experiments match" in result.output
    assert "Traceback" not in result.output


def test_restore_sources_into_a_path_through_a_symlink_asks_instead_of_a_traceback(
    test_db, tmp_path
):
    """The target is reached through a symbolic link of the user's own (``lnk/out`` with
    ``lnk -> real``) and holds a foreign file: the command asks as for any non-empty target
    (it used to crash computing the foreign file's relative path) and writes on ``y``."""
    from typer.testing import CliRunner

    from seml_hydra.cli import app

    root = make_project(tmp_path)
    files, _ = sources.select_sources([str(root / "train.py")], [root / "conf"], root)
    snapshot = sources.upload_sources(test_db, "exps", 1, files)
    test_db["exps"].insert_one(
        {"_id": 1, "batch_id": 1, "status": "COMPLETED", "seml": {"source_files": snapshot}}
    )
    (tmp_path / "real" / "out").mkdir(parents=True)
    (tmp_path / "real" / "out" / "notes.txt").write_text("mine\n")
    (tmp_path / "lnk").symlink_to(tmp_path / "real")
    target = tmp_path / "lnk" / "out"
    result = CliRunner().invoke(app, ["exps", "restore-sources", str(target)], input="y\n")
    assert result.exit_code == 0, (result.output, result.exception)
    assert "not empty" in result.output and "notes.txt" in result.output
    assert (tmp_path / "real" / "out" / "train.py").read_text() == "import mypkg\n"


@pytest.mark.parametrize("where", ["proc", "under_a_file"])
def test_restore_sources_into_a_place_that_cannot_be_written_is_a_clear_error(
    test_db, tmp_path, where
):
    """``restore-sources /proc/self`` (a directory nobody can create files in) and a target
    under a regular file: the system's reason and the directory, not an OSError traceback."""
    from typer.testing import CliRunner

    from seml_hydra.cli import app

    root = make_project(tmp_path)
    files, _ = sources.select_sources([str(root / "train.py")], [root / "conf"], root)
    snapshot = sources.upload_sources(test_db, "exps", 1, files)
    test_db["exps"].insert_one(
        {"_id": 1, "batch_id": 1, "status": "COMPLETED", "seml": {"source_files": snapshot}}
    )
    (tmp_path / "plain").write_text("a file\n")
    target = "/proc/self" if where == "proc" else str(tmp_path / "plain" / "out")
    for yes in ([], ["-y"]):  # without -y, the look for files not the snapshot's comes first
        result = CliRunner().invoke(app, ["exps", "restore-sources", target, *yes])
        assert result.exit_code == 1, (result.output, result.exception)
        assert result.output.startswith("Error: cannot write "), result.output
        assert not isinstance(result.exception, OSError)


def test_a_snapshot_is_read_in_two_queries_whatever_its_number_of_files(test_db, tmp_path):
    """Jobs read the snapshot at start: one query for the files, one for their chunks (not two
    per file). An empty file and a file of several chunks come back byte for byte."""
    import gridfs
    import pymongo
    from pymongo import monitoring

    from seml_hydra.store.snapshot.node import read_sources

    fs = gridfs.GridFS(test_db)
    contents = {f"pkg/m{i}.py": f"x = {i}\n".encode() for i in range(20)}
    contents["empty.py"] = b""
    contents["big.bin"] = bytes(range(256)) * 2000  # 512 kB: two chunks of 255 kB and a rest
    files = [[name, fs.put(data, chunk_size=255 * 1024)] for name, data in contents.items()]

    class Count(monitoring.CommandListener):
        def __init__(self):
            self.finds = []

        def started(self, event):
            if event.command_name in ("find", "getMore"):
                self.finds.append(event.command.get("find") or event.command.get("collection"))

        def succeeded(self, event):
            pass

        def failed(self, event):
            pass

    listener = Count()
    client = pymongo.MongoClient(test_db.client.address[0], test_db.client.address[1],
                                 event_listeners=[listener])  # fmt: skip
    try:
        out = read_sources(client[test_db.name], files, tmp_path)
    finally:
        client.close()
    assert {str(p.relative_to(tmp_path.resolve())): d for p, d in out} == contents
    assert listener.finds == ["fs.files", "fs.chunks"]


# ------------------------------------------- a delete/drop racing a launch that reuses files


def snapshot_files(root: Path) -> list:
    files, _ = sources.select_sources([str(root / "train.py")], [root / "conf"], root)
    return files


def existing(test_db, snapshot) -> set:
    ids = [file_id for _, file_id in snapshot]
    return {f["_id"] for f in test_db["fs.files"].find({"_id": {"$in": ids}})}


def test_a_file_a_launch_just_reused_survives_a_delete_of_its_last_experiment(test_db, tmp_path):
    """Racy order: the launch reuses (leases) the files of experiment 1, experiment 1 is deleted
    before the launch inserts its documents, then the launch inserts and releases."""
    from seml_hydra.manage.lifecycle import delete

    files = snapshot_files(make_project(tmp_path))
    coll = test_db["race"]
    first = sources.upload_sources(test_db, "race", 1, files)
    coll.insert_one({"_id": 1, "status": "COMPLETED", "seml": {"source_files": first}})
    lease = sources.new_lease()
    second = sources.upload_sources(test_db, "race", 1, files, lease)
    assert second == first  # reused by content hash (within the batch)
    assert delete(coll, {"_id": 1}, cancel_first=False).ids == [1]
    coll.insert_one({"_id": 2, "status": "STAGED", "seml": {"source_files": second}})
    sources.release_lease(test_db, lease["id"])
    assert existing(test_db, second) == {file_id for _, file_id in second}
    assert snapshots.read_sources(test_db, second, tmp_path / "out")  # every file readable
    # released: the last experiment's delete removes them
    assert delete(coll, {"_id": 2}, cancel_first=False).ids == [2]
    assert existing(test_db, second) == set()


def test_a_launch_reusing_a_file_while_a_delete_removes_it_stores_a_new_copy(
    test_db, tmp_path, monkeypatch
):
    """Racy order: the delete has marked experiment 1's files and is checking whether a
    document still names them when the launch looks for a file to reuse; the launch then must
    not reuse the file about to go, and the delete must not remove the launch's files."""
    from seml_hydra.manage.lifecycle import delete

    files = snapshot_files(make_project(tmp_path))
    coll = test_db["race"]
    first = sources.upload_sources(test_db, "race", 1, files)
    coll.insert_one({"_id": 1, "status": "COMPLETED", "seml": {"source_files": first}})
    launched = []
    real = sources.delete_unused_files

    def deleter_interrupted_by_a_launch(db, candidates, used):
        def launch_then_used():
            lease = sources.new_lease()
            launched.extend(sources.upload_sources(db, "race", 1, files, lease))
            coll.insert_one({"_id": 2, "status": "STAGED", "seml": {"source_files": launched}})
            sources.release_lease(db, lease["id"])
            return used()

        return real(db, candidates, launch_then_used)

    monkeypatch.setattr(sources, "delete_unused_files", deleter_interrupted_by_a_launch)
    assert delete(coll, {"_id": 1}, cancel_first=False).ids == [1]
    assert launched and {i for _, i in launched}.isdisjoint({i for _, i in first})
    assert existing(test_db, launched) == {file_id for _, file_id in launched}
    assert existing(test_db, first) == set()  # the deleted experiment's files did go
    assert test_db["fs.files"].count_documents({"metadata.deleting": {"$exists": True}}) == 0


def test_a_lease_of_a_launch_that_died_expires(test_db, tmp_path):
    from datetime import datetime, timedelta, timezone

    from seml_hydra.manage.lifecycle import delete

    files = snapshot_files(make_project(tmp_path))
    coll = test_db["race"]
    old = {"id": "dead", "time": datetime.now(timezone.utc) - timedelta(seconds=sources.LEASE_S)}
    first = sources.upload_sources(test_db, "race", 1, files, old)
    coll.insert_one({"_id": 1, "status": "COMPLETED", "seml": {"source_files": first}})
    assert delete(coll, {}, cancel_first=False).ids == [1]
    assert existing(test_db, first) == set()


@pytest.mark.parametrize("operation", ["delete", "drop"])
def test_a_real_launch_survives_a_delete_or_drop_while_it_stages(test_db, tmp_path, operation):
    """A real ``seml_local`` launch whose staging is interleaved, right before it inserts its
    documents (``seml_hydra.launch.stage.Stager.add_chunk``), with a delete of the experiment whose snapshot files
    it reuses, or a drop of the collection (which also takes payloads no document names): its
    experiment still runs from its payload and snapshot."""
    import subprocess

    from support.paths import ROOT

    app = str(ROOT / "tests/apps/data_app.py")

    def launch(x: int, concurrently: str = "") -> subprocess.CompletedProcess:
        code = "\n".join(
            [
                "import runpy, sys",
                "import seml_hydra.launch.stage as st",
                "from seml_hydra.manage import lifecycle as manage",
                "from seml_hydra.store.db.client import connect",
                "from seml_hydra.store.db.settings import resolve_db_settings",
                "real = st.Stager.add_chunk",
                "def racy(self, *args, **kwargs):",
                "    db = connect(resolve_db_settings(None))",
                f"    {concurrently or 'pass'}",
                "    return real(self, *args, **kwargs)",
                "st.Stager.add_chunk = racy",
                f"sys.argv = [{app!r}, '-m', 'hydra/launcher=seml_local', 'x={x}',",
                f"            'hydra.sweep.dir={tmp_path / 'sweep'}']",
                f"runpy.run_path({app!r}, run_name='__main__')",
            ]
        )
        return subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
        )

    first = launch(1)
    assert first.returncode == 0, first.stderr[-3000:]
    doc = test_db["data_app"].find_one({"config.x": 1})
    assert files_of(test_db, doc)
    racing = {
        "delete": "manage.delete(db['data_app'], {'config.x': 1}, cancel_first=False)",
        "drop": "manage.drop(db, ['data_app'])",
    }[operation]
    second = launch(2, racing)
    assert second.returncode == 0, second.stderr[-3000:] + second.stdout[-2000:]
    (doc,) = list(test_db["data_app"].find())
    assert doc["config"]["x"] == 2 and doc["status"] == "COMPLETED", doc.get("fail_trace")
    assert test_db["fs.files"].count_documents({"metadata.leases.0": {"$exists": True}}) == 0


def test_restore_sources_refuses_a_target_another_user_planted_or_owns(
    test_db, tmp_path, other_user
):
    """``/tmp/<x>/restore`` planted by another user as a link to a project of yours (or a
    directory of theirs on the way): ``restore-sources`` refuses in one line, before writing
    or asking anything; the project's files are untouched. A directory of yours still works."""
    import shutil

    import gridfs
    from typer.testing import CliRunner

    from seml_hydra.cli import app

    shared = Path(tempfile.mkdtemp(prefix="seml-hydra-test-restore-", dir="/tmp"))
    try:
        shared.chmod(0o1777)  # like /tmp: anyone may create entries, not rename ours
        project = tmp_path / "project"
        project.mkdir()
        (project / "app.py").write_text("MY CURRENT CODE\n")
        fs = gridfs.GridFS(test_db)
        snap = [["app.py", fs.put(b"OLD SNAPSHOT\n")]]
        test_db["exps"].insert_one(
            {"_id": 1, "batch_id": 1, "status": "COMPLETED", "seml": {"source_files": snap}}
        )
        planted = shared / "restore"
        other_user.run("ln", "-s", str(project), str(planted), check=True)
        theirs = shared / "theirs"
        other_user.run("mkdir", "-m", "0777", str(theirs), check=True)
        runner = CliRunner()
        for target, part in ((planted, planted), (theirs / "restore", theirs)):
            for extra in ([], ["-y"]):
                result = runner.invoke(app, ["exps", "restore-sources", str(target), *extra])
                assert result.exit_code == 1, result.output
                lines = result.output.strip().splitlines()
                assert len(lines) == 1 and f"{part} is a" in lines[0], result.output
                assert f"of another user (uid {other_user.uid})" in lines[0]
        assert (project / "app.py").read_text() == "MY CURRENT CODE\n"
        assert not (theirs / "restore").exists()
        mine = shared / "mine"
        result = runner.invoke(app, ["exps", "restore-sources", str(mine), "-y"])
        assert result.exit_code == 0, result.output
        assert (mine / "app.py").read_bytes() == b"OLD SNAPSHOT\n"
    finally:
        shutil.rmtree(shared, ignore_errors=True)
