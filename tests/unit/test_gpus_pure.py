"""GPUs bound to ranks, the pure parts: ``gpus_per_task`` and ``gpu_bind`` in the
sbatch script and on the srun line submitit writes, the ``gpu_2tasks`` preset's shape, and
``seml_hydra.local_device`` (which GPU a rank uses). No Slurm, no MongoDB."""

from __future__ import annotations

import shlex

import pytest
import yaml
from support.launcher_conf import launcher
from support.paths import ROOT

from seml_hydra.job.devices import gpus_per_task, local_device, visible_devices
from seml_hydra.launch.sbatch import executor_parameters, sbatch_options, validate_launcher


def script(tmp_path, **changes) -> str:
    import submitit

    node = launcher(**changes)
    validate_launcher(node)
    executor = submitit.AutoExecutor(folder=tmp_path, cluster="slurm")
    executor.update_parameters(**executor_parameters(node, comment="c", name="c_1"))
    return executor._executor._make_submission_file_text("python -u x.py", "uid")


def srun_line(text: str) -> list[str]:
    return shlex.split(next(line for line in text.splitlines() if line.startswith("srun ")))


def test_gpus_per_task_in_the_sbatch_script_and_on_the_srun_line(tmp_path):
    text = script(tmp_path, tasks_per_node=2, gpus_per_task=1)
    assert "#SBATCH --gpus-per-task=1" in text.splitlines()
    srun = srun_line(text)
    assert srun[srun.index("--ntasks-per-node=2") + 1] == "--gpus-per-task=1"
    assert sbatch_options(launcher(gpus_per_task=1), comment="c", name="n")["gpus-per-task"] == 1
    unset = script(tmp_path / "unset")
    assert "gpus-per-task" not in unset and "gpu-bind" not in unset


def test_gpu_bind_goes_on_the_srun_line_only(tmp_path):
    text = script(tmp_path, gpus_per_task=1, gpu_bind="single:1")
    assert "--gpu-bind=single:1" in srun_line(text)
    assert not any(line.startswith("#SBATCH --gpu-bind") for line in text.splitlines())
    assert "gpu-bind" not in sbatch_options(launcher(gpu_bind="closest"), comment="c", name="n")


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"gpus_per_task": 0}, "gpus_per_task=0: must be positive"),
        ({"gpu_bind": "closest\nid"}, "hydra.launcher.gpu_bind="),
        ({"srun_args": ["--gpu-bind=none"]}, "srun_args sets --gpu-bind=none"),
    ],
)
def test_bad_gpu_values_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        validate_launcher(launcher(**changes))


def test_the_gpu_2tasks_preset_binds_one_gpu_to_each_of_two_tasks():
    preset = yaml.safe_load((ROOT / "conf/slurm/gpu_2tasks.yaml").read_text())
    assert preset["nodes"] == 1 and preset["tasks_per_node"] == 2
    assert preset["gpus_per_task"] == 1 and "gpus_per_node" not in preset
    validate_launcher(launcher(**preset))


@pytest.mark.parametrize(
    "value, expected",
    [
        ("0,1", ["0", "1"]),
        ("", []),
        ("NoDevFiles", []),
        (" 3 ", ["3"]),
        ("GPU-ab,GPU-cd", ["GPU-ab", "GPU-cd"]),
    ],
)
def test_visible_devices(value, expected):
    assert visible_devices({"CUDA_VISIBLE_DEVICES": value}) == expected
    assert visible_devices({}) == []


@pytest.mark.parametrize("value, count", [("2", 2), ("a100:3", 3), ("", 1), ("x", 1), ("0", 1)])
def test_gpus_per_task(value, count):
    assert gpus_per_task({"SLURM_GPUS_PER_TASK": value}) == count


@pytest.mark.parametrize(
    "env, local_rank, expected",
    [
        ({}, 0, None),  # no GPU
        ({"CUDA_VISIBLE_DEVICES": "1"}, 1, 0),  # bound by Slurm: its own GPU is device 0
        ({"CUDA_VISIBLE_DEVICES": "2,3", "SLURM_GPUS_PER_TASK": "2"}, 1, 0),
        ({"CUDA_VISIBLE_DEVICES": "0,1"}, 0, 0),  # every task sees all: by local rank
        ({"CUDA_VISIBLE_DEVICES": "0,1"}, 1, 1),
        ({"CUDA_VISIBLE_DEVICES": "0,1,2,3", "SLURM_GPUS_PER_TASK": "2"}, 1, 2),
        ({"CUDA_VISIBLE_DEVICES": "0,1"}, 3, 1),  # more ranks than GPUs: shared round-robin
    ],
)
def test_local_device(env, local_rank, expected):
    assert local_device(local_rank, env) == expected


def test_local_device_reads_the_rank_plan_by_default(monkeypatch):
    import seml_hydra
    from seml_hydra.job import rank

    monkeypatch.setenv("SUBMITIT_EXECUTOR", "local")
    for key, value in {
        "SUBMITIT_LOCAL_GLOBALID": "1",
        "SUBMITIT_LOCAL_LOCALID": "1",
        "SUBMITIT_LOCAL_NODEID": "0",
        "SUBMITIT_LOCAL_NTASKS": "2",
        "SUBMITIT_LOCAL_JOB_ID": "77",
        "SUBMITIT_LOCAL_JOB_NUM_NODES": "1",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SLURM_GPUS_PER_TASK", raising=False)
    rank.set_current_plan(None)
    assert rank.current_plan().local_rank == 1
    assert seml_hydra.local_device() == 1
