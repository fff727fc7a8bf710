"""Multi-node / multi-task experiments end to end on the testbed (real Slurm, real MongoDB).

Every sweep point of ``examples/ranks.py`` is ONE experiment run by all its ranks; each rank
reports its facts to ``<report_dir>/<tag>/rank<r>.json`` (the testbed's nodes share the disk).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from support.run import run_app
from support.wait import wait_until

FAST = ["hydra.launcher.poll_interval_s=0.3", "hydra.launcher.timeout_min=5"]
LINE = re.compile(r"^\[rank (\d+)\] \[[^\]]*\]\[([^\]]*)\]\[([A-Z]+)\] - (.*)$")


def run_ranks(tmp_path: Path, launcher: str, *overrides: str, timeout: float = 240):
    sweep = tmp_path / "sweep"
    proc = run_app(
        "ranks.py",
        "-m",
        f"hydra/launcher={launcher}",
        f"hydra.sweep.dir={sweep}",
        f"report_dir={tmp_path / 'reports'}",
        *FAST,
        *overrides,
        cwd=tmp_path,
        timeout=timeout,
    )
    return proc, sweep


def reports(tmp_path: Path, tag: str) -> dict[int, dict]:
    found = sorted((tmp_path / "reports" / tag).glob("rank*.json"))
    return {int(p.stem[4:]): json.loads(p.read_text()) for p in found}


def rank_lines(sweep: Path) -> list[tuple[int, str, str, str]]:
    """``(rank, logger, level, message)`` of every job log line, from all ranks' submitit
    stdout/stderr files and the job log files in the output dirs."""
    out = []
    for path in [*sweep.glob(".submitit/*/*_log.*"), *sweep.glob("*/*.log")]:
        for line in path.read_text(errors="replace").splitlines():
            match = LINE.match(line)
            if match:
                out.append((int(match[1]), match[2], match[3], match[4]))
    return out


def sacct_state(job_id: str) -> str:
    """Slurm accounting's state of ``job_id`` (``<array>_<task>`` or plain), polled until
    terminal (at most 60 s)."""
    deadline = time.monotonic() + 60
    terminal = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL")
    state = ""
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        rows = dict(line.split("|", 1) for line in out.split())
        state = rows.get(job_id, "")
        if state.startswith(terminal):
            return state
        time.sleep(0.5)
    return state


def slurm_job_id(doc: dict) -> str:
    slurm = doc["slurm"][0]
    return str(slurm["job_id"]) if "_" in str(slurm["job_id"]) else str(slurm["array_id"])


#: the Slurm cases ask for the ``slurm`` fixture in the test: marked here, so ``-m "not slurm"``
#: leaves them out (the ``slurm`` fixture refuses an unmarked test)
SLURM = pytest.mark.slurm
CASES = [
    pytest.param("seml", 1, 2, id="slurm-1node-x-2tasks", marks=SLURM),
    pytest.param("seml", 2, 1, id="slurm-2nodes-x-1task", marks=SLURM),
    pytest.param("seml", 2, 2, id="slurm-2nodes-x-2tasks", marks=SLURM),
    pytest.param("seml_local", 1, 2, id="local-2tasks"),
]


@pytest.mark.parametrize("launcher, nodes, tasks", CASES)
def test_every_rank_runs_one_experiment_per_point(
    launcher, nodes, tasks, request, test_db, tmp_path
):
    if launcher == "seml":
        request.getfixturevalue("slurm")
    world = nodes * tasks
    proc, sweep = run_ranks(
        tmp_path,
        launcher,
        f"hydra.launcher.nodes={nodes}",
        f"hydra.launcher.tasks_per_node={tasks}",
        "tag=a,b",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]

    # one document = one Sacred run per sweep point, nothing else holds a run
    docs = {d["config"]["tag"]: d for d in test_db["ranks"].find()}
    assert sorted(docs) == ["a", "b"]
    for name in test_db.list_collection_names():
        if name != "ranks":
            assert test_db[name].count_documents({"start_time": {"$exists": True}}) == 0, name

    for tag, doc in docs.items():
        assert doc["status"] == "COMPLETED", doc.get("fail_trace")
        assert doc["slurm"][0]["sbatch_options"]["ntasks"] == world
        # the primary's return value is the result
        assert doc["result"]["global_rank"] == 0 and doc["result"]["tag"] == tag
        assert isinstance(doc["start_time"], type(doc["stop_time"]))
        assert doc["host"]["hostname"] == doc["result"]["hostname"]
        assert "rank_failures" not in doc and "fail_trace" not in doc
        assert "[rank 1]" not in doc["captured_out"]  # Sacred captured the primary only
        assert doc["execution"]["slurm_output_file"].endswith(("_0_log.out", "_0_0_log.out"))

        facts = reports(tmp_path, tag)
        assert sorted(facts) == list(range(world)), facts
        # one seed, the document's, on every rank; `random` seeded identically
        assert {f["seed"] for f in facts.values()} == {doc["seed"]}
        assert len({f["random"] for f in facts.values()}) == 1
        assert {f["world_size"] for f in facts.values()} == {world}
        assert {f["num_nodes"] for f in facts.values()} == {nodes}
        assert sorted((f["node_rank"], f["local_rank"]) for f in facts.values()) == [
            (n, t) for n in range(nodes) for t in range(tasks)
        ]
        assert [f["is_primary"] for _, f in sorted(facts.items())] == [True] + [False] * (world - 1)
        # log level: INFO on the primary, ERROR elsewhere
        assert {r: f["root_log_level"] for r, f in facts.items()} == {
            r: "INFO" if r == 0 else "ERROR" for r in range(world)
        }
        # outputs: only the primary writes .hydra/ and the job log; all share one output dir
        assert len({f["output_dir"] for f in facts.values()}) == 1
        assert {r: f["output_subdir"] for r, f in facts.items()} == {
            r: ".hydra" if r == 0 else None for r in range(world)
        }
        out_dir = Path(facts[0]["output_dir"])
        assert sorted(p.name for p in (out_dir / ".hydra").iterdir()) == [
            "config.yaml",
            "hydra.yaml",
            "overrides.yaml",
        ]
        assert [p.name for p in out_dir.glob("*.log")] == ["ranks.log"]
        job_log = (out_dir / "ranks.log").read_text().splitlines()
        assert job_log and all(line.startswith("[rank 0] ") for line in job_log), job_log
        assert sum("rank 0 of" in line and "INFO from the task" in line for line in job_log) == 1
        # where the ranks ran
        hosts = {f["hostname"] for f in facts.values()}
        if launcher == "seml":
            assert hosts <= {"node1", "node2"} and len(hosts) == nodes, hosts
            by_node = {f["node_rank"]: f["hostname"] for f in facts.values()}
            assert len(set(by_node.values())) == nodes  # one host per node rank

    # log lines name the rank; only the primary logs INFO (any logger), every rank logs ERROR
    lines = rank_lines(sweep)
    assert lines
    assert {(r, level) for r, _, level, _ in lines if level == "INFO"} <= {(0, "INFO")}
    for r in range(world):
        ours = [m for rr, logger, level, m in lines if rr == r and logger == "__main__"]
        assert f"rank {r} of {world}: ERROR from the task" in ours, (r, ours)
        assert (f"rank {r} of {world}: INFO from the task" in ours) == (r == 0), (r, ours)
    for rank_, _, _, message in lines:
        found = re.match(r"rank (\d+) of", message)
        assert found is None or int(found[1]) == rank_

    if launcher == "seml":
        for doc in docs.values():
            assert sacct_state(slurm_job_id(doc)) == "COMPLETED"


@pytest.mark.parametrize(
    "launcher",
    [pytest.param("seml", id="slurm", marks=SLURM), pytest.param("seml_local", id="local")],
)
def test_a_failing_rank_fails_the_experiment(launcher, request, test_db, tmp_path):
    if launcher == "seml":
        request.getfixturevalue("slurm")
    proc, _ = run_ranks(
        tmp_path, launcher, "hydra.launcher.tasks_per_node=2", "tag=f", "fail_rank=1"
    )
    assert proc.returncode != 0
    doc = test_db["ranks"].find_one()
    assert test_db["ranks"].count_documents({}) == 1
    assert doc["status"] == "FAILED"
    trace = "".join(doc["fail_trace"])
    assert "rank 1" in trace and "RuntimeError: injected failure on rank 1" in trace
    assert [f["rank"] for f in doc["rank_failures"]] == [1]
    assert "injected failure on rank 1" in proc.stderr
    # rank 0 runs to its end: rank 1's failure fails the experiment at once (the launcher may
    # return before rank 0 wrote its report), rank 0 is not stopped by it
    facts = wait_until("rank 0's report", lambda: (f := reports(tmp_path, "f")).get(0) and f)
    assert sorted(facts) == [0, 1]
    if launcher == "seml":
        assert sacct_state(slurm_job_id(doc)).startswith("FAILED")


def test_several_experiments_per_job_with_several_tasks_is_rejected_before_staging(
    slurm, test_db, tmp_path
):
    proc, sweep = run_ranks(
        tmp_path,
        "seml",
        "hydra.launcher.tasks_per_node=2",
        "hydra.launcher.experiments_per_job=2",
        "tag=a,b",
        timeout=60,
    )
    assert proc.returncode == 1
    assert "mutually exclusive" in proc.stderr
    assert "experiments_per_job=2" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert test_db["ranks"].count_documents({}) == 0
    assert not list(sweep.glob(".submitit/*"))


def test_user_observers_attach_on_the_primary_rank_only(test_db, tmp_path):
    runs = tmp_path / "runs"
    proc = run_app(
        "fail.py",
        "-m",
        "hydra/launcher=seml_local",
        "hydra.launcher.tasks_per_node=2",
        "fail_on=-1",
        f"hydra.launcher.observers=[{{_target_:sacred.observers.FileStorageObserver,basedir:{runs}}}]",
        "hydra.launcher.poll_interval_s=0.3",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    run_dirs = [p for p in runs.iterdir() if p.name.isdigit()]
    assert len(run_dirs) == 1  # two ranks, one observed run
    run = json.loads((run_dirs[0] / "run.json").read_text())
    assert run["status"] == "COMPLETED" and run["result"] == 10
    assert test_db["fail"].find_one()["status"] == "COMPLETED"
