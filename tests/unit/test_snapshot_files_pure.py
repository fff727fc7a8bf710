"""Which files a code snapshot takes, how the job's ``sys.path`` is mapped onto it, and what a
run lists as Sacred's sources (pure functions, and ``git`` in a temporary repository)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from seml_hydra.store.snapshot.node import imported_files, legacy_root, snapshot_path
from seml_hydra.store.snapshot.sources import left_out_line, project_python_files, select_sources


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def test_project_files_are_git_tracked_and_untracked_unignored_python_files(tmp_path):
    root = tmp_path / "proj"
    (root / "sub").mkdir(parents=True)
    (root / ".venv" / "lib").mkdir(parents=True)
    (root / "tracked.py").write_text("A = 1\n")
    (root / "sub" / "lazy.py").write_text("B = 1\n")  # untracked, not ignored
    (root / "ignored.py").write_text("C = 1\n")
    (root / ".venv" / "lib" / "dep.py").write_text("D = 1\n")
    (root / "data.csv").write_text("1,2\n")
    (root / ".gitignore").write_text("ignored.py\n.venv/\n")
    git(root, "init", "-q")
    git(root, "add", "tracked.py", ".gitignore")
    found, note = project_python_files(root)
    assert sorted(Path(p).relative_to(root).as_posix() for p in found) == [
        "sub/lazy.py",
        "tracked.py",
    ]
    assert note == "git-ignored files"


def test_a_project_outside_git_is_walked_without_hidden_folders_and_virtualenvs(tmp_path):
    root = tmp_path / "plain"
    (root / "pkg").mkdir(parents=True)
    (root / "env").mkdir()
    (root / "env" / "pyvenv.cfg").write_text("")
    (root / ".hidden").mkdir()
    for rel in ("app.py", "pkg/mod.py", "env/dep.py", ".hidden/x.py", "pkg/notes.txt"):
        (root / rel).write_text("")
    found, note = project_python_files(root)
    assert sorted(Path(p).relative_to(root).as_posix() for p in found) == ["app.py", "pkg/mod.py"]
    assert note == "hidden folders and virtualenvs"


def test_a_large_folder_outside_git_is_walked_only_so_far_and_the_line_says_so(
    tmp_path, monkeypatch
):
    from seml_hydra.store.snapshot import sources

    monkeypatch.setattr(sources, "MAX_WALKED_ENTRIES", 5)
    for i in range(8):
        (tmp_path / f"data{i}.bin").write_text("")
    (tmp_path / "app.py").write_text("")
    found, note = project_python_files(tmp_path)
    assert found == [str(tmp_path / "app.py")]
    assert "past the first 5 entries" in note and "hydra.launcher.project_root" in note


def test_select_sources_takes_the_project_files_and_passes_over_deleted_ones(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "big.py").write_text("#" * 3000)
    files, skipped = select_sources(
        [],
        [],
        tmp_path,
        max_file_kb=2,
        project_files=[str(tmp_path / "a.py"), str(tmp_path / "big.py"), str(tmp_path / "gone.py")],
    )
    assert [f.rel_path for f in files] == ["a.py"]
    assert [Path(p).name for p, _ in skipped] == ["big.py"]


def test_the_left_out_line_says_what_and_why_in_one_line():
    skipped = [(f"/p/f{i}.py", "big") for i in range(5)]
    line = left_out_line(skipped, "git-ignored files", 1024)
    assert "\n" not in line
    assert line == (
        "Not in the code snapshot: 5 file(s) above 1024 KB (f0.py, f1.py, f2.py and 2 more); "
        "git-ignored files; files other than .py and the Hydra config's YAML."
    )
    assert left_out_line([], None, 1024) == (
        "Not in the code snapshot: files other than .py and the Hydra config's YAML."
    )


def test_sys_path_entries_in_the_live_project_point_into_the_snapshot(tmp_path):
    root = tmp_path / "proj"
    (root / ".venv" / "lib" / "site-packages").mkdir(parents=True)
    (root / ".venv" / "pyvenv.cfg").write_text("")
    (root / "sub").mkdir()
    snap = tmp_path / "snap"
    entries = [
        "",  # the working directory: the project root here
        str(root / "sub"),
        str(root / ".venv" / "lib" / "site-packages"),
        "/usr/lib/python3.11",
        str(root),
    ]
    assert snapshot_path(entries, str(root), snap, str(root)) == [
        str(snap),
        str(snap / "sub"),
        str(root / ".venv" / "lib" / "site-packages"),
        "/usr/lib/python3.11",
        str(snap),
    ]
    assert snapshot_path(entries, None, snap, str(root)) == entries
    # launched from outside the project: the working directory is not mapped
    assert snapshot_path([""], str(root), snap, str(tmp_path))[0] == ""
    # the interpreter's own folders stay, whatever root a forged manifest names
    stdlib = str(tmp_path / "usr" / "lib" / "python3.11")
    assert snapshot_path([stdlib], "/", snap, "/", interpreter=[str(tmp_path / "usr")]) == [stdlib]


def test_the_root_of_an_older_document_comes_from_its_script_and_main_file():
    seml = {"executable": "/p/proj/sub/app.py", "main_file": "sub/app.py"}
    assert legacy_root(seml) == "/p/proj"
    assert legacy_root({"executable": "/p/app.py", "main_file": "sub/app.py"}) is None
    assert legacy_root({"executable": "/p/app.py"}) is None


def test_a_run_lists_the_snapshot_files_of_its_loaded_modules(tmp_path):
    files = [["app.py", 1], ["helper.py", 2], ["lazy.py", 3], ["conf/config.yaml", 4]]
    loaded = [str(tmp_path / "app.py"), str(tmp_path / "helper.py"), "/usr/lib/os.py"]
    assert imported_files(files, tmp_path, loaded) == [["app.py", 1], ["helper.py", 2]]


def test_a_run_lists_its_snapshot_files_through_a_linked_snapshot_path(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    files = [["app.py", 1], ["helper.py", 2]]
    # imported through the path as materialized gave it (a link), resolved to the snapshot
    loaded = [str(tmp_path / "link" / "helper.py"), str(tmp_path / "elsewhere" / "app.py")]
    assert imported_files(files, tmp_path / "link", loaded) == [["helper.py", 2]]
    assert imported_files(files, real, [str(real / "app.py")]) == [["app.py", 1]]
