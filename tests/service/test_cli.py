"""The ``seml`` command on the real MongoDB (and Slurm's clients), without submitting jobs:
fast start, completion, list/drop and the completion cache, hold with nothing pending,
print-output of invalid UTF-8, detect-killed evidence, errors as one red line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from seml_hydra.cli import app
from seml_hydra.manage.inspection import QueueRow
from seml_hydra.track.cache import (
    cached_collections,
    forget_cached_collections,
    refresh_collection_cache,
)
from seml_hydra.track.outputs import own_output_names, read_output_tail, terminal_safe

runner = CliRunner()


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    """Keep the completion cache of the tests out of the user's home."""
    home = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home


def seml(*args: str, input: str | None = None):
    return runner.invoke(app, list(args), input=input, prog_name="seml")


def doc(exp_id, status="STAGED", **fields):
    return {"_id": exp_id, "batch_id": 1, "status": status, "config": {"x": exp_id}, **fields}


HEAVY = ("pymongo", "hydra", "submitit", "sacred", "bson", "gridfs")


def run_python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
    )


def test_help_imports_neither_pymongo_hydra_submitit_nor_sacred():
    code = (
        "import sys\n"
        "sys.argv = ['seml', '--help']\n"
        "from seml_hydra.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print('HEAVY', [m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert "Commands on a collection" in proc.stdout and "queue" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "HEAVY []"


def completion(words: str, cword: int, cache_home) -> tuple[list[str], str]:
    """Run bash completion of ``words`` in a subprocess; (completions, heavy modules line)."""
    code = (
        "import sys\n"
        "from seml_hydra.cli import app\n"
        "try:\n    app(prog_name='seml')\nexcept SystemExit:\n    pass\n"
        f"print('HEAVY', [m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr)\n"
    )
    proc = run_python(
        code,
        {
            "_SEML_COMPLETE": "complete_bash",
            "COMP_WORDS": words,
            "COMP_CWORD": str(cword),
            "XDG_CACHE_HOME": str(cache_home),
        },
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split(), proc.stderr.strip().splitlines()[-1]


def test_completion_offers_collections_and_root_commands_first_then_collection_commands(
    cache_home,
):
    refresh_collection_cache(["train", "tiny_sweep"])
    words, heavy = completion("seml ", 1, cache_home)
    assert {"list", "queue", "drop", "train", "tiny_sweep"} <= set(words)
    assert "status" not in words  # needs a collection first
    assert heavy == "HEAVY []"
    words, _ = completion("seml t", 1, cache_home)
    assert set(words) == {"train", "tiny_sweep"}
    words, _ = completion("seml train st", 2, cache_home)
    assert set(words) == {"status", "start"}
    words, heavy = completion("seml train ", 2, cache_home)
    assert {"status", "cancel", "reset", "print-output", "detect-killed"} <= set(words)
    assert heavy == "HEAVY []"


def test_refresh_collection_cache_adds_and_forgets_names(cache_home):
    refresh_collection_cache(["a"])
    refresh_collection_cache(["b", "fs.files"], replace=False)
    assert cached_collections() == ["a", "b"]
    forget_cached_collections(["a"])
    assert cached_collections() == ["b"]
    path = cache_home / "seml-hydra" / "collections.json"
    assert json.loads(path.read_text())["collections"] == ["b"]


def test_list_counts_states_skips_internal_collections_and_fills_the_cache(test_db):
    test_db["exp_a"].insert_many([doc(1), doc(2, "FAILED"), doc(3, "FAILED")])
    test_db["exp_b"].insert_one(doc(1, "COMPLETED"))
    test_db["seml_hydra_counters"].insert_one({"_id": "exp_a._id", "value": 3})
    test_db["fs.files"].insert_one({"filename": "x"})
    test_db["metrics"].insert_one({"x": 1})
    test_db["seml_hydra_metrics.exp_a"].insert_one({"run_id": 1, "name": "loss"})
    result = seml("list")
    assert result.exit_code == 0, result.output
    assert "exp_a" in result.output and "exp_b" in result.output
    assert "seml_hydra_metrics" not in result.output
    for hidden in ("seml_hydra_counters", "fs.files", "metrics"):
        assert hidden not in result.output
    header = next(line for line in result.output.splitlines() if "Collection" in line)
    row = next(line for line in result.output.splitlines() if "exp_a" in line)
    assert [c.strip() for c in header.split("┃")[1:-1]] == [
        "Collection",
        "STAGED",
        "COMPLETED",
        "FAILED",
        "Total",
    ]
    assert [c.strip() for c in row.split("│")[1:-1]] == ["exp_a", "1", "0", "2", "3"]
    assert cached_collections() == ["exp_a", "exp_b"]
    result = seml("list", "_b$")
    assert "exp_b" in result.output and "exp_a" not in result.output


def test_drop_asks_drops_matching_collections_counters_and_cache_entries(test_db):
    test_db["sweep_1"].insert_one(doc(1))
    test_db["sweep_2"].insert_one(doc(1, "FAILED"))
    test_db["keep"].insert_one(doc(1))
    test_db["seml_hydra_counters"].insert_many(
        [{"_id": "sweep_1._id", "value": 1}, {"_id": "keep._id", "value": 1}]
    )
    seml("list")
    result = seml("drop", "sweep_.*", input="n\n")
    assert result.exit_code == 1 and "Aborted" in result.output
    assert {"sweep_1", "sweep_2"} <= set(test_db.list_collection_names())
    result = seml("drop", "sweep_.*", input="y\n")
    assert result.exit_code == 0, result.output
    assert "sweep_1 (1 experiments)" in result.output
    names = set(test_db.list_collection_names())
    assert "sweep_1" not in names and "sweep_2" not in names and "keep" in names
    assert [c["_id"] for c in test_db["seml_hydra_counters"].find()] == ["keep._id"]
    assert cached_collections() == ["keep"]
    result = seml("drop", "nothing.*", "-y")
    assert result.exit_code == 0 and "No collection matches" in result.output


def test_unknown_collection_and_bad_options_are_one_red_line_and_exit_1(test_db):
    result = seml("nope", "status")
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"Error: There is no collection 'nope' in database '{test_db.name}'. `seml list` "
        "shows the collections."
    ]
    test_db["c"].insert_one(doc(1))
    result = seml("c", "status", "-s", "DONE")
    assert result.exit_code == 1 and "Unknown state 'DONE'" in result.stderr
    result = seml("c", "status", "-fd", "[1]")
    assert result.exit_code == 1 and "--filter-dict must be a mapping" in result.stderr
    result = seml("c", "cancel", "-s", "COMPLETED")
    assert result.exit_code == 1 and "not COMPLETED" in result.stderr
    result = seml("status")
    assert result.exit_code == 2 and "works on a collection" in result.output


def test_hold_and_release_with_nothing_pending_exit_0(test_db, slurm):
    test_db["c"].insert_many(
        [
            doc(1),
            doc(2, "COMPLETED"),
            # PENDING but its array is unknown to Slurm (long gone): nothing to hold
            doc(3, "PENDING", slurm=[{"array_id": 999999, "task_id": 0}]),
        ]
    )
    result = seml("c", "hold")
    assert result.exit_code == 0, result.output
    assert "Nothing pending to hold." in result.output
    result = seml("c", "release")
    assert result.exit_code == 0 and "Nothing held to release." in result.output


def job_doc(exp_id, status, folder, **execution):
    """An experiment whose submitit folder (``seml.output_dir``) is ``folder``."""
    return doc(exp_id, status, seml={"output_dir": f"{folder}/%j"}, execution=dict(execution))


def sbatch_script(folder, array, collection="c"):
    """submitit's copy of array ``array``'s sbatch script in ``folder/<array>/`` (what the
    launcher's submission leaves), naming ``collection`` as its ``--comment``."""
    from pathlib import Path

    script = Path(folder) / str(array) / f"{array}_submission.sh"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f"#!/bin/bash\n#SBATCH --comment={collection}\n#SBATCH --job-name=x\n")
    return script


