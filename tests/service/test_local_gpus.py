"""``seml_local`` spreads the machine's GPUs over its jobs and ranks
(``hydra.launcher.visible_gpus``). There is no GPU here: the ids are made up, and
``examples/ranks.py`` reports each rank's ``CUDA_VISIBLE_DEVICES`` and the device
``seml_hydra.local_device()`` picks, which is all the binding is about."""

from __future__ import annotations

import json
from pathlib import Path

from support.run import run_app

FAST = ["hydra.launcher.poll_interval_s=0.3", "hydra.launcher.timeout_min=5"]


def local_ranks(tmp_path: Path, *overrides: str) -> dict[str, dict[int, dict]]:
    """Run examples/ranks.py on seml_local with ``overrides``; ``{tag: {rank: report}}``."""
    proc = run_app(
        "ranks.py",
        "-m",
        "hydra/launcher=seml_local",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"report_dir={tmp_path / 'reports'}",
        *FAST,
        *overrides,
        cwd=tmp_path,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, dict[int, dict]] = {}
    for path in sorted((tmp_path / "reports").glob("*/rank*.json")):
        out.setdefault(path.parent.name, {})[int(path.stem[4:])] = json.loads(path.read_text())
    return out


def test_two_ranks_of_one_job_see_different_gpus(test_db, tmp_path):
    found = local_ranks(
        tmp_path,
        "hydra.launcher.tasks_per_node=2",
        "hydra.launcher.gpus_per_task=1",
        "hydra.launcher.visible_gpus=[5,7]",
        "tag=a",
    )
    ranks = found["a"]
    assert [ranks[r]["cuda_visible_devices"] for r in (0, 1)] == ["5", "7"]
    assert [ranks[r]["local_device"] for r in (0, 1)] == [0, 0]  # its own GPU is cuda:0


def test_two_jobs_see_different_gpus(test_db, tmp_path):
    found = local_ranks(
        tmp_path,
        "hydra.launcher.gpus_per_node=2",
        "hydra.launcher.visible_gpus=[3,4,5,6]",
        "tag=a,b",
    )
    assert sorted(found) == ["a", "b"]
    seen = {tag: found[tag][0]["cuda_visible_devices"] for tag in ("a", "b")}
    assert sorted(seen.values()) == ["3,4", "5,6"], seen


def test_visible_gpus_on_slurm_is_refused_before_staging(test_db, tmp_path):
    proc = run_app(
        "ranks.py",
        "-m",
        "hydra/launcher=seml",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "hydra.launcher.gpus_per_node=1",
        "hydra.launcher.visible_gpus=[0,1]",
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "visible_gpus spreads this machine's GPUs over seml_local's jobs" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert test_db["ranks"].count_documents({}) == 0
