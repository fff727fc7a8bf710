"""``seml <collection> reload-sources`` on the real MongoDB, and on the Slurm testbed: a job
that failed on a bug runs the fixed code after reload-sources, reset and start."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_app, snapshot_files, wait_until
from typer.testing import CliRunner

from seml_hydra.cli import app
from seml_hydra.store.payload import put_payload
from seml_hydra.store.snapshot.sources import (
    new_lease,
    put_manifest,
    release_lease,
    select_sources,
    upload_sources,
)

runner = CliRunner()

APP = """
import hydra
import helper


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    return {"value": helper.value(), "x": cfg.x}


if __name__ == "__main__":
    main()
"""


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def seml(*args: str, input: str | None = None):
    return runner.invoke(app, list(args), prog_name="seml", input=input)


def write_project(root: Path) -> Path:
    (root / "conf").mkdir(parents=True)
    (root / "conf" / "config.yaml").write_text("x: 1\n")
    (root / "helper.py").write_text("def value():\n    raise RuntimeError('the bug')\n")
    (root / "app.py").write_text(APP)
    return root / "app.py"


def fix_project(root: Path) -> None:
    """The fix: helper.py imports a module that is new beside it."""
    (root / "extra.py").write_text("VALUE = 2\n")
    (root / "helper.py").write_text("import extra\n\n\ndef value():\n    return extra.VALUE\n")


def helper_files(db, name: str) -> int:
    return db["fs.files"].count_documents(
        {"filename": "helper.py", "metadata.collection_name": name}
    )


def test_a_failed_job_runs_the_reloaded_code_after_reset_and_start(slurm, test_db, tmp_path):
    app_py = write_project(tmp_path / "proj")
    run_app(
        app_py,
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.wait=false",
        cwd=app_py.parent,
        timeout=120,
        check=True,
    )
    coll = test_db["app"]
    doc = wait_until(
        "the job fails on the bug", lambda: coll.find_one({"status": "FAILED"}), timeout=240
    )
    assert "the bug" in "".join(doc.get("fail_trace") or [])
    fix_project(app_py.parent)
    out = seml("app", "reload-sources", "-y")
    assert out.exit_code == 0, out.output
    assert (
        "Reloaded the sources of 1 experiment(s) (1) of batch 1: 4 file(s), 2 new or changed"
        in out.output
    )
    assert "Removed 1 old source file(s)" in out.output
    assert helper_files(test_db, "app") == 1  # the old helper.py is gone from GridFS
    assert seml("app", "reset", "-y").exit_code == 0
    started = seml("app", "start")
    assert started.exit_code == 0, started.output
    done = wait_until(
        "the reloaded experiment completes",
        lambda: coll.find_one({"_id": 1, "status": {"$in": ["COMPLETED", "FAILED", "KILLED"]}}),
        timeout=240,
    )
    assert done["status"] == "COMPLETED", done.get("fail_trace")
    assert done["result"] == {"value": 2, "x": 1}


# ------------------------------------------------------------------ without Slurm


@pytest.fixture(params=["manifest", "list"])
def staged(test_db, tmp_path, request):
    """A batch of 3 experiments (1 FAILED, 2 COMPLETED, 3 STAGED) as a launch stores them: the
    file list once, in a manifest the documents name, or (documents of earlier versions) in
    each document."""
    app_py = write_project(tmp_path / "proj")
    root = app_py.parent
    lease = new_lease()
    base = {
        "runtime": {
            "config_sources": [{"provider": "main", "schema": "file", "path": str(root / "conf")}]
        },
        "launcher": {},
    }
    payload = put_payload(test_db, "c", b"not used", base, lease)
    files, _ = select_sources(
        [str(root / "app.py"), str(root / "helper.py")], [root / "conf"], root
    )
    source_files = upload_sources(test_db, "c", 1, files, lease)
    snapshot = {"source_files": source_files}
    if request.param == "manifest":
        snapshot = {"source_manifest": put_manifest(test_db, "c", 1, root, source_files, lease)}
    release_lease(test_db, lease["id"])
    seml_block = {
        "executable": str(app_py),
        "working_dir": str(root),
        "payload_file": payload,
        **snapshot,
    }
    test_db["c"].insert_many(
        [
            {"_id": i, "batch_id": 1, "status": s, "config": {"x": 1}, "seml": seml_block}
            for i, s in ((1, "FAILED"), (2, "COMPLETED"), (3, "STAGED"), (4, "RUNNING"))
        ]
    )
    return root


def snapshot_ids(db, exp_id) -> dict[str, str]:
    doc = db["c"].find_one({"_id": exp_id})
    return {rel: str(fid) for rel, fid in snapshot_files(db, doc)}


def test_reload_replaces_only_reloadable_snapshots_and_keeps_files_still_used(test_db, staged):
    before = snapshot_ids(test_db, 2)
    fix_project(staged)
    out = seml("c", "reload-sources", "-y")
    assert out.exit_code == 0, out.output
    assert "Left alone 1 COMPLETED experiment(s) (2)" in out.output
    assert "Left alone 1 RUNNING experiment(s) (4)" in out.output
    assert "of batch 1: 4 file(s), 2 new or changed (extra.py, helper.py)" in out.output
    assert snapshot_ids(test_db, 2) == snapshot_ids(test_db, 4) == before  # their code stays
    after = snapshot_ids(test_db, 1)
    assert after == snapshot_ids(test_db, 3)
    assert after["app.py"] == before["app.py"] and after["helper.py"] != before["helper.py"]
    assert helper_files(test_db, "c") == 2  # the COMPLETED one still names the old file
    assert "Removed" not in out.output


def test_reload_removes_old_files_unless_keep_old(test_db, staged):
    fix_project(staged)
    out = seml("c", "reload-sources", "-s", "FAILED,STAGED", "--keep-old", "-y")
    assert out.exit_code == 0, out.output
    test_db["c"].delete_many({"_id": {"$in": [2, 4]}})
    assert helper_files(test_db, "c") == 2  # kept: --keep-old
    (staged / "helper.py").write_text("def value():\n    return 3\n")
    out = seml("c", "reload-sources", "-y")
    assert out.exit_code == 0, out.output
    # the snapshot it replaced goes; the one --keep-old kept stays (clean-db removes it)
    assert "Removed 1 old source file(s) no experiment uses." in out.output
    assert helper_files(test_db, "c") == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-id", "99"], "No experiments in c match."),
        (
            ["-id", "2"],
            "reload-sources replaces the code of STAGED, FAILED, KILLED, INTERRUPTED "
            "experiments only; the selected ones are 1 COMPLETED (2).",
        ),
        (["-s", "RUNNING"], "This command works on experiments in the states STAGED, FAILED"),
        (["-b", "7"], "No experiments in c match."),
    ],
)
def test_reload_bad_input_is_one_line_and_exit_1(test_db, staged, args, message):
    out = seml("c", "reload-sources", *args)
    assert out.exit_code == 1, out.output
    assert message in out.output
    assert len(out.output.strip().splitlines()) == 1, out.output


def test_reload_of_a_moved_project_says_so(test_db, staged):
    for path in sorted(staged.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    staged.rmdir()
    out = seml("c", "reload-sources", "-id", "1")
    assert out.exit_code == 1 and "is not on this machine" in out.output, out.output


def test_reload_of_experiments_seml_staged_says_so(test_db, staged):
    test_db["c"].update_many({}, {"$unset": {"seml.payload_file": ""}})
    out = seml("c", "reload-sources", "-id", "1")
    assert out.exit_code == 1 and "SEML staged them" in out.output, out.output
    assert len(out.output.strip().splitlines()) == 1


def test_reload_shows_the_root_and_asks_and_no_uploads_nothing(test_db, staged):
    before = snapshot_ids(test_db, 1)
    files = test_db["fs.files"].count_documents({})
    fix_project(staged)
    out = seml("c", "reload-sources", input="n\n")
    assert out.exit_code == 1, out.output
    joined = out.output.replace("\n", "")  # rich may wrap the line
    assert "4 file(s) from the project root" in joined and str(staged) in joined
    assert "Upload them into the database" in out.output and "Aborted" in out.output
    assert test_db["fs.files"].count_documents({}) == files  # nothing uploaded
    assert snapshot_ids(test_db, 1) == before
    out = seml("c", "reload-sources", input="y\n")
    assert out.exit_code == 0 and "2 new or changed" in out.output, out.output


def test_reload_refuses_a_config_dir_outside_the_project_root(test_db, staged, tmp_path):
    """A forged payload's config dir (a user's home, say) is refused before anything is read."""
    outside = tmp_path / "home"
    (outside / ".config").mkdir(parents=True)
    (outside / ".config" / "hosts.yml").write_text("token: secret\n")
    base = {
        "runtime": {
            "config_sources": [{"provider": "main", "schema": "file", "path": str(outside)}]
        },
        "launcher": {},
    }
    lease = new_lease()
    payload = put_payload(test_db, "c", b"not used", base, lease)
    release_lease(test_db, lease["id"])
    test_db["c"].update_many({}, {"$set": {"seml.payload_file": payload}})
    files = test_db["fs.files"].count_documents({})
    out = seml("c", "reload-sources", "-y")
    assert out.exit_code == 1, out.output
    assert "is not inside its project root" in out.output
    assert len(out.output.strip().splitlines()) == 1, out.output
    assert test_db["fs.files"].count_documents({}) == files
