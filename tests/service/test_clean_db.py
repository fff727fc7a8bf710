"""``seml <collection> clean-db`` and ``seml clean-db`` on the real MongoDB: what killed
launches and interrupted deletes leave is removed after the question; what an experiment
references, or a launch is staging (leased), stays."""

from __future__ import annotations

import os

import gridfs
import pytest
from typer.testing import CliRunner

from seml_hydra.cli import app
from seml_hydra.store.db.collections import COUNTERS_COLLECTION
from seml_hydra.store.payload import put_payload
from seml_hydra.store.snapshot.sources import (
    SourceFile,
    new_lease,
    put_manifest,
    release_lease,
    upload_sources,
)

runner = CliRunner()


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def seml(*args: str, input: str | None = None):
    return runner.invoke(app, list(args), input=input, prog_name="seml")


def source(db, tmp_path, name, rel, text, batch=1, leased=False):
    path = tmp_path / name / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    lease = new_lease()
    ((_, file_id),) = upload_sources(db, name, batch, [SourceFile(rel, path, len(text))], lease)
    if not leased:
        release_lease(db, lease["id"])
    return file_id


def payload(db, name, leased=False):
    lease = new_lease()
    file_id = put_payload(db, name, b"blob", {}, lease)
    if not leased:
        release_lease(db, lease["id"])
    return file_id


@pytest.fixture
def garbage(test_db, tmp_path):
    """Collection c with one experiment and garbage around it; dropped collections gone (all
    garbage) and staging (a launch holds a lease on its payload)."""
    db, fs = test_db, gridfs.GridFS(test_db)
    kept = {
        "source": source(db, tmp_path, "c", "app.py", "used"),
        "leased_source": source(db, tmp_path, "c", "new.py", "staging", batch=2, leased=True),
        "payload": payload(db, "c"),
        "leased_payload": payload(db, "c", leased=True),
        "artifact": fs.put(b"a", filename="artifact://c/1/model.pt"),
        "unnamed_artifact": fs.put(b"b", filename="artifact://c/1/late.pt"),  # being saved
        "staging_payload": payload(db, "staging", leased=True),
    }
    removed = {
        "source": source(db, tmp_path, "c", "old.py", "orphan"),
        "payload": payload(db, "c"),
        "artifact": fs.put(b"c", filename="artifact://c/9/model.pt"),
        "gone_source": source(db, tmp_path, "gone", "app.py", "dropped"),
    }
    db["c"].insert_one(
        {
            "_id": 1,
            "batch_id": 1,
            "status": "COMPLETED",
            "seml": {"payload_file": kept["payload"], "source_files": [["app.py", kept["source"]]]},
            "artifacts": [{"name": "model.pt", "file_id": kept["artifact"]}],
        }
    )
    db["seml_hydra_metrics.c"].insert_many(
        [
            {"run_id": 1, "name": "a"},
            {"run_id": 9, "name": "a"},
            # an earlier attempt's (attempt history): kept with its experiment, gone with it
            {"attempt_of": 1, "attempt": 1, "name": "a"},
            {"attempt_of": 9, "attempt": 1, "name": "a"},
        ]
    )
    db["seml_hydra_metrics.gone"].insert_one({"run_id": 1, "name": "a"})
    db[COUNTERS_COLLECTION].insert_many(
        [
            {"_id": "c._id", "value": 1},
            {"_id": "gone._id", "value": 3},
            {"_id": "gone.batch_id", "value": 2},
            {"_id": "staging._id", "value": 1},
        ]
    )
    return kept, removed


def file_ids(db) -> set[str]:
    return {str(f["_id"]) for f in db["fs.files"].find({}, {"_id": 1})}


def test_collection_clean_db_asks_then_removes_only_unreferenced(test_db, garbage):
    kept, removed = garbage
    before = file_ids(test_db)
    out = seml("c", "clean-db", input="n\n")
    assert out.exit_code == 1, out.output
    assert "c: 1 source file(s), 1 payload(s), 1 artifact(s), 2 metric(s)" in out.output
    assert file_ids(test_db) == before  # answered no: nothing removed

    out = seml("c", "clean-db", "-y")
    assert out.exit_code == 0, out.output
    assert "Removed c: 1 source file(s), 1 payload(s), 1 artifact(s), 2 metric(s)" in out.output
    left = file_ids(test_db)
    assert {str(i) for i in kept.values()} <= left
    assert {str(removed[k]) for k in ("source", "payload", "artifact")}.isdisjoint(left)
    assert str(removed["gone_source"]) in left  # another collection's
    left_metrics = test_db["seml_hydra_metrics.c"].find({}, {"_id": 0, "name": 0})
    assert sorted(map(str, left_metrics)) == ["{'attempt_of': 1, 'attempt': 1}", "{'run_id': 1}"]
    assert test_db[COUNTERS_COLLECTION].count_documents({}) == 4
    assert test_db["fs.chunks"].count_documents({"files_id": removed["source"]}) == 0

    again = seml("c", "clean-db")
    assert again.exit_code == 0 and "Nothing to clean" in again.output, again.output


def test_clean_db_of_every_collection_removes_what_dropped_ones_left(test_db, garbage):
    kept, removed = garbage
    out = seml("clean-db", "-y")
    assert out.exit_code == 0, out.output
    assert "Removed gone (dropped): 1 source file(s), 1 metric(s), 2 id counter(s)" in out.output
    assert "staging" not in out.output
    left = file_ids(test_db)
    assert {str(i) for i in kept.values()} <= left
    assert {str(i) for i in removed.values()}.isdisjoint(left)
    assert "seml_hydra_metrics.gone" not in test_db.list_collection_names()
    counters = {c["_id"] for c in test_db[COUNTERS_COLLECTION].find()}
    assert counters == {"c._id", "staging._id"}  # staging: a launch holds a lease