def test_print_output_shows_invalid_utf8_as_replacement_characters(test_db, tmp_path):
    out = tmp_path / "55_0_log.out"
    out.write_bytes(b"epoch 1\nbad bytes: \xff\xfe\x80 end\nlast line\n")
    gone = tmp_path / "56_0_log.out"
    sbatch_script(tmp_path, 55), sbatch_script(tmp_path, 56)
    test_db["c"].insert_many(
        [
            job_doc(1, "COMPLETED", tmp_path, array_id=55, task_id=0, slurm_output_file=str(out)),
            doc(2, "PENDING"),
            job_doc(3, "FAILED", tmp_path, array_id=56, task_id=0, slurm_output_file=str(gone)),
        ]
    )
    result = seml("c", "print-output")
    assert result.exit_code == 0, result.output
    assert "bad bytes: \ufffd\ufffd\ufffd end" in result.stdout
    assert "no output file yet" in result.stdout
    assert "No such file or directory" in result.stdout
    result = seml("c", "print-output", "-id", "1", "--tail", "1")
    assert result.exit_code == 0
    assert "last line" in result.stdout and "epoch 1" not in result.stdout


def test_print_fail_trace_prints_traces_of_failed_experiments(test_db):
    test_db["c"].insert_many(
        [
            doc(1, "FAILED", fail_trace=["Traceback:\n", "ValueError: x == 2\n"]),
            doc(2, "COMPLETED"),
            doc(3, "KILLED"),
        ]
    )
    result = seml("c", "print-fail-trace")
    assert result.exit_code == 0, result.output
    assert "ValueError: x == 2" in result.stdout
    assert "experiment 1 (FAILED)" in result.stdout and "experiment 3 (KILLED)" in result.stdout
    assert "experiment 2" not in result.stdout


