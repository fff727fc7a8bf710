"""GPUs bound to ranks on the testbed's fake GPUs (tools/testbed/up.sh gives
each node 2 GRES ``gpu`` backed by device files). ``examples/ranks.py`` reports each rank's
``CUDA_VISIBLE_DEVICES`` and the device ``seml_hydra.local_device()`` picks."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.run import run_app

pytestmark = pytest.mark.slurm
#: the testbed's nodes have 2 CPUs and 16000 MB: the presets' CPUs and memory are cut to fit
FIT = [
    "hydra.launcher.poll_interval_s=0.3",
    "hydra.launcher.timeout_min=5",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=1",
]


@pytest.fixture
def gpus(slurm):
    """The testbed's nodes have 2 GPUs each (fails, never skips, when up.sh did not add them)."""
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N %G"], capture_output=True, text=True
    ).stdout
    gres = dict(line.split(maxsplit=1) for line in out.splitlines() if line.strip())
    assert gres and all("gpu:2" in g for g in gres.values()), f"run tools/testbed/up.sh: {gres}"


def ranks(tmp_path: Path, *overrides: str) -> dict[int, dict]:
    """Run one experiment of examples/ranks.py with ``overrides``; each rank's report."""
    proc = run_app(
        "ranks.py",
        "-m",
        "hydra/launcher=seml",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"report_dir={tmp_path / 'reports'}",
        *overrides,
        *FIT,
        cwd=tmp_path,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    found = sorted((tmp_path / "reports" / "a").glob("rank*.json"))
    return {int(p.stem[4:]): json.loads(p.read_text()) for p in found}


def test_gpu_2tasks_gives_each_rank_of_one_node_its_own_gpu(gpus, test_db, tmp_path):
    """The seed's shape: 1 node, 2 tasks, 1 GPU each -> different CUDA_VISIBLE_DEVICES."""
    reports = ranks(tmp_path, "+slurm=gpu_2tasks")
    assert sorted(reports) == [0, 1]
    assert reports[0]["hostname"] == reports[1]["hostname"]
    seen = [reports[r]["cuda_visible_devices"] for r in (0, 1)]
    assert all(s is not None and len(s.split(",")) == 1 for s in seen), seen
    assert seen[0] != seen[1]
    assert [reports[r]["local_rank"] for r in (0, 1)] == [0, 1]
    assert [reports[r]["local_device"] for r in (0, 1)] == [0, 0]  # its own GPU is cuda:0
    (doc,) = test_db["ranks"].find()
    assert doc["slurm"][0]["sbatch_options"]["gpus-per-task"] == 1


def test_two_nodes_one_task_one_gpu_each(gpus, test_db, tmp_path):
    reports = ranks(
        tmp_path,
        "hydra.launcher.nodes=2",
        "hydra.launcher.tasks_per_node=1",
        "hydra.launcher.gpus_per_task=1",
    )
    assert sorted(reports) == [0, 1]
    assert reports[0]["hostname"] != reports[1]["hostname"]
    for r in (0, 1):
        visible = reports[r]["cuda_visible_devices"]
        assert visible is not None and len(visible.split(",")) == 1, visible
        assert reports[r]["local_device"] == 0


def test_without_binding_every_task_sees_all_and_local_device_picks_by_local_rank(
    gpus, test_db, tmp_path
):
    """A site that gives every task all of the node's GPUs (gpus_per_node, no binding): both
    ranks see both GPUs, and seml_hydra.local_device() hands them different ones."""
    reports = ranks(
        tmp_path,
        "hydra.launcher.tasks_per_node=2",
        "hydra.launcher.gpus_per_node=2",
    )
    assert sorted(reports) == [0, 1]
    assert all(len(reports[r]["cuda_visible_devices"].split(",")) == 2 for r in (0, 1))
    assert reports[0]["cuda_visible_devices"] == reports[1]["cuda_visible_devices"]
    assert [reports[r]["local_device"] for r in (0, 1)] == [0, 1]


def distributed_example(app: str, tmp_path: Path) -> list[dict]:
    """Run a distributed example with the ``gpu_2tasks`` preset; every rank's report."""
    proc = run_app(
        app,
        "-m",
        "hydra/launcher=seml",
        "+slurm=gpu_2tasks",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"report_dir={tmp_path / 'reports'}",
        *FIT,
        cwd=tmp_path,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = sorted((tmp_path / "reports").glob("rank*.json"))
    return [json.loads(p.read_text()) for p in found]


def test_jax_example_with_gpu_2tasks_binds_one_gpu_per_process(gpus, test_db, tmp_path):
    """On CPU JAX ignores the GPUs, but each process is given its own."""
    reports = distributed_example("jax_distributed.py", tmp_path)
    assert sorted(r["process_index"] for r in reports) == [0, 1]
    assert all(r["allgather"] == [1.0, 2.0] for r in reports)
    visible = [r["cuda_visible_devices"] for r in reports]
    assert all(v is not None and "," not in v for v in visible) and len(set(visible)) == 2


def test_torch_example_with_gpu_2tasks_binds_one_gpu_per_rank(gpus, test_db, tmp_path):
    reports = distributed_example("torch_distributed.py", tmp_path)
    assert sorted(r["rank"] for r in reports) == [0, 1]
    assert [r["all_reduce"] for r in reports] == [3.0, 3.0]
    visible = [r["cuda_visible_devices"] for r in reports]
    assert all(v is not None and "," not in v for v in visible) and len(set(visible)) == 2
