"""Bad input, one test each: a clear message, no traceback for a user mistake, nothing half-done
(no experiment PENDING without a job, no document staged by a launch that failed early)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import MONGO_URL, ROOT, run_app, run_points, start_app

from seml_hydra.core.documents import storable_result

FAST = ["hydra.launcher.poll_interval_s=0.3"]


def run_test_app(app: str, *args: str, cwd, env=None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, str(ROOT / "tests/apps" / app), "-m", *args, *FAST],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def assert_clean_error(proc: subprocess.CompletedProcess, *phrases: str) -> None:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for phrase in phrases:
        assert phrase in proc.stderr, proc.stderr


def test_memory_above_every_node_is_refused_by_sbatch_and_documents_stay_staged(
    slurm, test_db, tmp_path
):
    proc = run_app("fail.py", "-m", "hydra/launcher=seml", "hydra.launcher.mem_gb=64", cwd=tmp_path)
    assert_clean_error(proc, "Memory specification can not be satisfied", "stay STAGED")
    assert [d["status"] for d in test_db["fail"].find()] == ["STAGED"]


def test_arrays_submitted_before_sbatch_refused_a_later_one_are_reported(slurm, test_db, tmp_path):
    """10 points are 2 arrays (MaxArraySize 8); sbatch accepts the first and refuses the
    second (a submit limit reached midway, here an sbatch in front of the real one that
    refuses from its second call): the launch names the array that was submitted and runs,
    not only the refusal (attacker finding, session 7: the 8 running experiments were not
    mentioned)."""
    import shutil

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    fake = bin_dir / "sbatch"
    fake.write_text(
        "#!/bin/bash\n"
        f"echo x >> {calls}\n"
        f"if (( $(wc -l < {calls}) > 1 )); then\n"
        '  echo "sbatch: error: Batch job submission failed: Job violates accounting/QOS '
        "policy (job submit limit, user's size and/or time limits)\" >&2; exit 1\n"
        "fi\n"
        f'exec {shutil.which("sbatch")} "$@"\n'
    )
    fake.chmod(0o755)
    proc = run_points(10, env={"PATH": f"{bin_dir}:{os.environ['PATH']}"}, cwd=tmp_path)
    try:
        assert_clean_error(proc, "Job violates accounting/QOS policy", "stay STAGED")
        docs = list(test_db["fail"].find({}, {"status": 1, "slurm": 1}))
        arrays = {d["slurm"][0]["array_id"] for d in docs if d["status"] != "STAGED"}
        assert len(arrays) == 1 and sum(d["status"] == "STAGED" for d in docs) == 2, docs
        (array,) = arrays
        assert f"Submitted 8 job(s) as slurm job {array}" in proc.stdout, proc.stdout
        assert f"The 8 experiment(s) submitted before it (job(s) {array}) run" in proc.stderr
    finally:
        for doc in test_db["fail"].find({"slurm.0.array_id": {"$exists": True}}):
            subprocess.run(["scancel", str(doc["slurm"][0]["array_id"])], check=False)


def test_unknown_sbatch_option_is_refused_and_documents_stay_staged(slurm, test_db, tmp_path):
    proc = run_app(
        "fail.py",
        "-m",
        "hydra/launcher=seml",
        "+hydra.launcher.additional_parameters.no-such-option=1",
        cwd=tmp_path,
    )
    assert_clean_error(proc, "no-such-option", "stay STAGED")
    assert [d["status"] for d in test_db["fail"].find()] == ["STAGED"]


def test_task_that_cannot_be_pickled_is_detected_before_anything_is_staged(test_db, tmp_path):
    proc = run_test_app("lock_app.py", "hydra/launcher=seml_local", cwd=tmp_path)
    assert_clean_error(proc, "the task function cannot be pickled", "_thread.lock")
    assert test_db["lock_app"].count_documents({}) == 0


def test_wrong_database_password_is_a_clear_error_without_the_password(
    mongo_client, test_db, tmp_path
):
    host = MONGO_URL.split("://", 1)[1]
    url = f"mongodb://seml:not-the-password@{host}/seml?authSource=seml"
    proc = run_app(
        "fail.py", "-m", "hydra/launcher=seml_local", cwd=tmp_path, env={"SEML_MONGODB_URI": url}
    )
    assert_clean_error(proc, "authentication failed for user 'seml'")
    assert "not-the-password" not in proc.stderr + proc.stdout


@pytest.mark.parametrize(
    "name",
    [
        "bad$name",
        "system.things",
        ".leading",
        "seml_hydra_counters",
        "fs.files",
        "metrics",
        "seml_hydra_metrics.train",
    ],
)
def test_invalid_collection_name_is_refused_before_staging(test_db, tmp_path, name):
    proc = run_app(
        "fail.py",
        "-m",
        "hydra/launcher=seml_local",
        f"hydra.launcher.collection='{name}'",
        cwd=tmp_path,
    )
    assert_clean_error(proc, name)
    assert test_db.list_collection_names() == [] or name not in test_db.list_collection_names()


def test_result_that_bson_cannot_store_is_stored_as_its_repr_with_a_warning(test_db, tmp_path):
    proc = run_test_app("bad_app.py", "hydra/launcher=seml_local", "mode=unstorable", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = test_db["bad_app"].find_one()
    assert doc["status"] == "COMPLETED"
    assert doc["result"] == {"score": 1.0, "thing": "<Opaque handle>"}
    assert "stored as its repr: result.thing: Opaque" in doc["captured_out"]


def test_result_too_large_for_a_document_is_truncated_with_a_warning(test_db, tmp_path):
    proc = run_test_app("bad_app.py", "hydra/launcher=seml_local", "mode=huge", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = test_db["bad_app"].find_one()
    assert doc["status"] == "COMPLETED"
    assert doc["result"].endswith("bytes, truncated>") and len(doc["result"]) < 2000
    assert "above the 4194304 bytes kept" in doc["captured_out"]


def test_task_killed_by_sigkill_is_killed_and_the_multirun_exits_non_zero(slurm, test_db, tmp_path):
    proc = run_test_app("bad_app.py", "hydra/launcher=seml", "mode=sigkill", cwd=tmp_path)
    assert proc.returncode != 0
    doc = test_db["bad_app"].find_one()
    assert doc["status"] == "KILLED"
    assert doc["fail_trace"]
    assert "is KILLED" in proc.stderr


def test_task_output_with_invalid_utf8_prints_with_replacement_characters(slurm, test_db, tmp_path):
    from typer.testing import CliRunner

    from seml_hydra.cli import app

    proc = run_test_app("bad_app.py", "hydra/launcher=seml", "mode=bad_utf8", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = CliRunner().invoke(app, ["bad_app", "print-output"])
    assert result.exit_code == 0, result.output
    assert "before \ufffd\ufffd after" in result.output


def test_storable_result_keeps_json_values_and_converts_the_rest():
    numpy = pytest.importorskip("numpy")
    value, problems = storable_result(
        {"a": (1, 2.5), "b": numpy.float64(0.5), "c": numpy.arange(3), "d": 2**70, "e": object}
    )
    assert value["a"] == [1, 2.5] and value["b"] == 0.5 and value["c"] == [0, 1, 2]
    assert value["d"] == repr(2**70) and value["e"] == repr(object)
    assert problems == ["result.d: int", "result.e: type"]
    assert storable_result({"x": [1, "y", None]}) == ({"x": [1, "y", None]}, [])


def test_seml_commands_refuse_internal_collections(test_db):
    from typer.testing import CliRunner

    from seml_hydra.cli import app

    test_db["fs.files"].insert_one({"_id": 1, "filename": "keep.py"})
    for args in (["fs.files", "status"], ["fs.files", "delete", "-y"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 1 and "used by seml-hydra, GridFS or Sacred" in result.output
    assert test_db["fs.files"].count_documents({}) == 1


@pytest.mark.parametrize("sweeper", ["basic", "seml"])
def test_a_sweep_with_zero_points_is_a_clear_error_and_stages_nothing(test_db, tmp_path, sweeper):
    proc = run_app(
        "fail.py",
        "-m",
        "hydra/launcher=seml_local",
        f"hydra/sweeper={sweeper}",
        "x=range(0)",
        cwd=tmp_path,
    )
    assert_clean_error(proc, "the sweep has no points")
    assert test_db["fail"].count_documents({}) == 0


def test_a_task_that_prints_more_than_a_document_holds_completes_with_its_result(test_db, tmp_path):
    """20 MB of output: MongoDB documents hold 16 MB, so ``captured_out`` keeps the last
    MAX_CAPTURED_CHARS characters and says so; the run is COMPLETED with its result."""
    from seml_hydra.job.heartbeat import MAX_CAPTURED_CHARS

    proc = start_app(
        "tests/apps/chatty_app.py",
        "-m",
        "hydra/launcher=seml_local",
        "chars=20000000",
        cwd=tmp_path,
    )
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    doc = test_db["chatty_app"].find_one()
    assert doc["status"] == "COMPLETED"
    assert doc["result"] == 1
    captured = doc["captured_out"]
    assert captured.startswith("[seml-hydra: earlier output dropped")
    assert captured.rstrip().endswith("last line")
    assert MAX_CAPTURED_CHARS <= len(captured) < MAX_CAPTURED_CHARS + 200


@pytest.mark.parametrize(
    "override, named, problem",
    [
        ("hydra.launcher.partition='debug\nhostname'", "hydra.launcher.partition=", "control"),
        ("hydra.launcher.account='acct\rid'", "hydra.launcher.account=", "control"),
        ("+hydra.launcher.additional_parameters.mail-type='END\nid'", "mail-type=", "control"),
        ("hydra.launcher.setup=['module list','echo a\necho b']", "setup[1]=", "control"),
        ("hydra.launcher.collection='{collection}\nhostname'", "Invalid collection", "control"),
        ("hydra.launcher.collection={collection}\\x", "hydra.launcher.collection=", "backslash"),
        ("hydra.launcher.partition=de\\bug", "hydra.launcher.partition=", "backslash"),
    ],
)
def test_a_value_that_would_break_the_job_script_is_refused_before_staging(
    slurm, test_db, tmp_path, override, named, problem
):
    """A newline in a value the sbatch script gets would end its ``#SBATCH`` block and run the
    rest as a shell line; sbatch drops a backslash from an ``#SBATCH`` line even inside quotes
    (a collection ``a\\b`` became the comment ``ab``: ``seml queue`` did not list its jobs,
    ``cancel`` left them alone as another collection's). Refused naming the field, nothing
    staged, no job script written and no job submitted."""
    collection = f"inject_{tmp_path.name}"[-60:]
    proc = run_test_app(
        "gate.py",
        "hydra/launcher=seml",
        f"hydra.launcher.collection={collection}",
        override.format(collection=collection),
        cwd=tmp_path,
    )
    phrase = "contains the control character" if problem == "control" else "contains a backslash"
    assert_clean_error(proc, named, phrase)
    assert test_db.list_collection_names() == []
    assert not list(tmp_path.rglob(".submitit")) and not list(tmp_path.rglob("*.sh"))
    comments = subprocess.run(
        ["squeue", "-h", "-a", "-o", "%k"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert not [c for c in comments if c.startswith(collection)]


def test_start_refuses_a_stored_launcher_with_a_control_character_before_any_sbatch(
    test_db, tmp_path
):
    """``seml start`` rebuilds launchers from the documents: a stored value with a newline is
    refused before anything moves to PENDING or reaches sbatch."""
    import dataclasses

    from seml_hydra.config import SemlLauncherConf
    from seml_hydra.launch.submit import SubmissionError, SubmitRequest, submit_requests

    test_db["c"].insert_one({"_id": 1, "status": "STAGED"})
    launcher = {**dataclasses.asdict(SemlLauncherConf()), "partition": "debug\nhostname"}
    launcher["submitit_folder"] = str(tmp_path / ".submitit" / "%j")
    request = SubmitRequest(1, launcher, "payload", 1, "slurm")
    with pytest.raises(SubmissionError, match="hydra.launcher.partition=.*Nothing was submitted"):
        submit_requests(test_db["c"], "c", [request], db_cfg=None)
    assert test_db["c"].find_one({"_id": 1}) == {"_id": 1, "status": "STAGED"}
    assert not (tmp_path / ".submitit").exists()


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs mounted under ``tmp_path``, filled up (unmounted afterwards)."""
    mount = tmp_path / "full"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    try:
        with open(mount / "filler", "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_full_disk_in_the_submitit_folder_says_so_and_documents_stay_staged(
    slurm, test_db, tmp_path, full_disk
):
    proc = run_app(
        "fail.py",
        "-m",
        "hydra/launcher=seml",
        f"hydra.launcher.submitit_folder={full_disk}/jobs",
        cwd=tmp_path,
    )
    assert_clean_error(
        proc,
        f"cannot write the job files in {full_disk}/jobs: No space left on device; free space "
        "or set hydra.launcher.submitit_folder",
        "stay STAGED",
    )
    assert "sbatch refused" not in proc.stderr
    assert "mem_gb" not in proc.stderr
    assert [d["status"] for d in test_db["fail"].find()] == ["STAGED"]


@pytest.mark.parametrize(
    "overrides, phrase",
    [
        (
            ["x=1", "+tags={v1.0: 1}"],
            "config key 'v1.0' (under tags) comes from the override '+tags",
        ),
        (["x=1", "+meta={a: {$ref: 2}}"], "config key '$ref' (under meta/a) comes from the over"),
        # the bad key only in the second staging chunk: the first chunk's document goes again
        (["x=1", "+meta=choice({a: 1},{v1.0: 1})"], "config key 'v1.0' (under meta) comes from"),
    ],
)
def test_a_config_key_sacred_refuses_is_refused_before_staging_naming_its_override(
    test_db, tmp_path, overrides, phrase
):
    """Hydra and OmegaConf accept keys with ``.`` or a leading ``$``; Sacred refuses them in
    every job ("Invalid key"). The launch refuses them, naming the key and the override it came
    from, and stages nothing."""
    proc = run_app(
        "fail.py",
        "-m",
        "hydra/launcher=seml_local",
        *overrides,
        cwd=tmp_path,
        env={"SEML_HYDRA_STAGE_CHUNK": "1"},
    )
    assert_clean_error(proc, phrase, "Rename the key; nothing was staged")
    assert test_db["fail"].count_documents({}) == 0
    assert not list(test_db["fs.files"].find({}))


def test_a_config_key_sacred_refuses_in_the_apps_config_is_named_with_its_origin(test_db, tmp_path):
    app = tmp_path / "dotted.py"
    app.write_text(
        "import hydra\n\n\n"
        '@hydra.main(version_base="1.3", config_path=".", config_name="dotted")\n'
        "def main(cfg):\n    return 1\n\n\n"
        'if __name__ == "__main__":\n    main()\n'
    )
    (tmp_path / "dotted.yaml").write_text("x: 1\nversions:\n  v2.1: new\n")
    proc = run_test_app(str(app), "hydra/launcher=seml_local", "x=1,2", cwd=tmp_path)
    assert_clean_error(proc, "config key 'v2.1' (under versions) comes from the app's config")
    assert test_db.list_collection_names() == []


def test_the_slurm_job_id_in_a_config_value_is_refused_naming_the_alternative(test_db, tmp_path):
    """``${hydra.job.id}`` exists only in the job, while the launcher resolves the config at
    staging: outside ``hydra.sweep.subdir`` it is refused in one line naming the key and
    ``${hydra.job.num}``, not with OmegaConf's traceback (nor stored as a placeholder, when
    the subdir uses it too)."""
    for subdir in ([], ["hydra.sweep.subdir=${hydra.job.num}_${hydra.job.id}"]):
        proc = run_app(
            "fail.py",
            "-m",
            "hydra/launcher=seml_local",
            "x=1,2",
            "+run_name=run_${hydra.job.id}",
            *subdir,
            cwd=tmp_path,
        )
        assert_clean_error(
            proc,
            "Error: run_name uses ${hydra.job.id}",
            "use ${hydra.job.num} instead",
            "Nothing was staged",
        )
        assert test_db.list_collection_names() == []


def test_a_point_whose_document_would_pass_16_mb_is_refused_and_nothing_is_staged(
    test_db, tmp_path
):
    """A 17 MB config value (here made by the app's resolver): MongoDB refuses the document;
    the launch says which point and which value, in one line, and leaves nothing stored."""
    app = tmp_path / "big.py"
    app.write_text(
        "import hydra\nfrom omegaconf import OmegaConf\n\n"
        'OmegaConf.register_new_resolver("big", lambda n: "a" * int(n))\n\n\n'
        '@hydra.main(version_base="1.3", config_path=".", config_name="big")\n'
        "def main(cfg):\n    return 1\n\n\n"
        'if __name__ == "__main__":\n    main()\n'
    )
    (tmp_path / "big.yaml").write_text("x: 1\ndata:\n  small: 1\n  blob: ${big:17000000}\n")
    proc = run_test_app(
        str(app),
        "hydra/launcher=seml_local",
        "x=1,2",
        cwd=tmp_path,
        env={"SEML_HYDRA_STAGE_CHUNK": "1"},
    )
    assert_clean_error(
        proc,
        "the sweep point x=1 makes a document of 16.2 MiB, above MongoDB's 16 MiB limit",
        "largest config value is config.data.blob (16.2 MiB)",
        "Nothing was staged",
    )
    assert test_db["big"].count_documents({}) == 0
    assert test_db["fs.files"].count_documents({}) == 0


def test_a_collection_name_with_a_space_and_markup_is_quoted_and_shown_as_it_is(test_db, tmp_path):
    """The hints name the collection shell-quoted (copied, ``seml my runs status`` would
    manage the collection ``my``), and rich markup in the name is printed, not applied."""
    name = "my [bold]runs"
    proc = run_app(
        "fail.py",
        "-m",
        "hydra/launcher=seml_local",
        "hydra.launcher.wait=false",
        f"hydra.launcher.collection='{name}'",
        "fail_on=-1",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"Staged 1 new experiment(s) in collection {name} (" in proc.stdout, proc.stdout
    assert "Follow with `seml 'my [bold]runs' status`." in proc.stdout, proc.stdout
    assert test_db[name].count_documents({}) == 1


def test_slurm_only_fields_given_to_the_local_launcher_are_named_in_a_warning(test_db, tmp_path):
    proc = run_app(
        "fail.py",
        "-m",
        "hydra/launcher=seml_local",
        "fail_on=-1",
        "hydra.launcher.setup=[module load x]",
        "hydra.launcher.partition=debug",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        "Warning: hydra.launcher.partition, hydra.launcher.setup only reach Slurm; seml_local "
        "runs its jobs on this machine without them" in proc.stdout
    ), proc.stdout
    plain = run_app("fail.py", "-m", "hydra/launcher=seml_local", "fail_on=-1", cwd=tmp_path)
    assert plain.returncode == 0 and "Warning" not in plain.stdout + plain.stderr, plain.stdout