def test_detect_killed_marks_only_with_evidence_and_keeps_the_output_tail(test_db, slurm, tmp_path):
    out = tmp_path / "999998_0_log.out"
    out.write_bytes(b"".join(b"line %d\n" % i for i in range(100)) + b"oom \xff\n")
    gone = {"cluster": "slurm", "array_id": 999998, "task_id": 0}
    sbatch_script(tmp_path, 999998)
    test_db["c"].insert_many(
        [
            job_doc(1, "RUNNING", tmp_path, **gone, slurm_output_file=str(out)),
            doc(2, "PENDING"),  # not submitted yet: no evidence
            doc(3, "RUNNING", execution={"cluster": "local", "array_id": 1, "task_id": 0}),
            doc(4, "RUNNING", execution={**gone, "task_id": 1, "cancel_time": "t"}),
            doc(5, "COMPLETED", execution=gone),
        ]
    )
    result = seml("c", "detect-killed")
    assert result.exit_code == 0, result.output
    assert "Detected 1 killed experiment(s): 1" in result.output
    status = {d["_id"]: d["status"] for d in test_db["c"].find()}
    assert status == {1: "KILLED", 2: "PENDING", 3: "RUNNING", 4: "INTERRUPTED", 5: "COMPLETED"}
    trace = "".join(test_db["c"].find_one({"_id": 1})["fail_trace"])
    assert "999998_0" in trace and "oom \ufffd" in trace and "line 99" in trace
    assert "line 10\n" not in trace


def test_detect_killed_does_not_take_a_reused_pid_for_the_local_worker(test_db):
    """A worker's run whose pid now belongs to another process (here: this test's own, with a
    different start time) is KILLED; the same pid with its recorded start time stays RUNNING."""
    import socket
    from datetime import datetime, timedelta

    from seml_hydra.core.processes import process_start

    stale = datetime.utcnow() - timedelta(minutes=5)
    here, pid = socket.gethostname(), os.getpid()
    mine = {"cluster": "local", "array_id": pid, "task_id": 0, "hostname": here}
    test_db["c"].insert_many(
        [
            doc(1, "RUNNING", heartbeat=stale, execution={**mine, "process_start": "1"}),
            doc(
                2,
                "RUNNING",
                heartbeat=stale,
                execution={**mine, "process_start": process_start(pid)},
            ),
        ]
    )
    result = seml("c", "detect-killed")
    assert result.exit_code == 0, result.output
    assert "Detected 1 killed experiment(s): 1" in result.output
    assert {d["_id"]: d["status"] for d in test_db["c"].find()} == {1: "KILLED", 2: "RUNNING"}
    assert f"local process {pid} on {here}" in "".join(
        test_db["c"].find_one({"_id": 1})["fail_trace"]
    )


