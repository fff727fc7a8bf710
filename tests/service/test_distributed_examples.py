"""The JAX and torch.distributed examples as one experiment over several ranks, on the testbed's
two Slurm nodes (and submitit's local executor). They need the ``distributed`` extra
(jax, torch): a missing package fails the test with the install command, it never skips."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from support.run import run_app

FAST = ["hydra.launcher.poll_interval_s=0.3", "hydra.launcher.timeout_min=5"]


def require(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.fail(
            f"{module} is not installed: the distributed examples need it. Install the extra: "
            "pip install -e '.[distributed]' (torch: use PyTorch's CPU index off this machine, "
            "--extra-index-url https://download.pytorch.org/whl/cpu)",
            pytrace=False,
        )


def run_example(app: str, tmp_path: Path, launcher: str, nodes: int, tasks: int):
    proc = run_app(
        app,
        "-m",
        f"hydra/launcher={launcher}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"hydra.launcher.nodes={nodes}",
        f"hydra.launcher.tasks_per_node={tasks}",
        f"report_dir={tmp_path / 'reports'}",
        *FAST,
        cwd=tmp_path,
        timeout=240,
    )
    found = sorted((tmp_path / "reports").glob("rank*.json"))
    return proc, [json.loads(p.read_text()) for p in found]


#: the Slurm cases ask for the ``slurm`` fixture in the test: marked here, so ``-m "not slurm"``
#: leaves them out (the ``slurm`` fixture refuses an unmarked test)
SLURM = pytest.mark.slurm
CASES = [
    pytest.param("seml", 1, 2, id="slurm-1node-x-2tasks", marks=SLURM),
    pytest.param("seml", 2, 1, id="slurm-2nodes-x-1task", marks=SLURM),
    pytest.param("seml_local", 1, 2, id="local-2tasks"),
]


def check_hosts(launcher: str, nodes: int, hosts: set[str]) -> None:
    if launcher == "seml":
        assert hosts <= {"node1", "node2"} and len(hosts) == nodes, hosts


@pytest.mark.parametrize("launcher, nodes, tasks", CASES)
def test_jax_example_gives_process_indices_0_and_1(
    launcher, nodes, tasks, request, test_db, tmp_path
):
    require("jax")
    if launcher == "seml":
        request.getfixturevalue("slurm")
    proc, reports = run_example("jax_distributed.py", tmp_path, launcher, nodes, tasks)
    assert proc.returncode == 0, proc.stderr[-3000:]
    docs = list(test_db["jax_distributed"].find())
    assert len(docs) == 1 and docs[0]["status"] == "COMPLETED", docs
    assert docs[0]["result"] == 0  # rank 0's jax.process_index()
    assert {r["process_index"] for r in reports} == {0, 1}
    assert all(r["process_index"] == r["global_rank"] for r in reports)
    assert all(r["process_count"] == 2 and r["allgather"] == [1.0, 2.0] for r in reports)
    check_hosts(launcher, nodes, {r["hostname"] for r in reports})


@pytest.mark.parametrize(
    "launcher, nodes, tasks",
    [*CASES, pytest.param("seml", 2, 2, id="slurm-2nodes-x-2tasks", marks=SLURM)],
)
def test_torch_all_reduce_gives_the_sum_on_every_rank(
    launcher, nodes, tasks, request, test_db, tmp_path
):
    require("torch")
    if launcher == "seml":
        request.getfixturevalue("slurm")
    world = nodes * tasks
    expected = world * (world + 1) / 2
    proc, reports = run_example("torch_distributed.py", tmp_path, launcher, nodes, tasks)
    assert proc.returncode == 0, proc.stderr[-3000:]
    docs = list(test_db["torch_distributed"].find())
    assert len(docs) == 1 and docs[0]["status"] == "COMPLETED", docs
    assert docs[0]["result"] == expected
    assert sorted(r["rank"] for r in reports) == list(range(world))
    assert [r["all_reduce"] for r in reports] == [expected] * world
    assert len({r["master"] for r in reports}) == 1
    check_hosts(launcher, nodes, {r["hostname"] for r in reports})
