"""Staging in chunks on real services (MongoDB, submitit's local executor): a launch composes,
stages and checks its points ``SEML_HYDRA_STAGE_CHUNK`` at a time (2 here), and keeps every
behaviour of a launch staged at once: duplicates are found across chunks, a launch killed between
two chunks leaves only STAGED experiments (none PENDING without a job) that the next launch
submits once, and a bad point in a later chunk stages nothing and leaves existing experiments
as they were (``tests/apps/chunks_app.py``)."""

from __future__ import annotations

import importlib.util
import signal

import pytest
from support.mongo import statuses
from support.paths import ROOT
from support.run import start_app
from support.wait import wait_until

APP = ROOT / "tests" / "apps" / "chunks_app.py"
FAST = ["hydra.launcher.poll_interval_s=0.3", "hydra.launcher.snapshot=false"]
COLLECTION = "chunks"


@pytest.fixture(autouse=True)
def two_points_a_chunk(monkeypatch):
    monkeypatch.setenv("SEML_HYDRA_STAGE_CHUNK", "2")


def sweep(hydra_sweep_runner, tmp_path, *overrides):
    """The app's multirun in this process (``returns``: Hydra's JobReturn lists)."""
    spec = importlib.util.spec_from_file_location("chunks_app", APP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tmp_path.mkdir(exist_ok=True)
    return hydra_sweep_runner(
        calling_file=str(APP),
        calling_module=None,
        task_function=module.main.__wrapped__,
        config_path="conf_chunks",
        config_name="config",
        overrides=[
            "hydra/launcher=seml_local",
            "hydra/sweeper=seml",
            f"hydra.launcher.collection={COLLECTION}",
            "hydra.job.chdir=True",
            *FAST,
            *overrides,
        ],
        temp_dir=tmp_path,
    )


def test_repeats_across_chunks_are_one_experiment_and_a_relaunch_returns_stored_results(
    hydra_sweep_runner, test_db, tmp_path, capsys
):
    # chunks [1, 2] [1, 3] [2]: the repeats of 1 and 2 come in later chunks
    with sweep(hydra_sweep_runner, tmp_path / "a", "x=1,2,1,3,2") as run:
        first = [(r.overrides, r.return_value) for r in run.returns[0]]
    out = capsys.readouterr().out
    assert "Staged 3 new experiment(s)" in out and "ids 1-3" in out
    assert "2 point(s) repeat another point of this launch" in out
    assert first == [
        (["x=1"], 10),
        (["x=2"], 20),
        (["x=1"], 10),
        (["x=3"], 30),
        (["x=2"], 20),
    ]
    assert sorted(d["config"]["x"] for d in test_db[COLLECTION].find()) == [1, 2, 3]
    # chunks [3, 4] [1, 4]: 3 and 1 are stored (COMPLETED), 4 is new and repeated
    with sweep(hydra_sweep_runner, tmp_path / "b", "x=3,4,1,4") as run:
        second = [(r.overrides, r.return_value) for r in run.returns[0]]
    out = capsys.readouterr().out
    assert "Staged 1 new experiment(s)" in out and "ids 4" in out
    assert "Skipped 2 point(s) already in the collection as COMPLETED" in out
    assert "1 point(s) repeat another point of this launch" in out
    assert second == [(["x=3"], 30), (["x=4"], 40), (["x=1"], 10), (["x=4"], 40)]
    assert test_db[COLLECTION].count_documents({}) == 4


def launch_argv(*overrides: str) -> list[str]:
    return [
        "-m",
        "hydra/launcher=seml_local",
        "hydra/sweeper=seml",
        f"hydra.launcher.collection={COLLECTION}",
        *FAST,
        *overrides,
    ]


def test_a_launch_killed_between_chunks_leaves_staged_experiments_a_relaunch_submits_once(
    test_db, tmp_path
):
    gate = tmp_path / "gate"
    points = ["x=0,1,2,3,4,5", "block_at=4", f"gate={gate}"]
    proc = start_app("tests/apps/chunks_app.py", *launch_argv(*points), cwd=tmp_path)
    try:
        # the launcher composes the third chunk (x=4, 5): the first two are staged
        wait_until("the launcher composes x=4", (tmp_path / "gate.reached").exists, 120, 0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert statuses(test_db[COLLECTION]) == {1: "STAGED", 2: "STAGED", 3: "STAGED", 4: "STAGED"}
    assert test_db[COLLECTION].count_documents({"status": "PENDING"}) == 0
    gate.touch()  # the same sweep again (same config), which does not wait any more
    again = start_app("tests/apps/chunks_app.py", *launch_argv(*points), cwd=tmp_path)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert "Submitting 4 experiment(s) that were already staged: ids 1-4" in out
    assert "Staged 2 new experiment(s)" in out and "ids 5-6" in out
    docs = {d["config"]["x"]: d for d in test_db[COLLECTION].find()}
    assert sorted(docs) == [0, 1, 2, 3, 4, 5]
    assert all(d["status"] == "COMPLETED" and d["result"] == x * 10 for x, d in docs.items())


def test_a_bad_point_in_a_later_chunk_stages_nothing_and_leaves_existing_experiments_alone(
    test_db, tmp_path
):
    common = ["fail_at=7", "raise_at=10"]
    failed = start_app("tests/apps/chunks_app.py", *launch_argv("x=7", *common), cwd=tmp_path)
    failed.communicate(timeout=300)
    (before,) = test_db[COLLECTION].find()
    assert before["status"] == "FAILED"
    # chunks [7, 8] [9, 10]: 7 would be re-run and 8 is staged before x=10 fails to compose
    bad = start_app("tests/apps/chunks_app.py", *launch_argv("x=7,8,9,10", *common), cwd=tmp_path)
    out, err = bad.communicate(timeout=300)
    assert bad.returncode == 1, (out, err)
    assert "point x=10 cannot be composed" in err
    (after,) = test_db[COLLECTION].find()  # 8 was removed again; 7 is still the failed run
    assert after == before
    payloads = test_db["fs.files"].count_documents({"metadata.collection": COLLECTION})
    assert payloads == 1  # the first launch's; the bad launch's payload is deleted again