@pytest.fixture
def secret_elsewhere(tmp_path):
    """A private file of this user outside any experiment's folder (as ``~/.ssh/id_ed25519``),
    and a symlink to it inside an experiment's folder (``<folder>/123/123_0_log.out``)."""
    import shutil
    import tempfile
    from pathlib import Path

    secret = tmp_path / "private" / "id_ed25519"
    secret.parent.mkdir(mode=0o700)
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY----- s3cr3t\n")
    secret.chmod(0o600)
    # in /tmp, so that the other user can reach it (tmp_path is private)
    folder = Path(tempfile.mkdtemp(prefix="seml-hydra-test-sweep-", dir="/tmp"))
    folder.chmod(0o755)
    (folder / "123").mkdir(parents=True)
    link = folder / "123" / "123_0_log.out"
    link.symlink_to(secret)
    yield secret, folder, link
    shutil.rmtree(folder, ignore_errors=True)


def test_status_and_print_output_do_not_read_files_a_forged_document_names(
    test_db, slurm, tmp_path, secret_elsewhere, other_user
):
    """Documents whose output file is a private file outside the experiment's folder, a
    symlink to it inside the folder, a file with a job output's name outside the folder, and
    another user's file inside the folder: ``status`` (its KILLED detection copies the output's
    tail into ``fail_trace``) and ``print-output`` read none of them, and say why."""
    secret, folder, link = secret_elsewhere
    outside = tmp_path / "private" / "999_0_log.out"
    outside.write_text("s3cr3t too\n")
    theirs = folder / "124" / "999996_4_0_log.out"
    theirs.parent.mkdir()
    theirs.parent.chmod(0o777)
    other_user.run("sh", "-c", f"echo s3cr3t of theirs > {theirs}", check=True)
    gone = {"cluster": "slurm", "array_id": 999996, "task_id": 0}
    sbatch_script(folder, 999996)
    named = {1: secret, 2: link, 3: outside, 4: theirs}
    test_db["c"].insert_many(
        [
            job_doc(i, "RUNNING", folder, **{**gone, "task_id": i}, slurm_output_file=str(path))
            for i, path in named.items()
        ]
    )
    result = seml("c", "status")
    assert result.exit_code == 0, result.output
    traces = {d["_id"]: "".join(d["fail_trace"]) for d in test_db["c"].find()}
    assert set(traces) == set(named)
    for trace in traces.values():
        assert "999996" in trace and "s3cr3t" not in trace, trace
    assert "not a job output file" in traces[1]
    assert "a symbolic link" in traces[2]
    assert "outside the experiment's output folder" in traces[3]
    assert f"belongs to uid {other_user.uid}" in traces[4]
    result = seml("c", "print-output")
    assert result.exit_code == 0, result.output
    assert "s3cr3t" not in result.output
    assert result.output.count("not read") == 4


