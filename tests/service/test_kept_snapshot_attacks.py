"""Attacks on the kept node snapshot (KEEP_S): garbage registries, a task that edits its
own snapshot, files swapped for links."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from support.snapshots import import_value, module_snapshot, registry_of

from seml_hydra.store.snapshot import node as snapshots


@pytest.mark.parametrize("left", [1e308, "Infinity", "future"])
def test_a_registry_left_in_the_future_does_not_keep_a_directory_forever(
    test_db, tmp_path, private_runtime, left
):
    """A registry whose ``left`` lies in the future (a clock stepped back, a garbage or
    infinite value) does not keep its directory past KEEP_S: the next job removes it."""
    import socket

    snapshot = module_snapshot(test_db, tmp_path, "fut_a", 1)
    private_runtime.mkdir(mode=0o700)
    with snapshots.materialized(test_db, snapshot, "slurm_71") as first:
        pass
    registry = registry_of(private_runtime, first)
    state = json.loads(registry.read_text())
    value = {"Infinity": float("inf"), "future": time.time() + 10 * snapshots.KEEP_S}.get(
        left, left
    )
    state["left"] = value
    registry.write_text(json.dumps(state))
    later = time.time() + snapshots.KEEP_S + 1
    snapshots.remove_stale_snapshots(private_runtime, socket.gethostname(), now=later)
    assert not first.exists()


def test_a_task_that_edits_its_snapshot_does_not_hand_the_edit_to_the_next_task(
    test_db, tmp_path, private_runtime
):
    """A task whose code rewrites one of its own snapshot files (its module, through
    ``__file__``) changes only its own run: the next task of the same code imports the
    launched files, as it did when the last task removed the directory."""
    snapshot = module_snapshot(test_db, tmp_path, "edit_a", 1)
    private_runtime.mkdir(mode=0o700)
    with snapshots.materialized(test_db, snapshot, "slurm_72") as first:
        assert import_value("edit_a") == 1
        (first / "edit_a.py").write_text("VALUE = 666\n")
    with snapshots.materialized(test_db, snapshot, "slurm_72"):
        assert import_value("edit_a") == 1


@pytest.mark.xfail(
    strict=True,
    reason="a file a task writes into its snapshot stays in the kept directory, first on "
    "sys.path of the next task of the same code (_complete checks only the snapshot's files)",
)
def test_a_task_that_adds_a_module_to_its_snapshot_does_not_hand_it_to_the_next_task(
    test_db, tmp_path, private_runtime
):
    """A file a task writes into its snapshot directory (first on ``sys.path``) is not
    importable by the next task of the same code."""
    snapshot = module_snapshot(test_db, tmp_path, "edit_b", 1)
    private_runtime.mkdir(mode=0o700)
    with snapshots.materialized(test_db, snapshot, "slurm_73") as first:
        (first / "json_extra_mod.py").write_text("VALUE = 666\n")
    with snapshots.materialized(test_db, snapshot, "slurm_73"):
        with pytest.raises(ImportError):
            import_value("json_extra_mod")


def test_a_kept_file_swapped_for_a_link_or_a_folder_is_written_anew(
    test_db, tmp_path, private_runtime
):
    """A kept file replaced by a symbolic link (even to a file with the same name) or by a
    folder: the next task writes a new directory, it never follows the link."""
    snapshot = module_snapshot(test_db, tmp_path, "swap_a", 1)
    private_runtime.mkdir(mode=0o700)
    with snapshots.materialized(test_db, snapshot, "slurm_74") as first:
        pass
    elsewhere = tmp_path / "elsewhere.py"
    elsewhere.write_text("VALUE = 666\n")
    (first / "swap_a.py").unlink()
    (first / "swap_a.py").symlink_to(elsewhere)
    with snapshots.materialized(test_db, snapshot, "slurm_74") as second:
        assert second != first
        assert import_value("swap_a") == 1
    (second / "swap_a.py").unlink()
    (second / "swap_a.py").mkdir()
    with snapshots.materialized(test_db, snapshot, "slurm_74") as third:
        assert third != second
        assert import_value("swap_a") == 1
    assert os.path.isfile(third / "swap_a.py")


@pytest.fixture
def small_runtime(tmp_path, monkeypatch):
    """A 96 KiB tmpfs as the runtime directory (unmounted afterwards)."""
    import subprocess

    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=96k,mode=0700", "tmpfs", str(mount)], check=True
    )
    monkeypatch.setenv("SEML_HYDRA_RUNTIME_DIR", str(mount))
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def big_snapshot(db, tmp_path: Path, name: str, count: int) -> list:
    """A stored snapshot of ``count`` modules ``<name>_<i>.py`` of ~6 KiB each."""
    from seml_hydra.store.snapshot import sources

    root = tmp_path / f"proj_{name}"
    root.mkdir()
    paths = []
    for i in range(count):
        path = root / f"{name}_{i}.py"
        path.write_text("#" * 6000 + f"\nVALUE = {i}\n")
        paths.append(str(path))
    files, _ = sources.select_sources(paths, [], root)
    return sources.upload_sources(db, "col", 1, files)


def test_a_snapshot_that_fits_only_without_the_kept_ones_is_written(
    test_db, tmp_path, small_runtime
):
    """Kept directories are a cache: a job whose snapshot does not fit beside the snapshots
    other tasks left within KEEP_S removes them (they are not in use) instead of failing, as
    it would not have failed when the last task of each removed its directory."""
    first = big_snapshot(test_db, tmp_path, "full_a", 8)
    second = big_snapshot(test_db, tmp_path, "full_b", 8)
    with snapshots.materialized(test_db, first, "slurm_81") as kept:
        pass
    assert kept.exists()
    with snapshots.materialized(test_db, second, "slurm_82"):
        assert import_value("full_b_3") == 3


def test_a_later_launch_of_unchanged_code_has_another_key_and_writes_its_own_directory(
    test_db, tmp_path, private_runtime
):
    """Every launch (batch) stores its own copies of the files (``upload_sources`` never
    reuses another batch's), so the snapshot key of a later launch of unchanged code differs:
    the kept directory serves the same batch only (the next wave of its array, a requeued or
    restarted task), as the docs say."""
    from seml_hydra.store.snapshot import sources

    root = tmp_path / "proj"
    root.mkdir()
    (root / "same_a.py").write_text("VALUE = 1\n")
    files, _ = sources.select_sources([str(root / "same_a.py")], [], root)
    first = sources.upload_sources(test_db, "col", 1, files)
    again = sources.upload_sources(test_db, "col", 1, files)
    later = sources.upload_sources(test_db, "col", 2, files)
    key = snapshots.snapshot_key("slurm", first)
    assert snapshots.snapshot_key("slurm", again) == key
    assert snapshots.snapshot_key("slurm", later) != key
    private_runtime.mkdir(mode=0o700)
    with snapshots.materialized(test_db, first, key) as kept:
        pass
    with snapshots.materialized(test_db, later, snapshots.snapshot_key("slurm", later)) as new:
        assert new != kept and kept.exists()


@pytest.mark.parametrize(
    "garbage",
    ['"left": 1' + "0" * 400, '"left": 0, "users": [[1' + "0" * 400 + ", null]]"],
    ids=["left", "pid"],
)
def test_a_registry_with_a_number_too_large_for_a_float_is_written_anew(
    test_db, tmp_path, private_runtime, garbage
):
    """A registry holding an integer too large for a float (``left``, a pid) is not well
    formed: the next task writes the snapshot anew and the cleaner removes it, neither fails
    with an OverflowError."""
    import socket

    snapshot = module_snapshot(test_db, tmp_path, "huge_a", 1)
    private_runtime.mkdir(mode=0o700)
    with snapshots.materialized(test_db, snapshot, "slurm_75") as first:
        pass
    registry = registry_of(private_runtime, first)
    text = '{"dir": "' + first.name + '", "users": [], ' + garbage + "}"
    registry.write_text(text)
    with snapshots.materialized(test_db, snapshot, "slurm_75"):
        assert import_value("huge_a") == 1
    registry.write_text(text)
    snapshots.remove_stale_snapshots(private_runtime, socket.gethostname())


def test_a_registry_a_killed_task_was_writing_is_removed_with_its_snapshot(
    test_db, tmp_path, private_runtime
):
    """A task killed while it wrote the registry (its temporary ``.<name>.json.<pid>.tmp``,
    renamed over the registry once written) leaves that file: the cleaner removes it with the
    rest of the snapshot instead of leaving it in the runtime directory forever."""
    import socket

    snapshot = module_snapshot(test_db, tmp_path, "tmpreg_a", 1)
    private_runtime.mkdir(mode=0o700)
    with snapshots.materialized(test_db, snapshot, "slurm_76") as first:
        pass
    registry = registry_of(private_runtime, first)
    leftover = registry.with_name(f".{registry.name}.999999.tmp")
    leftover.write_text('{"dir": ')
    later = time.time() + snapshots.KEEP_S + 1
    snapshots.remove_stale_snapshots(private_runtime, socket.gethostname(), now=later)
    assert sorted(p.name for p in private_runtime.iterdir()) == []


def test_a_snapshot_entry_the_cleaner_cannot_remove_fails_no_other_job(
    test_db, tmp_path, private_runtime
):
    """Something of another snapshot name the cleaner cannot remove (here a folder where its
    registry goes) is left alone with a warning: the jobs of other snapshots start, run and
    leave (the cleaner now also runs when a task leaves, after its run)."""
    import socket

    private_runtime.mkdir(mode=0o700)
    stuck = private_runtime / f"src-slurm_77-{socket.gethostname()}.json"
    stuck.mkdir()
    (stuck / "x").write_text("")
    stuck.with_suffix(".lock").write_text("")
    snapshot = module_snapshot(test_db, tmp_path, "stuck_a", 1)
    with snapshots.materialized(test_db, snapshot, "slurm_78"):
        assert import_value("stuck_a") == 1


def test_a_kept_folder_swapped_for_a_link_is_not_followed(test_db, tmp_path, private_runtime):
    """A folder of a kept directory replaced by a symbolic link to a folder holding files of
    the same names: the next task writes a new directory instead of importing through it."""
    from seml_hydra.store.snapshot import sources

    root = tmp_path / "proj"
    (root / "linkpkg_a").mkdir(parents=True)
    (root / "linkpkg_a" / "__init__.py").write_text("VALUE = 1\n")
    files, _ = sources.select_sources([str(root / "linkpkg_a" / "__init__.py")], [], root)
    snapshot = sources.upload_sources(test_db, "col", 1, files)
    private_runtime.mkdir(mode=0o700)
    with snapshots.materialized(test_db, snapshot, "slurm_79") as first:
        pass
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "__init__.py").write_text("VALUE = 666\n")
    import shutil

    shutil.rmtree(first / "linkpkg_a")
    (first / "linkpkg_a").symlink_to(elsewhere)
    with snapshots.materialized(test_db, snapshot, "slurm_79") as second:
        assert second != first
        assert import_value("linkpkg_a") == 1


def test_a_registry_naming_a_link_to_a_folder_is_written_anew(test_db, tmp_path, private_runtime):
    """The directory a kept registry names swapped for a symbolic link to a complete copy:
    the next task writes a new directory of its own (the link is not run from, and the job
    does not fail on it)."""
    import shutil

    snapshot = module_snapshot(test_db, tmp_path, "dirlink_a", 1)
    private_runtime.mkdir(mode=0o700)
    with snapshots.materialized(test_db, snapshot, "slurm_80") as first:
        pass
    copy = tmp_path / "copy"
    shutil.copytree(first, copy)
    (copy / "dirlink_a.py").write_text("VALUE = 666\n")
    shutil.rmtree(first)
    first.symlink_to(copy)
    with snapshots.materialized(test_db, snapshot, "slurm_80") as second:
        assert second != first
        assert import_value("dirlink_a") == 1
