"""The pure parts of the inspect commands (no services): override values written back in
Hydra's grammar, the resolved/unresolved command of a document, ``-p`` keys, status rows,
description groups and their resolution, print-experiment's text."""

from __future__ import annotations

import json
import math
import subprocess
import unicodedata
from datetime import datetime, timezone

import pytest
import yaml
from omegaconf import OmegaConf

from seml_hydra.core.overrides import parse_override
from seml_hydra.manage.commands import (
    override_value,
    resolved_override,
    run_command,
    shell_word,
)
from seml_hydra.manage.describe import (
    description_groups,
    experiment_text,
    projected,
    projection_fields,
    resolve_description,
    state_rows,
)
from seml_hydra.manage.selection import ManageError

VALUES = [
    0.1,
    1e-5,
    -3,
    True,
    None,
    "small",
    "a b",
    "1",
    "true",
    "null",
    "",
    "it's",
    "a\\b",
    "ends\\",
    "${x}",
    "x ${a} \\${b}",
    "x/y.z:w",
    [1, "x", [2.5]],
    [{"a": "b c"}],
    math.inf,
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_override_value_reads_back_as_the_same_value(value):
    """Hydra's override parser and OmegaConf give back exactly ``value``."""
    written = override_value(value)
    parsed = parse_override(f"k={written}").value()
    assert OmegaConf.create({"k": parsed}).k == value, written


def test_override_value_refuses_a_mapping_key_the_grammar_cannot_write():
    with pytest.raises(ValueError):
        override_value({"a b": 1})


def test_resolved_override_takes_config_values_and_keeps_groups_and_deletions():
    config = {"lr": 0.01, "model": {"hidden": 4}, "name": "run 1", "tags": ["a", "b"]}
    choices = {"model": "small", "hydra/launcher": "seml"}
    assert resolved_override("lr=${base}", config, choices) == "lr=0.01"
    assert resolved_override("+name=${oc.env:USER}", config, choices) == "+name='run 1'"
    assert resolved_override("++tags=[x]", config, choices) == "++tags=[a,b]"
    assert resolved_override("model.hidden=8", config, choices) == "model.hidden=4"
    assert resolved_override("model=small", config, choices) == "model=small"
    assert resolved_override("~lr", config, choices) == "~lr"
    assert resolved_override("gone=1", config, choices) == "gone=1"
    assert resolved_override("model@m=big", config, choices) == "model@m=big"


def doc(**fields):
    return {
        "_id": 3,
        "status": "FAILED",
        "config": {"lr": 0.5, "name": "it's"},
        "seml": {"executable": "/p/app.py", "working_dir": "/w d"},
        "hydra": {"overrides": ["lr=${x}", "name=a"], "choices": {}},
        **fields,
    }


def test_run_command_is_quoted_for_the_shell_resolved_or_not():
    run = run_command(doc())
    assert run.argv == ["python", "/p/app.py", "lr=0.5", "name='it\\'s'"]
    assert run.shell == "cd '/w d' && python /p/app.py lr=0.5 'name='\"'\"'it\\'\"'\"'s'\"'\"''"
    raw = run_command(doc(), unresolved=True)
    assert raw.argv[2:] == ["lr=${x}", "name=a"]
    assert raw.shell.endswith("python /p/app.py 'lr=${x}' name=a")
    no_dir = run_command(doc(seml={"executable": "/p/app.py"}))
    assert no_dir.shell.startswith("python /p/app.py")


HIDDEN = ["a\rb", "x\ny", "t\tab", "\x1b[2J", "del\x7f", "nul\x01'q", "c1\x85", "rtl\u202eevil"]
HIDDEN += ["zw\u200bsp", "ls\u2028p", "astral\U000e0001", "back\\slash\r"]


@pytest.mark.parametrize("word", HIDDEN, ids=repr)
def test_shell_word_escapes_control_characters_and_bash_gives_the_word_back(word):
    """A control or invisible character is written as an ANSI-C escape: the printed word is
    one visible line, and bash reads it back as exactly ``word``."""
    quoted = shell_word(word)
    assert quoted.startswith("$'")
    assert not any(unicodedata.category(ch) in {"Cc", "Cf", "Zl", "Zp"} for ch in quoted)
    out = subprocess.run(
        ["bash", "-c", f"printf %s {quoted}"],
        capture_output=True,
        env={"LC_ALL": "C.UTF-8"},
        check=True,
    ).stdout
    assert out.decode("utf-8") == word


def test_shell_word_keeps_shlex_quoting_for_printable_words():
    assert shell_word("a b") == "'a b'"
    assert shell_word("it's") == "'it'\"'\"'s'"
    assert shell_word("plain") == "plain"
    assert shell_word("a\rb") == "$'a\\rb'"


def test_print_command_of_a_value_with_a_carriage_return_is_one_faithful_line():
    """A document value holding ``\r`` (or an escape sequence) cannot split or repaint the
    printed command: it comes quoted as ``$'...'``, on one line."""
    run = run_command(
        doc(
            config={"lr": 0.5, "name": "ok\rrm -rf ~ #"},
            seml={"executable": "/p/app.py", "working_dir": "/w\x1b]0;x\x07"},
        )
    )
    assert run.argv[3] == "name='ok\rrm -rf ~ #'"
    assert "\r" not in run.shell and "\x1b" not in run.shell and "\n" not in run.shell
    assert run.shell == (
        "cd $'/w\\e]0;x\\a' && python /p/app.py lr=0.5 $'name=\\'ok\\rrm -rf ~ #\\''"
    )


def test_run_command_refuses_documents_without_hydra_or_executable():
    with pytest.raises(ManageError, match="not staged by a Hydra app"):
        run_command(doc(hydra=None))
    with pytest.raises(ManageError, match="names no executable"):
        run_command(doc(seml={}))


def test_projection_fields_split_deduplicate_and_drop_keys_under_another():
    assert projection_fields(["config.lr,config", "seml.description", "config"]) == [
        "config",
        "seml.description",
    ]
    for bad in ("$where", "config..lr", "config."):
        with pytest.raises(ManageError, match="not a document key"):
            projection_fields([bad])


def test_projected_values_are_short_lines_and_absent_keys_a_dash():
    d = {"config": {"lr": 0.1, "m": {"a": 1}}, "slurm": [{"array_id": 7}]}
    assert projected(d, ["config.lr", "config.m", "slurm.0.array_id", "config.nope"]) == [
        ("config.lr", "0.1"),
        ("config.m", '{"a":1}'),
        ("slurm.0.array_id", "7"),
        ("config.nope", "-"),
    ]


def test_state_rows_group_ids_descriptions_and_values_in_life_cycle_order():
    docs = [
        {"_id": 3, "status": "FAILED", "config": {"lr": 1}, "seml": {"description": "b"}},
        {"_id": 1, "status": "COMPLETED", "config": {"lr": 1}},
        {"_id": 2, "status": "FAILED", "config": {"lr": 2}, "seml": {"description": "a"}},
        {"_id": 4, "status": "QUEUED", "config": {"lr": 1}, "seml": {"description": "a"}},
    ]
    rows = state_rows(docs, ["config.lr"])
    assert [(r.state, r.ids) for r in rows] == [
        ("STAGED", [4]),
        ("COMPLETED", [1]),
        ("FAILED", [2, 3]),
    ]
    failed = rows[2]
    assert failed.descriptions == ["a", "b"] and failed.values == {"config.lr": ["2", "1"]}
    assert rows[1].descriptions == []


def test_description_groups_put_experiments_without_one_last():
    docs = [
        {"_id": 2, "batch_id": 1, "status": "FAILED", "seml": {"description": "x"}},
        {"_id": 1, "batch_id": 2, "status": "STAGED", "seml": {"description": "x"}},
        {"_id": 5, "batch_id": 1, "status": "COMPLETED"},
        {"_id": 4, "batch_id": 1, "status": "COMPLETED", "seml": {"description": "a"}},
    ]
    groups = description_groups(docs)
    assert [(g.description, g.ids, g.batch_ids, g.states) for g in groups] == [
        ("a", [4], [1], ["COMPLETED"]),
        ("x", [1, 2], [1, 2], ["STAGED", "FAILED"]),
        (None, [5], [1], ["COMPLETED"]),
    ]


def test_resolve_description_against_the_document_as_seml_does():
    d = {"_id": 1, "config": {"lr": 0.1, "model": {"name": "small"}}, "batch_id": 3}
    assert resolve_description("plain text", d) == "plain text"
    assert resolve_description("${config.model.name} lr=${config.lr} b${batch_id}", d) == (
        "small lr=0.1 b3"
    )
    with pytest.raises(ManageError, match="does not resolve for experiment 1"):
        resolve_description("${config.nope}", d)


def test_resolve_description_runs_no_resolver_and_never_interpolates_document_values(
    monkeypatch,
):
    monkeypatch.setenv("SEML_TEST_SECRET", "mongodb://alice:pw@db/seml")
    forged = {"_id": 1, "config": {"x": "${oc.env:SEML_TEST_SECRET}", "y": "${config.x}"}}
    # a document value holding ${...} is inserted as its literal text, not resolved
    assert resolve_description("x is ${config.x}", forged) == "x is ${oc.env:SEML_TEST_SECRET}"
    assert resolve_description("${config.y}", forged) == "${config.x}"
    # the user's own text: plain lookups only, no resolvers
    for text in ("${oc.env:SEML_TEST_SECRET}", "${oc.decode:'1'}", "${.x}"):
        with pytest.raises(ManageError, match="not a plain key"):
            resolve_description(text, forged)
    # OmegaConf's escapes: \${ is literal, \\${ is a backslash and a lookup
    assert resolve_description("a \\${config.x} \\\\${_}", {"_": 1}) == "a ${config.x} \\1"
    assert (
        resolve_description(
            "${config.lr} ${ok} ${n}", {"config": {"lr": 0.1}, "ok": True, "n": None}
        )
        == "0.1 True None"
    )


def test_experiment_text_is_yaml_or_json_of_plain_values():
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    d = {"_id": 1, "add_time": when, "config": {"lr": 0.1}, "tags": ("a",)}
    expected = {"_id": 1, "add_time": when.isoformat(), "config": {"lr": 0.1}, "tags": ["a"]}
    assert yaml.safe_load(experiment_text(d)) == expected
    assert list(yaml.safe_load(experiment_text(d))) == ["_id", "add_time", "config", "tags"]
    assert json.loads(experiment_text(d, "json")) == expected
    with pytest.raises(ManageError, match="Unknown format 'toml'"):
        experiment_text(d, "toml")