def test_status_and_print_output_read_only_the_output_files_of_the_documents_own_job(
    test_db, slurm, other_user
):
    """The folder a document names comes from the same document: forged RUNNING documents
    name a private ``id_secret.out`` (0600, this user's) and another job's ``123_0_log.out``
    in a folder they name; ``status`` (KILLED detection) and ``print-output`` read neither and
    say why, while a document naming its own job's submitit output is still read."""
    import shutil
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp(prefix="seml-hydra-test-victimhome-", dir="/tmp"))
    try:
        folder.chmod(0o755)
        secret = folder / "id_secret.out"
        secret.write_text("s3cr3t key\n")
        secret.chmod(0o600)
        other_job = folder / "123_0_log.out"
        other_job.write_text("s3cr3t of job 123\n")
        other_job.chmod(0o600)
        own = folder / "999995_3_0_log.out"
        own.write_text("own job output\n")
        gone = {"cluster": "slurm", "array_id": 999995}
        sbatch_script(folder, 999995)
        named = {1: secret, 2: other_job, 3: own}
        docs = [
            job_doc(i, "RUNNING", folder, **gone, task_id=i, slurm_output_file=str(path))
            for i, path in named.items()
        ]
        # the forger is another user of the shared database
        forge = (
            "import json, sys, pymongo\n"
            "db = pymongo.MongoClient('mongodb://127.0.0.1:27017')[sys.argv[1]]\n"
            "db['c'].insert_many(json.loads(sys.argv[2]))\n"
        )
        other_user.python(forge, test_db.name, json.dumps(docs), check=True)
        result = seml("c", "status")
        assert result.exit_code == 0, result.output
        traces = {d["_id"]: "".join(d["fail_trace"]) for d in test_db["c"].find()}
        for i in (1, 2):
            assert "s3cr3t" not in traces[i] and "not an output file of the" in traces[i]
        assert "own job output" in traces[3]
        result = seml("c", "print-output")
        assert result.exit_code == 0, result.output
        assert "s3cr3t" not in result.output and "own job output" in result.output
        assert result.output.count("not an output file of the experiment's job") == 2
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_own_output_names_are_the_submitit_and_seml_names_of_the_recorded_jobs():
    names = own_output_names(
        {"_id": 7, "execution": {"array_id": 50, "task_id": 3}, "slurm": [{"array_id": 49}]}
    )
    for good in ("50_3_0_log.out", "50_3_12_log.err", "exp_50_3.out", "49_0_log.out"):
        assert names.fullmatch(good), good
    for bad in ("id_secret.out", "123_0_log.out", "50_3_log.out", "50_30_0_log.out", "x_7.out"):
        assert not names.fullmatch(bad), bad
    assert own_output_names({"_id": 7}, seml_output_file=True).fullmatch("exp_7.out")
    assert not own_output_names({"_id": 7}).fullmatch("7_0_log.out")


def test_output_files_are_read_from_their_end_only(tmp_path):
    """A huge output file: only its last bytes are read (the rest is seeked over)."""
    out = tmp_path / "1" / "1_0_log.out"
    out.parent.mkdir()
    with open(out, "wb") as f:
        f.write(b"head line\n")
        f.seek(50 * 1024 * 1024)
        f.write(b"\nlast line\n")
    tail = read_output_tail(out, tmp_path, max_bytes=100)
    assert tail.data is not None and tail.data.endswith(b"last line\n")
    assert len(tail.data) == 100 and tail.skipped == out.stat().st_size - 100


def test_print_commands_strip_terminal_escape_sequences(test_db, tmp_path):
    """A document's ``fail_trace``/``captured_out`` and an output file with escape sequences
    that would retitle the terminal, write the clipboard, clear the screen or hide text: the
    CLI prints the text without them (newlines and tabs kept)."""
    evil = "\x1b]0;owned\x07\x1b]52;c;cm0gLXJmIH4=\x1b\\\x1b[2J\x1b[8mhidden\x1b[0m\x9b31m"
    out = tmp_path / "1" / "1_0_log.out"
    sbatch_script(tmp_path, 1)
    out.write_text(f"epoch\t1 {evil}done\nprogress 10%\rprogress 100%\n")
    test_db["c"].insert_many(
        [
            {**job_doc(1, "FAILED", tmp_path, array_id=1, task_id=0, slurm_output_file=str(out)),
             "fail_trace": [f"Traceback {evil}\n", "ValueError: x\x07\x08\n"]},
            {**job_doc(2, "FAILED", tmp_path, slurm_output_file=str(tmp_path / "gone.out")),
             "captured_out": f"captured {evil}end\n"},
            doc(3, f"FAILED{evil}"),
        ]
    )  # fmt: skip

    def clean(text: str) -> None:
        assert not any(c in text for c in "\x1b\x07\x08\r\x9b"), repr(text)

    result = seml("c", "print-fail-trace")
    assert result.exit_code == 0, result.output
    clean(result.stdout)
    assert "Traceback hiddendone" not in result.stdout
    assert "Traceback hidden\nValueError: x\n" in result.stdout
    result = seml("c", "print-output", "-id", "1")
    assert result.exit_code == 0, result.output
    clean(result.stdout)
    assert "epoch\t1 hiddendone\nprogress 10%\nprogress 100%\n" in result.stdout
    result = seml("c", "print-output", "-id", "2")
    clean(result.stdout)
    assert "captured hiddenend" in result.stdout
    result = seml("c", "print-output", "-id", "3")  # a status with escape sequences
    clean(result.stdout)
    assert "experiment 3 (FAILEDhidden)" in result.stdout
    assert terminal_safe(f"a{evil}b\tc\n") == "ahiddenb\tc\n"