def test_clean_db_of_an_unknown_collection_is_one_line_and_exit_1(test_db, garbage):
    out = seml("nosuch", "clean-db", "-y")
    assert out.exit_code == 1, out.output
    assert len(out.output.strip().splitlines()) == 1 and "nosuch" in out.output, out.output


def written_at(db, file_id, when):
    """Give the chunks of GridFS file ``file_id`` ObjectIds of time ``when`` (as if they had
    been written then), keeping their data."""
    from bson import ObjectId

    for chunk in list(db["fs.chunks"].find({"files_id": file_id})):
        db["fs.chunks"].delete_one({"_id": chunk["_id"]})
        old = ObjectId(int(when.timestamp()).to_bytes(4, "big") + os.urandom(8))
        db["fs.chunks"].insert_one({**chunk, "_id": old})


def test_clean_db_removes_old_chunks_of_deleted_files_but_not_an_upload_under_way(test_db):
    """A delete killed between ``fs.files`` and ``fs.chunks`` left chunks of no file: clean-db
    removes them once older than a lease; a file's chunks written just now (an upload under
    way: GridFS writes the file document last) stay, and that upload then completes intact."""
    from datetime import datetime, timedelta, timezone

    db, fs = test_db, gridfs.GridFS(test_db)
    big = bytes(range(256)) * 2500  # 640,000 bytes: 3 chunks of 255 KB
    killed = fs.put(big, filename="old.py")
    written_at(db, killed, datetime.now(timezone.utc) - timedelta(hours=2))
    db["fs.files"].delete_one({"_id": killed})  # the delete was killed here
    just_killed = fs.put(b"x", filename="new.py")
    db["fs.files"].delete_one({"_id": just_killed})  # too young to tell from an upload
    upload = fs.new_file(filename="uploading.bin")
    # pymongo buffers chunks up to a message (48 MB) before it inserts them
    large = os.urandom(2**20) * 50
    upload.write(large)
    assert db["fs.chunks"].count_documents({"files_id": upload._id}) > 0
    assert db["fs.files"].count_documents({"_id": upload._id}) == 0  # not written yet

    out = seml("clean-db", input="n\n")
    assert "GridFS: 3 chunk(s) of 1 deleted file(s)" in out.output, out.output
    assert db["fs.chunks"].count_documents({"files_id": killed}) == 3  # answered no
    out = seml("clean-db", "-y")
    assert out.exit_code == 0, out.output
    assert "Removed GridFS: 3 chunk(s) of 1 deleted file(s)" in out.output
    assert db["fs.chunks"].count_documents({"files_id": killed}) == 0
    assert db["fs.chunks"].count_documents({"files_id": just_killed}) == 1
    upload.close()
    assert fs.get(upload._id).read() == large  # the upload under way was not touched

    db["x"].insert_one({"_id": 1, "status": "STAGED"})
    written_at(db, just_killed, datetime.now(timezone.utc) - timedelta(hours=2))
    out = seml("x", "clean-db", "-y")  # a collection's clean-db removes them too
    assert "Removed GridFS: 1 chunk(s) of 1 deleted file(s)" in out.output, out.output
    assert db["fs.chunks"].count_documents({}) == db["fs.chunks"].count_documents(
        {"files_id": upload._id}
    )


def launch_snapshot(db, tmp_path, name, batch, texts, leased=False):
    """A launch's snapshot of files ``{rel: text}``: its files and its manifest; returns
    ``(manifest id, [file ids])`` as strings."""
    root = tmp_path / f"{name}{batch}"
    files = []
    for rel, text in texts.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
        files.append(SourceFile(rel, root / rel, len(text)))
    lease = new_lease()
    listed = upload_sources(db, name, batch, files, lease)
    manifest = put_manifest(db, name, batch, root, listed, lease)
    if not leased:
        release_lease(db, lease["id"])
    return str(manifest), [str(i) for _, i in listed]


def test_a_launchs_manifest_keeps_its_files_until_no_experiment_names_it(test_db, tmp_path):
    """Experiments name their launch's manifest (``seml.source_manifest``), not the files:
    ``clean-db`` keeps the files a named manifest lists and removes an orphan manifest with
    its files; ``delete`` takes the manifest and its files along with the last experiment
    naming it; a launch still staging (its lease) is left alone."""
    from bson import ObjectId

    from seml_hydra.manage.lifecycle import delete

    db = test_db
    named, named_files = launch_snapshot(db, tmp_path, "m", 1, {"a.py": "A", "pkg/b.py": "B"})
    orphan, orphan_files = launch_snapshot(db, tmp_path, "m", 2, {"a.py": "A2"})
    staging, staging_files = launch_snapshot(db, tmp_path, "m", 3, {"c.py": "C"}, leased=True)
    db["m"].insert_many(
        [
            {
                "_id": i,
                "batch_id": 1,
                "status": "COMPLETED",
                "seml": {"source_manifest": ObjectId(named)},
            }
            for i in (1, 2)
        ]
    )
    out = seml("m", "clean-db", "-y")
    assert out.exit_code == 0, out.output
    assert "Removed m: 1 source file(s)" in out.output
    left = file_ids(db)
    assert {named, *named_files, staging, *staging_files} <= left
    assert {orphan, *orphan_files}.isdisjoint(left)

    delete(db["m"], {"_id": 1})
    assert {named, *named_files} <= file_ids(db)  # experiment 2 still names it
    delete(db["m"], {"_id": 2})
    left = file_ids(db)
    assert {named, *named_files}.isdisjoint(left)
    assert {staging, *staging_files} <= left
