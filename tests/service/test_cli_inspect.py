"""``seml <collection> print-command | print-experiment | print-output --head/--slurm |
status -p | print-fail-trace -p | description set|delete|list`` and ``seml --version`` on the
real MongoDB, with experiments a real launch (``examples/train.py``, local executor) stored;
bad input (unknown id, empty selection, wrong state, a bad option value) gives one error line
and exit 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.run import run_app
from typer.testing import CliRunner

from seml_hydra.cli import app

runner = CliRunner()


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def seml(*args: str, code: int = 0, input: str | None = None) -> str:
    result = runner.invoke(app, list(args), prog_name="seml", input=input)
    assert result.exit_code == code, (args, result.output, result.exception)
    return result.output


def error(*args: str) -> str:
    """The output of a command that must fail as a user error: exit 1, one line."""
    out = seml(*args, code=1).strip()
    assert out.startswith("Error: ") and len(out.splitlines()) == 1, out
    return out


@pytest.fixture
def train(test_db, tmp_path):
    """Two COMPLETED experiments of ``examples/train.py`` (``epochs`` given as an
    interpolation, a launch-time description per point), run by the local executor."""
    proc = run_app(
        "train.py",
        "-m",
        "hydra/launcher=seml_local",
        "hydra.launcher.poll_interval_s=0.3",
        "optimizer.lr=0.1,0.01",
        "epochs=${data.n_features}",
        "hydra.launcher.description=lr ${optimizer.lr}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    coll = test_db["train"]
    assert {d["status"] for d in coll.find()} == {"COMPLETED"}
    return coll


def test_print_command_runs_the_experiment_by_hand_resolved_or_unresolved(train, tmp_path):
    out = seml("train", "print-command", "-id", "1")
    lines = out.strip().splitlines()
    assert lines[0] == "# experiment 1 (COMPLETED)"
    train_py = Path(__file__).parents[2] / "examples" / "train.py"
    assert lines[1] == f"cd {tmp_path} && python {train_py} optimizer.lr=0.1 epochs=10"
    unresolved = seml("train", "print-command", "-id", "1", "--unresolved").splitlines()[1]
    # as Hydra wrote the point's override (hydra.overrides.task escapes the interpolation)
    assert unresolved.endswith("optimizer.lr=0.1 'epochs=$\\{data.n_features\\}'")
    # the printed command runs the experiment: same config, same result, no document
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    for command in (lines[1], unresolved):
        proc = subprocess.run(
            ["bash", "-c", command], capture_output=True, text=True, env=env, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        assert "epoch  10" in proc.stderr + proc.stdout and "lr=0.1 " in proc.stdout
    assert train.count_documents({}) == 2
    both = seml("train", "print-command")
    assert "# experiment 2 (COMPLETED)" in both and "optimizer.lr=0.01 epochs=10" in both
    assert seml("train", "print-command", "-n", "1").count("# experiment") == 1


def test_print_command_bad_input_is_one_line_and_exit_1(train, test_db):
    assert "No experiments match" in error("train", "print-command", "-id", "99")
    assert "No experiments match" in error("train", "print-command", "-s", "RUNNING")
    assert "no collection 'nothere'" in error("nothere", "print-command")
    test_db["semlmade"].insert_one(
        {"_id": 1, "batch_id": 1, "status": "STAGED", "config": {}, "seml": {}}
    )
    assert "not staged by a Hydra app" in error("semlmade", "print-command")


def test_print_command_on_a_malformed_stored_override_is_one_error_line(test_db):
    test_db["forged"].insert_one(
        {
            "_id": 2,
            "status": "STAGED",
            "config": {},
            "hydra": {"overrides": ["x=1\x1b]52;c;Y3VybA==\x07"], "choices": {}},
            "seml": {"executable": "/work/app.py", "working_dir": "/work"},
        }
    )
    out = error("forged", "print-command", "-id", "2")
    assert "Experiment 2 has a malformed override 'x=1\\x1b]52" in out and "\x1b" not in out
    assert "'x=1" in seml("forged", "print-command", "--unresolved").splitlines()[1]


def test_description_set_never_resolves_a_forged_document_value(test_db, monkeypatch):
    monkeypatch.setenv("SEML_TEST_SECRET", "mongodb://alice:Sup3rS3cret@db/seml")
    forged = test_db["forged"]
    forged.insert_one(
        {
            "_id": 1,
            "batch_id": 1,
            "status": "STAGED",
            "seml": {},
            "config": {"x": "${oc.env:SEML_TEST_SECRET}"},
        }
    )
    seml("forged", "description", "set", "x is ${config.x}")
    assert forged.find_one({"_id": 1})["seml"]["description"] == "x is ${oc.env:SEML_TEST_SECRET}"
    assert "not a plain key" in error("forged", "description", "set", "${oc.env:SEML_TEST_SECRET}")
    assert "does not resolve for experiment 1" in error(
        "forged", "description", "set", "${config.nope}"
    )
    assert forged.find_one({"_id": 1})["seml"]["description"] == "x is ${oc.env:SEML_TEST_SECRET}"


def test_print_experiment_shows_one_document_as_yaml_or_json(train):
    out = seml("train", "print-experiment", "-id", "2")
    assert "experiment 2 (batch 1, COMPLETED)" in out
    doc = yaml.safe_load(out.split("\n", 1)[1])
    assert doc["config"]["optimizer"]["lr"] == 0.01 and doc["seml"]["description"] == "lr 0.01"
    assert doc["status"] == "COMPLETED" and isinstance(doc["start_time"], str)
    as_json = json.loads(
        seml("train", "print-experiment", "-id", "2", "-F", "JSON").split("\n", 1)[1]
    )
    assert as_json["config"] == doc["config"]
    only = yaml.safe_load(
        seml("train", "print-experiment", "-id", "1", "-p", "config.optimizer.lr").split("\n", 1)[1]
    )
    assert only == {
        "_id": 1,
        "batch_id": 1,
        "status": "COMPLETED",
        "config": {"optimizer": {"lr": 0.1}},
    }
    assert "Unknown format 'xml'" in error("train", "print-experiment", "-F", "xml")
    assert "No experiments match" in error("train", "print-experiment", "-id", "7")
    assert "not a document key" in error("train", "print-experiment", "-p", "$where")


def test_status_and_fail_trace_show_projected_keys_and_descriptions(train):
    train.update_one(
        {"_id": 2}, {"$set": {"status": "FAILED", "fail_trace": ["Traceback\n", "ValueError\n"]}}
    )
    out = seml("train", "status", "-p", "config.optimizer.lr,config.epochs")
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if "│" in line}
    assert "Descriptions" in out and "config.optimizer.lr" in out
    assert "lr 0.1" in rows["COMPLETED"] and "0.1" in rows["COMPLETED"].split("│")[5]
    assert "lr 0.01" in rows["FAILED"] and "10" in rows["FAILED"].split("│")[6]
    out = seml("train", "print-fail-trace", "-p", "config.optimizer.lr")
    assert "experiment 2 (FAILED) config.optimizer.lr=0.01" in out
    assert "Description: lr 0.01" in out and "ValueError" in out
    assert "experiment 1" not in out
    assert "No experiments match" in error("train", "print-fail-trace", "-id", "1")
    listing = seml("list")
    assert "Descriptions" in listing and "lr 0.01, lr 0.1" in listing


def test_print_output_head_tail_and_the_slurm_output_file(train):
    out = seml("train", "print-output", "-id", "1")
    assert "val_acc=" in out and "Job completed successfully" not in out  # captured output
    head = seml("train", "print-output", "-id", "1", "--head", "1")
    assert "epoch   1" in head and "val_acc=" not in head
    tail = seml("train", "print-output", "-id", "1", "--tail", "1")
    assert "val_acc=" in tail and "epoch   1" not in tail
    slurm = seml("train", "print-output", "-id", "1", "--slurm")
    assert "submitit" in slurm and "val_acc=" in slurm  # the job's whole output file
    slurm_head = seml("train", "print-output", "-id", "1", "--slurm", "--head", "1")
    assert len(slurm_head.strip().splitlines()) == 2  # the heading and one line
    assert "not both" in error("train", "print-output", "--head", "1", "--tail", "1")
    assert "No experiments match" in error("train", "print-output", "-id", "5")
    # a run whose last output never reached MongoDB (its job died, e.g. KILLED) says so
    assert "incomplete" not in out
    train.update_one({"_id": 1}, {"$set": {"status": "KILLED", "captured_out_incomplete": True}})
    out = seml("train", "print-output", "-id", "1")
    assert "(incomplete: the run's last output was never saved" in out and "val_acc=" in out


def test_description_set_delete_list_on_a_selection(train):
    assert "Set the description of 1 experiment(s): 2" in seml(
        "train", "description", "set", "sgd at ${config.optimizer.lr}", "-id", "2"
    )
    assert train.find_one({"_id": 2})["seml"]["description"] == "sgd at 0.01"
    seml("train", "description", "set", "raw ${x}", "-id", "1", "--no-resolve")
    assert train.find_one({"_id": 1})["seml"]["description"] == "raw ${x}"
    out = seml("train", "description", "list")
    assert "sgd at 0.01" in out and "raw ${x}" in out
    out = seml("train", "status")
    assert "sgd at 0.01" in out
    assert "Deleted the description of 2 experiment(s): 1-2" in seml(
        "train", "description", "delete"
    )
    assert not train.count_documents({"seml.description": {"$exists": True}})
    assert "(none)" in seml("train", "description", "list")
    assert "None of the selected" in seml("train", "description", "delete")
    assert "Descriptions" not in seml("train", "status")
    # bad input
    assert "No experiments match" in error("train", "description", "set", "x", "-id", "9")
    assert "No experiments match" in error("train", "description", "set", "x", "-s", "PENDING")
    assert "does not resolve for experiment 1" in error(
        "train", "description", "set", "${config.nope}", "-id", "1"
    )
    assert "empty" in error("train", "description", "set", " ")
    assert "Unknown state 'DONE'" in error("train", "description", "list", "-s", "DONE")
    assert not train.count_documents({"seml.description": {"$exists": True}})


def test_version_is_printed_without_a_collection():
    from seml_hydra import __version__

    assert seml("--version").strip() == f"seml-hydra {__version__}"
    assert seml("-V").strip() == f"seml-hydra {__version__}"


def test_commands_chain_on_one_collection_and_the_first_error_stops_the_chain(train):
    out = seml("train", "description", "set", "first", "-id", "1", "status", "-p", "config.lr")
    assert "Set the description of 1 experiment(s): 1" in out
    assert "first" in out.split("Set the description", 1)[1] and "config.lr" in out
    # the failing print-command stops the chain: the description is not deleted
    assert "No experiments match" in error(
        "train", "print-command", "-id", "99", "description", "delete", "-id", "1"
    )
    assert train.find_one({"_id": 1})["seml"]["description"] == "first"
    out = seml("train", "description", "delete", "-id", "1", "description", "list")
    assert "Deleted the description of 1 experiment(s): 1" in out and "first" not in out


def test_print_command_of_a_hydra_zen_launch_gives_the_overrides_not_the_script(test_db, tmp_path):
    """hydra-zen's ``launch(...)`` passes its own overrides: ``python script.py x=1`` would run
    the script's whole sweep again. print-command says so and gives the point's overrides; an
    app's command line (``@hydra.main``) still gets its command."""
    script = tmp_path / "zen_launch.py"
    script.write_text(
        "from hydra_zen import launch, make_config, zen\n\n\n"
        "def task(x: int) -> int:\n    return x * 10\n\n\n"
        'if __name__ == "__main__":\n'
        "    launch(make_config(x=1), zen(task), multirun=True, version_base='1.3',\n"
        "           overrides=['hydra/launcher=seml_local', 'hydra.launcher.collection=zl',\n"
        "                      'hydra.launcher.poll_interval_s=0.3', 'x=1,2'])\n"
    )
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    out = seml("zl", "print-command", "-id", "2")
    assert "# launched from Python (e.g. hydra-zen's launch()), not from a command line" in out
    assert "overrides=[...]): ['x=2']" in out
    assert "python " not in out
    assert test_db["zl"].find_one({"_id": 2})["seml"]["launched_from_python"] is True