def test_detect_killed_marks_nothing_when_slurm_cannot_be_asked(test_db, tmp_path, monkeypatch):
    test_db["c"].insert_one(
        doc(1, "RUNNING", execution={"cluster": "slurm", "array_id": 999997, "task_id": 0})
    )
    monkeypatch.setenv("PATH", str(tmp_path))  # no squeue/sacct
    result = seml("c", "status")
    assert result.exit_code == 0, result.output
    assert "no experiment was marked KILLED" in result.stderr
    assert test_db["c"].find_one({"_id": 1})["status"] == "RUNNING"


def test_reset_puts_failed_back_to_staged_and_clears_run_fields(test_db):
    run = {
        "execution": {"cluster": "slurm", "array_id": 7, "task_id": 0},
        "start_time": 1,
        "fail_trace": ["x"],
        "captured_out": "y",
        "slurm": [{"array_id": 7, "task_id": 0, "experiments_per_job": 1, "sbatch_options": {}}],
    }
    test_db["c"].insert_many(
        [doc(1, "FAILED", **run), doc(2, "COMPLETED", **run), doc(3, "RUNNING", **run)]
    )
    result = seml("c", "reset")
    assert result.exit_code == 0 and "Reset 1 experiment(s) to STAGED: 1" in result.output
    d = test_db["c"].find_one({"_id": 1})
    assert d["status"] == "STAGED"
    assert not {"execution", "start_time", "fail_trace", "captured_out"} & set(d)
    assert d["slurm"] == [{"experiments_per_job": 1, "sbatch_options": {}}]
    assert test_db["c"].find_one({"_id": 2})["status"] == "COMPLETED"
    result = seml("c", "reset", "-s", "COMPLETED", "-id", "2")  # asks: results would be lost
    assert result.exit_code == 1 and "clear their results" in result.output
    assert test_db["c"].find_one({"_id": 2})["status"] == "COMPLETED"
    result = seml("c", "reset", "-s", "COMPLETED", "-id", "2", "-y")
    assert result.exit_code == 0 and test_db["c"].find_one({"_id": 2})["status"] == "STAGED"
    result = seml("c", "reset", "-s", "RUNNING")
    assert result.exit_code == 1 and test_db["c"].find_one({"_id": 3})["status"] == "RUNNING"


def test_start_refuses_documents_staged_by_seml_itself(test_db):
    test_db["c"].insert_one(doc(1, "STAGED", seml={"executable": "train.py"}))
    result = seml("c", "start")
    assert result.exit_code == 1
    assert "has no seml.payload_file" in result.stderr
    assert test_db["c"].find_one({"_id": 1})["status"] == "STAGED"
    result = seml("c", "start", "-id", "5")
    assert result.exit_code == 0 and "nothing to start" in result.output


def test_destructive_commands_ask_above_the_threshold(test_db):
    test_db["c"].insert_many([doc(i, "FAILED") for i in range(1, 13)])
    result = seml("c", "delete", input="n\n")
    assert result.exit_code == 1 and test_db["c"].count_documents({}) == 12
    result = seml("c", "delete", "-b", "1", "-fd", '{"config.x": {"$lte": 3}}')
    assert result.exit_code == 0 and "Deleted 3 experiment(s): 1-3" in result.output
    result = seml("c", "delete", "-y")
    assert result.exit_code == 0 and test_db["c"].count_documents({}) == 0


def test_queue_with_something_that_is_not_a_job_id_is_one_line_and_exit_1(db_url):
    result = runner.invoke(app, ["queue", "abc"])
    assert result.exit_code == 1
    assert "'abc' is not a Slurm job id" in result.output
    assert "Traceback" not in result.output


