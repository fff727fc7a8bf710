"""The pure parts of ``reload-sources`` (manage.reload) and ``clean-db`` (manage.clean)."""

from __future__ import annotations

from seml_hydra.manage.clean import Garbage, artifact_run_id, counter_owner
from seml_hydra.manage.reload import module_candidates, refusal, split_reloadable
from seml_hydra.store.snapshot.sources import config_dirs_of


def test_split_reloadable_keeps_staged_failed_killed_interrupted_and_old_queued():
    docs = [
        {"_id": 1, "status": "FAILED"},
        {"_id": 2, "status": "COMPLETED"},
        {"_id": 3, "status": "QUEUED"},
        {"_id": 4, "status": "RUNNING"},
        {"_id": 5, "status": "COMPLETED"},
        {"_id": 6, "status": "INTERRUPTED"},
    ]
    ok, other = split_reloadable(docs)
    assert [d["_id"] for d in ok] == [1, 3, 6]
    assert other == {"COMPLETED": [2, 5], "RUNNING": [4]}


def test_refusal_names_the_states_and_ids_in_one_line():
    line = refusal({"RUNNING": [4], "COMPLETED": [2, 3]})
    assert line == (
        "reload-sources replaces the code of STAGED, FAILED, KILLED, INTERRUPTED experiments "
        "only; the selected ones are 2 COMPLETED (2-3), 1 RUNNING (4)."
    )


def test_module_candidates_old_modules_their_new_siblings_and_missing_ones(tmp_path):
    (tmp_path / "pkg").mkdir()
    for rel in ("app.py", "pkg/a.py", "pkg/new.py", "other/x.py"):
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text("")
    found, missing = module_candidates(
        ["app.py", "pkg/a.py", "pkg/gone.py", "conf/config.yaml"], tmp_path
    )
    assert found == sorted(str(tmp_path / r) for r in ("app.py", "pkg/a.py", "pkg/new.py"))
    assert missing == ["pkg/gone.py"]


def test_config_dirs_of_takes_the_apps_own_file_config_sources():
    hydra = {
        "runtime": {
            "config_sources": [
                {"provider": "main", "schema": "file", "path": "/p/conf"},
                {"provider": "hydra", "schema": "pkg", "path": "hydra.conf"},
                {"provider": "main", "schema": "pkg", "path": "app.conf"},
            ]
        }
    }
    assert config_dirs_of(hydra) == ["/p/conf"]
    assert config_dirs_of({}) == []


def test_artifact_run_id_and_counter_owner():
    assert artifact_run_id("artifact://c/12/model.pt", "c") == 12
    assert artifact_run_id("artifact://c/abc/model.pt", "c") == "abc"
    assert artifact_run_id("artifact://cc/12/model.pt", "c") is None
    assert artifact_run_id("artifact://c//x", "c") is None
    assert counter_owner("my.col._id") == "my.col"
    assert counter_owner("c.batch_id") == "c"
    assert counter_owner("._id") is None and counter_owner(3) is None


def test_garbage_describe_and_empty():
    assert Garbage("c").empty()
    g = Garbage("c", exists=False, source_files=[1, 2], metrics=3, counters=["c._id"])
    assert not g.empty()
    assert g.describe() == "c (dropped): 2 source file(s), 3 metric(s), 1 id counter(s)"


def test_chunks_without_a_file_are_abandoned_only_when_all_are_older_than_the_cutoff():
    from datetime import datetime, timedelta, timezone

    from bson import ObjectId

    from seml_hydra.store.snapshot.sources import chunks_abandoned

    now = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    old, new = ObjectId.from_datetime(now - timedelta(hours=2)), ObjectId.from_datetime(now)
    cutoff = now - timedelta(hours=1)
    assert chunks_abandoned([old, old], cutoff)
    assert not chunks_abandoned([old, new], cutoff)  # an upload still writing: its last chunk
    assert not chunks_abandoned([], cutoff)
    assert not chunks_abandoned([old, 7], cutoff)  # an id without a time: kept
