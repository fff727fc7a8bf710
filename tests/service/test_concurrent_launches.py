"""Launches that race each other on the real services (MongoDB, the Slurm testbed).

- Identical launches of one sweep staging at the same moment: each point is stored once and
  run once, and every launcher returns every point's result (those another launch staged
  too): the duplicate check is atomic with the insert (``stage.UNIQUE_INDEX``), which a
  collection holding duplicate hashes already (forced copies, SEML 0.5.7's) still gets.
- A ``delete`` of a launch's experiments while it submits them (here: inside its ``sbatch``,
  the widest window): the launcher says so and cancels the array that would run nothing;
  ``seml queue`` lists such an array of a collection that no experiment names as an orphan,
  and ``seml queue --cancel-orphans`` cancels it (and only it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import (
    ROOT,
    launch_gate,
    run_python,
    sacct,
    squeue_tasks,
    statuses,
    wait_until,
)
from conftest import seml_ok as seml

from seml_hydra.launch.stage import UNIQUE_FIELD, UNIQUE_INDEX, Stager

RACE_APP = ROOT / "tests" / "apps" / "race_app.py"
POINTS = 6


def race_argv(runs: Path) -> list[str]:
    """The command of one launch of the race sweep (:data:`RACE_APP`, :data:`POINTS` points
    into collection ``race``), each run leaving a file in ``runs``."""
    return [
        sys.executable,
        str(RACE_APP),
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.collection=race",
        "hydra.launcher.poll_interval_s=0.3",
        "hydra.launcher.snapshot=false",
        f"runs_dir={runs}",
        f"x={','.join(str(x) for x in range(POINTS))}",
    ]


def assert_each_point_ran_once(coll, runs: Path) -> None:
    """Every point of the race sweep is one COMPLETED document, run once (one file in ``runs``)."""
    assert sorted(d["config"]["x"] for d in coll.find()) == list(range(POINTS))
    assert set(statuses(coll).values()) == {"COMPLETED"}
    ran = sorted(int(name.split("_")[0]) for name in os.listdir(runs))
    assert ran == list(range(POINTS))  # each point ran once, in one job


def result_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("RESULT")]


@pytest.mark.slurm
def test_identical_launches_staging_at_once_store_and_run_each_point_once(slurm, test_db, tmp_path):
    race, runs = tmp_path / "race", tmp_path / "runs"
    race.mkdir()
    runs.mkdir()
    env = {**os.environ, "SEML_TEST_RACE_DIR": str(race), "SEML_TEST_RACE_N": "3"}
    argv = race_argv(runs)
    procs = []
    for n in range(3):  # every launch looks for duplicates before any inserts (race_app.py)
        cwd = tmp_path / f"launch{n}"
        cwd.mkdir()
        procs.append(
            subprocess.Popen(
                argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    try:
        outs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert_each_point_ran_once(test_db["race"], runs)
    expected = [f"RESULT runs_dir={runs} x={x} {x * 10}" for x in range(POINTS)]
    for proc, out in zip(procs, outs):
        assert proc.returncode == 0, out
        assert result_lines(out) == expected, out
    waited = [out for out in outs if "staged at the same moment by another launch" in out]
    assert len(waited) >= 1, outs


@pytest.mark.slurm
def test_a_launch_waiting_for_points_a_killed_launch_staged_submits_and_returns_them(
    slurm, test_db, tmp_path
):
    # launch 1 looks for duplicates first (none), then launch 2 inserts every point and is
    # SIGKILLed before its sbatch; launch 1's inserts are refused (the unique index), so it
    # waits for launch 2's experiments, which nobody else will submit
    race, runs, inserted = tmp_path / "race", tmp_path / "runs", tmp_path / "inserted"
    race.mkdir()
    runs.mkdir()
    env = {**os.environ, "SEML_TEST_RACE_DIR": str(race), "SEML_TEST_RACE_N": "1"}
    first_cwd, second_cwd = tmp_path / "launch1", tmp_path / "launch2"
    first_cwd.mkdir()
    second_cwd.mkdir()
    waiting = subprocess.Popen(
        race_argv(runs),
        cwd=first_cwd,
        env={**env, "SEML_TEST_RACE_WAIT_FOR": str(inserted)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until("the first launch looked for duplicates", lambda: len(os.listdir(race)) == 1)
        killed = subprocess.run(
            race_argv(runs),
            cwd=second_cwd,
            env={**env, "SEML_TEST_RACE_DIE": str(inserted)},
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert killed.returncode == -9, killed.stdout + killed.stderr
        assert "Staged 6 new experiment(s)" in killed.stdout, killed.stdout + killed.stderr
        try:
            out = waiting.communicate(timeout=240)[0]
        except subprocess.TimeoutExpired:
            waiting.kill()
            out = waiting.communicate()[0]
            pytest.fail(f"the launch still waits for experiments nobody submitted:\n{out}")
    finally:
        if waiting.poll() is None:
            waiting.kill()
    assert waiting.returncode == 0, out
    assert "staged at the same moment by another launch" in out, out
    assert_each_point_ran_once(test_db["race"], runs)
    expected = [f"RESULT runs_dir={runs} x={x} {x * 10}" for x in range(POINTS)]
    assert result_lines(out) == expected, out


@pytest.mark.slurm
def test_a_launch_that_takes_another_launchs_staged_points_submits_them_itself(
    slurm, test_db, tmp_path
):
    # launch 1 stages every point and stops before its sbatch; launch 2 (its own sweep dir)
    # finds them STAGED, takes them (its sweep dir, payload and batch) and stops before its
    # sbatch; launch 1 submits first, then launch 2
    runs = tmp_path / "runs"
    race = tmp_path / "race"
    runs.mkdir()
    race.mkdir()
    env = {**os.environ, "SEML_TEST_RACE_DIR": str(race), "SEML_TEST_RACE_N": "1"}
    procs = []
    for n in (1, 2):
        cwd = tmp_path / f"launch{n}"
        cwd.mkdir()
        procs.append(
            subprocess.Popen(
                [*race_argv(runs), f"hydra.sweep.dir={tmp_path / f'sweep{n}'}"],
                cwd=cwd,
                env={**env, "SEML_TEST_RACE_PAUSE": str(tmp_path / f"go{n}")},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
        paused = tmp_path / f"go{n}.paused"
        wait_until(f"launch {n} stops before its sbatch", paused.exists)
    try:
        (tmp_path / "go1").touch()
        wait_until("launch 1 submitted", (tmp_path / "go1.submitted").exists)
        (tmp_path / "go2").touch()
        outs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert "Submitting 6 experiment(s) that were already staged" in outs[1], outs
    expected = [f"RESULT runs_dir={runs} x={x} {x * 10}" for x in range(POINTS)]
    for proc, out in zip(procs, outs):
        assert proc.returncode == 0, out
        assert result_lines(out) == expected, out
    assert_each_point_ran_once(test_db["race"], runs)


def no_refresh(offset: int) -> dict:
    return {}


def hashed(hashes):
    def make(offset: int, exp_id: int) -> dict:
        return {"_id": exp_id, "status": "STAGED", "config_hash": hashes[offset]}

    return make


def test_a_collection_with_duplicate_hashes_gets_the_unique_index_and_force_still_copies(
    db_url, test_db
):
    # SEML 0.5.7's `seml add --force` and our earlier versions left two documents of one hash
    coll = test_db["dups"]
    coll.insert_many([{"_id": i, "status": "COMPLETED", "config_hash": "h"} for i in (1, 2)])
    stager = Stager(test_db, "dups", batch_id=2, force=False)
    stager.add_chunk(["h", "k"], hashed(["h", "k"]), no_refresh)
    result = stager.finish()
    assert UNIQUE_INDEX in coll.index_information()
    assert result.ids == [2, 3] and result.awaited == {"COMPLETED": [2]}
    assert coll.find_one({"_id": 3})[UNIQUE_FIELD] is True
    forced = Stager(test_db, "dups", batch_id=3, force=True)
    forced.add_chunk(["k"], hashed(["k"]), no_refresh)
    assert forced.finish().new_ids == [4]
    assert UNIQUE_FIELD not in coll.find_one({"_id": 4})  # a copy on purpose: not in the index


@pytest.mark.parametrize("overlap", [True, False])
def test_a_point_another_launch_inserted_after_our_look_maps_to_its_experiment(
    db_url, test_db, overlap
):
    coll = test_db["late"]
    first = Stager(test_db, "late", batch_id=1, force=False)
    second = Stager(test_db, "late", batch_id=2, force=False, overlap=overlap)
    second._existing = lambda hashes: []  # it looked before the first launch inserted
    first.add_chunk(["m"], hashed(["m"]), no_refresh)
    assert first.finish().new_ids == [1]
    second.add_chunk(["n", "m", "m"], hashed(["n", "m", "m"]), no_refresh)
    result = second.finish()
    assert result.ids == [2, 1, 1] and result.new_ids == [2] and result.concurrent == [1]
    assert sorted(d["config_hash"] for d in coll.find()) == ["m", "n"]


def sbatch_deleting_first(bindir: Path, collection: str) -> dict[str, str]:
    """An ``sbatch`` in ``bindir`` that runs ``seml <collection> delete -y`` before the real
    one: the experiments go between their move to PENDING and the record of their job. Returns
    the environment that puts it first on ``PATH``."""
    bindir.mkdir()
    seml = Path(sys.executable).with_name("seml")
    script = bindir / "sbatch"
    script.write_text(
        f'#!/bin/sh\n"{seml}" {collection} delete -y >&2 || exit 99\n'
        f'exec "{shutil.which("sbatch")}" "$@"\n'
    )
    script.chmod(0o755)
    return {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.slurm
def test_a_delete_while_the_launch_submits_cancels_its_array_and_is_reported(
    slurm, test_db, tmp_path
):
    runs = tmp_path / "runs"
    runs.mkdir()
    proc = run_python(
        str(RACE_APP),
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.collection=gone",
        "hydra.launcher.wait=false",
        "hydra.launcher.snapshot=false",
        f"runs_dir={runs}",
        "x=0,1,2",
        cwd=tmp_path,
        env=sbatch_deleting_first(tmp_path / "bin", "gone"),
    )
    out = proc.stdout + proc.stderr
    assert test_db["gone"].count_documents({}) == 0, out
    found = re.search(r"Cancelled slurm job\(s\) (\d+) at once: its experiments were deleted", out)
    assert found, out
    assert "3 experiment(s) of this launch were deleted from collection gone" in out
    assert "Submitted" not in out
    array = found.group(1)
    assert not squeue_tasks(array)
    states = wait_until(
        "sacct records the array's end",
        lambda: [s for s in sacct(array, "State").splitlines() if s] or None,
        timeout=60,
    )
    assert all(s.startswith("CANCELLED") for s in states), states
    assert os.listdir(runs) == []  # nothing ran


def sbatch_held(*options: str) -> str:
    """A held two-task array submitted with ``options`` (no experiment of ours); its id."""
    out = subprocess.run(
        ["sbatch", "--parsable", "--hold", "--array=0-1", *options, "--wrap", "true"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.strip().split(";")[0]


@pytest.mark.slurm
def test_queue_lists_an_array_no_experiment_names_and_cancels_only_it(
    slurm, test_db, tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "250")
    # a name no other test's jobs carry as comment (they run as this user too)
    name = f"orphans{os.getpid()}"
    for _ in range(2):  # batches 1 and 2 (the second stages nothing: the same point)
        launch_gate(
            tmp_path,
            f"gate={tmp_path / 'go'}",
            "x=1",
            f"hydra.launcher.collection={name}",
            "hydra.launcher.poll_interval_s=0.3",
        )
    coll = test_db[name]
    doc = coll.find_one({"batch_id": 1})
    ours = str(doc["slurm"][0]["array_id"])
    coll.delete_many({"batch_id": 2})  # as if deleted while submitted: a batch we handed out
    orphan = sbatch_held(f"--comment={name}", f"--job-name={name}_2")
    other = sbatch_held(f"--comment={name}", f"--job-name={name}_9")  # a batch never handed out
    mine = sbatch_held(f"--comment={name}", "--job-name=mine")  # the user's own job, not a batch
    try:
        listing = seml("queue")
        rows = [[c.strip() for c in line.split("│")] for line in listing.splitlines()]
        lines = {r[2]: r[4] for r in rows if len(r) > 4 and r[1] == name}  # job: experiments
        assert lines[f"{orphan}_[0-1]"] == "none (orphan)", listing
        assert lines[f"{other}_[0-1]"] == lines[f"{mine}_[0-1]"] == "", listing
        assert [v for k, v in lines.items() if k.startswith(ours)] == [str(doc["_id"])], listing
        assert "1 array(s) run no experiment" in listing
        assert "seml queue --cancel-orphans" in listing
        out = seml("queue", "--cancel-orphans", "-y")
        assert f"Cancelled 1 orphan array(s): {orphan}." in out
        assert not squeue_tasks(orphan)
        assert squeue_tasks(mine) and squeue_tasks(other) and squeue_tasks(ours)
        assert list(statuses(coll)) == [doc["_id"]]
        assert "No orphan arrays" in seml("queue", "--cancel-orphans", "-y")
    finally:
        subprocess.run(["scancel", ours, orphan, other, mine], capture_output=True)