def test_list_status_and_queue_strip_escape_sequences_of_names_and_states(test_db):
    """A collection name and statuses with an escape sequence that retitles the terminal (and
    rich markup): ``seml list``, ``seml <col> status`` and the table of ``seml queue`` print
    them without the escapes and without interpreting the markup."""
    from rich.console import Console

    from seml_hydra.cli.global_cmds import _queue_table

    evil = "\x1b]0;X\x07"
    test_db[f"ev{evil}il"].insert_one(doc(1, f"RUN{evil}NING"))
    test_db["c"].insert_many([doc(1), doc(2, f"FAI{evil}LED"), doc(3, "[red]ODD[/]")])

    def clean(text: str) -> str:
        assert "\x1b" not in text and "\x07" not in text, repr(text)
        return text

    listed = seml("list")
    assert listed.exit_code == 0, listed.output
    assert "evil" in clean(listed.stdout) and "RUNNING" in listed.stdout
    status = seml("c", "status")
    assert status.exit_code == 0, status.output
    assert "FAILED" in clean(status.stdout) and "[red]ODD[/]" in status.stdout
    row = QueueRow(f"c{evil}", "12", f"PEN{evil}DING", f"why{evil}", None, 1.0, "n", [1])
    console = Console(record=True, width=200, color_system=None)
    console.print(_queue_table([row]))
    text = clean(console.export_text())
    assert "PENDING" in text and "why" in text and "c " in text


def forge_malformed(test_db) -> None:
    """Documents no launcher writes: a status that is a dict or a number, no status, ``_id`` s
    of several types (as a forged or broken collection holds)."""
    test_db["weird"].insert_many(
        [
            doc(1, "COMPLETED"),
            doc("str", "RUNNING", batch_id="b"),
            doc(3, {"$x": 1}),
            {"_id": 4},
            doc(5.5, "PENDING", slurm="notalist"),
            doc(7, 7, slurm=[{"array_id": 12}]),
            doc(8, "FAILED"),
        ]
    )


def test_malformed_documents_are_named_in_one_line_and_the_rest_is_shown(test_db):
    forge_malformed(test_db)
    result = seml("weird", "status")
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert "2 experiment(s) with a malformed status (not a state name): ids 3, 7" in result.output
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines() if "│" in line}
    assert "5.5" in rows["PENDING"] and "str" in rows["RUNNING"] and "8" in rows["FAILED"]
    listed = seml("list")
    assert listed.exit_code == 0, listed.output
    assert "malformed status (not a state name) in weird (2)" in " ".join(listed.output.split())


def test_cancel_and_delete_of_malformed_documents_finish_without_a_traceback(test_db):
    forge_malformed(test_db)
    cancelled = seml("weird", "cancel", "-y")
    assert cancelled.exit_code == 0, (cancelled.output, cancelled.exception)
    assert "('str', 5.5)" in cancelled.output  # both active ones, whatever their _id type
    assert test_db["weird"].find_one({"_id": "str"})["status"] == "INTERRUPTED"
    deleted = seml("weird", "delete", "-y")
    assert deleted.exit_code == 0, (deleted.output, deleted.exception)
    assert "Deleted 7 experiment(s): 1, 3-4, 7-8, 'str', 5.5" in deleted.output
    assert test_db["weird"].count_documents({}) == 0


def test_start_of_our_document_after_semls_reset_says_our_fields_are_gone(test_db):
    """SEML 0.5.7's reset keeps only what SEML knows (``get_experiment_reset_op``): of our
    document it leaves no ``seml.payload_file``, ``hydra`` or ``seed``."""
    seml_block = {"executable": "/home/u/app.py", "name": "app", "version": [0, 5, 7]}
    seml_block |= {"working_dir": "/home/u", "output_dir": "/home/u/.submitit"}
    after_semls_reset = doc(1, "STAGED", seml=seml_block, config_hash="h", add_time="t")
    after_semls_reset |= {"slurm": [{"experiments_per_job": 1, "sbatch_options": {"ntasks": 1}}]}
    test_db["c"].insert_one(after_semls_reset)
    result = seml("c", "start")
    assert result.exit_code == 1
    message = " ".join(result.stderr.split())
    assert "seml-hydra fields (payload, hydra, seed) are gone, as SEML's own `reset`" in message
    assert "re-launch the sweep (its points are found by config hash" in message
    assert len(result.stderr.strip().splitlines()) <= 6 and "Traceback" not in result.stderr
    assert test_db["c"].find_one({"_id": 1})["status"] == "STAGED"


