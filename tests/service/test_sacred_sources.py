"""Sacred's ``experiment.sources`` copies of a code snapshot
(``seml_hydra.store.snapshot.sacred_sources.sacred_source_copies``): found or stored in a few queries
whatever the snapshot's size. Real MongoDB."""

from __future__ import annotations

import gridfs
import pymongo
from conftest import MONGO_URL
from pymongo import monitoring

from seml_hydra.store.snapshot.sacred_sources import SACRED_SOURCE_KIND, sacred_source_copies
from seml_hydra.store.snapshot.sources import SourceFile, upload_sources


class Commands(monitoring.CommandListener):
    """The names of the commands a client sent."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event) -> None:
        self.names.append(event.command_name)

    def succeeded(self, event) -> None:
        pass

    def failed(self, event) -> None:
        pass


def snapshot(test_db, tmp_path, n: int) -> list[list]:
    files = []
    for i in range(n):
        path = tmp_path / f"m{i}.py"
        path.write_text(f"X = {i}\n")
        files.append(SourceFile(f"pkg/m{i}.py", path, path.stat().st_size))
    return upload_sources(test_db, "coll", 1, files)


def test_a_snapshot_of_many_files_finds_its_existing_copies_in_two_queries(test_db, tmp_path):
    source_files = snapshot(test_db, tmp_path, 40)
    commands = Commands()
    client = pymongo.MongoClient(MONGO_URL, event_listeners=[commands])
    db = client[test_db.name]
    try:
        first = sacred_source_copies(db, source_files)  # stores the copies (GridFS puts)
        commands.names.clear()
        again = sacred_source_copies(db, source_files)
        # every copy exists: nothing read or stored
        assert commands.names == ["find", "aggregate"]
    finally:
        client.close()
    assert again == first
    assert [rel for rel, _ in first] == [rel for rel, _ in source_files]
    fs = gridfs.GridFS(test_db)
    assert [fs.get(i).read() for _, i in first] == [fs.get(i).read() for _, i in source_files]
    assert test_db["fs.files"].count_documents({"metadata.kind": SACRED_SOURCE_KIND}) == 40


def test_a_snapshot_file_without_a_recorded_hash_or_gone_from_gridfs(test_db, tmp_path):
    source_files = snapshot(test_db, tmp_path, 3)
    copies = sacred_source_copies(test_db, source_files)
    old, gone = source_files[0][1], source_files[2][1]
    test_db["fs.files"].update_one({"_id": old}, {"$unset": {"metadata.content_hash": ""}})
    gridfs.GridFS(test_db).delete(gone)
    # the one without a hash is read and matched to its existing copy; the gone one is left out
    assert sacred_source_copies(test_db, source_files) == copies[:2]
    assert test_db["fs.files"].count_documents({"metadata.kind": SACRED_SOURCE_KIND}) == 3


def test_many_copies_of_each_file_are_found_in_one_answer_the_oldest_each(test_db, tmp_path):
    """Runs of a wave that start at the same time may each store the copies (here four of
    each of 60 files, 240 in all): the lookup still takes two queries (no getMore for the
    copies beyond the first 101) and every run names the oldest copy of each file."""
    source_files = snapshot(test_db, tmp_path, 60)
    first = sacred_source_copies(test_db, source_files)
    fs = gridfs.GridFS(test_db)
    for rel, copy_id in first:
        copy = test_db["fs.files"].find_one({"_id": copy_id})
        for _ in range(3):
            fs.put(fs.get(copy_id).read(), filename=rel, metadata=copy["metadata"])
    assert test_db["fs.files"].count_documents({"metadata.kind": SACRED_SOURCE_KIND}) == 240
    commands = Commands()
    client = pymongo.MongoClient(MONGO_URL, event_listeners=[commands])
    try:
        again = sacred_source_copies(client[test_db.name], source_files)
        assert commands.names == ["find", "aggregate"]
    finally:
        client.close()
    assert again == first  # the oldest: the ones stored first