def test_status_and_print_output_do_not_read_the_output_of_a_job_of_another_collection(
    test_db, slurm, tmp_path
):
    """Job ids are public: a forged document of collection ``c`` names a real submitit output
    of one of this user's jobs of collection ``other`` (its ids, its folder, its file name).
    Its sbatch script's ``--comment`` is not ``c``, so neither ``status`` nor ``print-output``
    reads it; the same document shape for a job of ``c`` is read."""
    theirs = tmp_path / "888_0" / "888_0_log.out"
    theirs.parent.mkdir()
    theirs.write_text("TOPSECRET of collection other\n")
    sbatch_script(tmp_path, 888, collection="other")
    ours = tmp_path / "889_0" / "889_0_log.out"
    ours.parent.mkdir()
    ours.write_text("output of c\n")
    sbatch_script(tmp_path, 889, collection="c")
    gone = {"cluster": "semltest", "task_id": 0}
    test_db["c"].insert_many(
        [
            job_doc(1, "RUNNING", tmp_path, **gone, array_id=888, slurm_output_file=str(theirs)),
            job_doc(2, "RUNNING", tmp_path, **gone, array_id=889, slurm_output_file=str(ours)),
        ]
    )
    result = seml("c", "status")
    assert result.exit_code == 0, result.output
    traces = {d["_id"]: "".join(d["fail_trace"]) for d in test_db["c"].find()}
    assert "TOPSECRET" not in traces[1] and "with --comment=c" in traces[1]
    assert "output of c" in traces[2]
    result = seml("c", "print-output")
    assert "TOPSECRET" not in result.output and "output of c" in result.output


def test_status_and_print_output_do_not_read_a_private_file_hard_linked_by_another_user(
    test_db, slurm, other_user
):
    """Another user hard-links (``fs.protected_hardlinks=0``) a private file of yours (0600 in a
    searchable directory, as
    ``~/.config/seml/mongodb.config``) and one of your sbatch scripts of the collection into a
    folder of theirs, named as a job's output, and forges a RUNNING document naming it:
    ``status`` (which copies a lost job's output tail into ``fail_trace``, readable by them)
    and ``print-output --slurm`` read neither."""
    import shutil
    import tempfile
    from pathlib import Path

    mine = Path(tempfile.mkdtemp(prefix="seml-hydra-test-mine-", dir="/tmp"))
    theirs = Path(tempfile.mkdtemp(prefix="seml-hydra-test-theirs-", dir="/tmp"))
    try:
        mine.chmod(0o755)
        secret = mine / "mongodb.config"
        secret.write_text("password: s3cr3t\n")
        secret.chmod(0o600)
        script = sbatch_script(mine, 999994)  # a real one of this collection, 0644
        shutil.chown(theirs, other_user.name)
        folder = theirs / "sweep"
        (folder / "999993").mkdir(parents=True)
        shutil.chown(folder, other_user.name)
        shutil.chown(folder / "999993", other_user.name)
        out = folder / "999993" / "999993_0_log.out"
        # the other user's `ln` where fs.protected_hardlinks is 0 (it is 1 on this machine,
        # so the test makes the links that user would make)
        os.link(secret, out)
        os.link(script, folder / "999993" / "999993_submission.sh")
        assert out.stat().st_uid == os.getuid()  # a hard link: your file, in their folder
        execution = {"cluster": "slurm", "array_id": 999993, "task_id": 0}
        test_db["c"].insert_one(
            job_doc(1, "RUNNING", folder, **execution, slurm_output_file=str(out))
        )
        result = seml("c", "status")
        assert result.exit_code == 0, result.output
        trace = "".join(test_db["c"].find_one({"_id": 1})["fail_trace"])
        assert "s3cr3t" not in trace and "another hard link" in trace, trace
        result = seml("c", "print-output", "--slurm")
        assert result.exit_code == 0, result.output
        assert "s3cr3t" not in result.output and "another hard link" in result.output
    finally:
        shutil.rmtree(mine, ignore_errors=True)
        shutil.rmtree(theirs, ignore_errors=True)
