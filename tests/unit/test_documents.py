"""Unit tests for seml_hydra.core.documents: hashing, override parsing, diffs, seeds, documents.

Pure functions only: no MongoDB, no Hydra run, no clock.
"""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

import pytest

from seml_hydra.core import documents, states
from seml_hydra.core.documents import (
    apply_diff,
    build_document,
    config_hash,
    dict_diff,
    pick_seed,
    to_bson_safe,
)
from seml_hydra.core.overrides import overrides_to_nested


def seml_make_hash(d: dict) -> str:
    """SEML 0.5's ``make_hash`` (without excluded keys)."""
    return hashlib.md5(json.dumps(d, sort_keys=True).encode()).hexdigest()


# --------------------------------------------------------------------------------------------
# config_hash
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"lr": 0.1},
        {"model": {"name": "small", "layers": [64, 64]}, "seed": 3, "flag": True, "x": None},
        {"unicode": "größe", "nested": {"deep": {"deeper": [1, {"a": 2.5}]}}},
    ],
)
def test_config_hash_equals_seml_make_hash(config):
    assert config_hash(config) == seml_make_hash(config)


def test_config_hash_is_independent_of_key_order():
    a = {"b": 1, "a": {"y": 2, "x": [3, 4]}}
    b = {"a": {"x": [3, 4], "y": 2}, "b": 1}
    assert list(a) != list(b)
    assert config_hash(a) == config_hash(b)


@pytest.mark.parametrize(
    "changed",
    [
        {"lr": 0.2, "model": {"layers": [64, 64]}},  # value
        {"lr": 0.1, "model": {"layers": [64, 32]}},  # nested list element
        {"lr": 0.1, "model": {"layers": [64, 64]}, "extra": 1},  # added key
        {"lr": 0.1, "model": {}},  # removed key
        {"lr": "0.1", "model": {"layers": [64, 64]}},  # type: str vs float
    ],
)
def test_config_hash_differs_on_value_change(changed):
    base = {"lr": 0.1, "model": {"layers": [64, 64]}}
    assert config_hash(changed) != config_hash(base)


@pytest.mark.parametrize("a, b", [(1, 1.0), (1, True), (0, False), (None, "None")])
def test_config_hash_distinguishes_json_types(a, b):
    assert config_hash({"v": a}) != config_hash({"v": b})


def test_config_hash_is_md5_hex():
    h = config_hash({"a": 1})
    assert len(h) == 32 and all(c in "0123456789abcdef" for c in h)


# --------------------------------------------------------------------------------------------
# overrides_to_nested
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ([], {}),
        (["model=small"], {"model": "small"}),
        (
            ["lr=0.1", "epochs=3", "flag=true", "nothing=null"],
            {"lr": 0.1, "epochs": 3, "flag": True, "nothing": None},
        ),
        (["optimizer.lr=0.1"], {"optimizer": {"lr": 0.1}}),
        (["a.b.c=1", "a.b.d=2", "a.e=x"], {"a": {"b": {"c": 1, "d": 2}, "e": "x"}}),
        (["+extra=1"], {"extra": 1}),
        (["++forced.key=2"], {"forced": {"key": 2}}),
        (["~drop"], {"drop": None}),
        (["~drop.nested=3"], {"drop": {"nested": None}}),
        (["+extra=[1,2]"], {"extra": [1, 2]}),
        (["xs=[a,b,[1,2]]"], {"xs": ["a", "b", [1, 2]]}),
        (["d={a:1,b:[2]}"], {"d": {"a": 1, "b": [2]}}),
        (["db@backend=mysql"], {"db": "mysql"}),
        (["+db@pkg.sub=postgres"], {"db": "postgres"}),
        (["name='hello world'"], {"name": "hello world"}),
        (['name="a, b"'], {"name": "a, b"}),
        (["num='1'"], {"num": "1"}),  # quoted: stays a string
        (["empty="], {"empty": ""}),
    ],
)
def test_overrides_to_nested(overrides, expected):
    assert overrides_to_nested(overrides) == expected


def test_overrides_to_nested_keeps_value_types():
    nested = overrides_to_nested(["i=1", "f=1.0", "b=true", "s='1'"])
    assert [type(nested[k]) for k in "ifbs"] == [int, float, bool, str]


def test_overrides_to_nested_stores_sweeps_as_strings():
    nested = overrides_to_nested(["a=1,2"])
    assert isinstance(nested["a"], str) and "1" in nested["a"] and "2" in nested["a"]


def test_overrides_to_nested_scalar_then_child_keeps_first():
    assert overrides_to_nested(["a=1", "a.b=2"]) == {"a": 1}


def test_overrides_to_nested_rejects_malformed_override():
    from hydra.errors import OverrideParseException

    with pytest.raises(OverrideParseException):
        overrides_to_nested(["a=[1,2"])


def test_overrides_to_nested_result_is_json_serialisable():
    nested = overrides_to_nested(["a=1,2", "b=range(3)", "c=[1,{x:2}]", "~d"])
    json.dumps(nested)


# --------------------------------------------------------------------------------------------
# dict_diff / apply_diff
# --------------------------------------------------------------------------------------------

DIFF_CASES = {
    "equal": ({"a": 1, "b": {"c": [1, 2]}}, {"a": 1, "b": {"c": [1, 2]}}),
    "both empty": ({}, {}),
    "changed leaf": ({"a": 1}, {"a": 2}),
    "added key": ({"a": 1}, {"a": 1, "b": 2}),
    "deleted key": ({"a": 1, "b": 2}, {"a": 1}),
    "nested change": ({"a": {"b": {"c": 1, "d": 2}}}, {"a": {"b": {"c": 3, "d": 2}}}),
    "nested delete": ({"a": {"b": 1, "c": 2}}, {"a": {"b": 1}}),
    "nested add": ({"a": {"b": 1}}, {"a": {"b": 1, "new": {"deep": [1]}}}),
    "subtree emptied": ({"a": {"b": 1}}, {"a": {}}),
    "list leaf changed": ({"xs": [1, 2, 3]}, {"xs": [1, 2]}),
    "list of dicts": ({"xs": [{"a": 1}]}, {"xs": [{"a": 2}, {"b": 3}]}),
    "dict becomes scalar": ({"a": {"b": 1}}, {"a": 5}),
    "scalar becomes dict": ({"a": 5}, {"a": {"b": 1}}),
    "int to float": ({"a": 1}, {"a": 1.0}),
    "float to int": ({"a": 1.0}, {"a": 1}),
    "int to bool": ({"a": 1}, {"a": True}),
    "bool to int": ({"a": False}, {"a": 0}),
    "nested int to bool": ({"a": {"b": 1}}, {"a": {"b": True}}),
    "to None": ({"a": 1}, {"a": None}),
    "dotted keys": ({"a.b": 1, "x": {"y.z": 2}}, {"a.b": 3, "x": {"y.z": 2, "w.v": 4}}),
    "dotted key deleted": ({"a.b": 1, "a": {"b": 2}}, {"a": {"b": 2}}),
}


@pytest.mark.parametrize("base, other", DIFF_CASES.values(), ids=DIFF_CASES.keys())
def test_dict_diff_apply_diff_round_trip(base, other):
    base_before, other_before = copy.deepcopy(base), copy.deepcopy(other)
    diff = dict_diff(base, other)
    result = apply_diff(base, diff)
    assert result == other
    # types too, not only ==: 1 == 1.0 == True in Python, but not in BSON/JSON
    assert json.dumps(result, sort_keys=True) == json.dumps(other, sort_keys=True)
    assert base == base_before and other == other_before  # inputs untouched


def test_dict_diff_of_equal_dicts_is_empty():
    assert dict_diff({"a": {"b": [1]}, "c": 1}, {"c": 1, "a": {"b": [1]}}) == []


def test_dict_diff_entries_use_path_lists():
    diff = dict_diff({"a": {"b.c": 1}, "gone": 1}, {"a": {"b.c": 2}})
    assert {"path": ["a", "b.c"], "value": 2} in diff
    assert {"path": ["gone"], "delete": True} in diff
    assert len(diff) == 2


def test_dict_diff_treats_lists_as_leaves():
    diff = dict_diff({"xs": [1, 2, 3]}, {"xs": [1, 9, 3]})
    assert diff == [{"path": ["xs"], "value": [1, 9, 3]}]


def test_dict_diff_is_json_serialisable():
    diff = dict_diff({"a": 1, "b": {"c": 2}}, {"b": {"c": 3, "d": [1]}})
    assert json.loads(json.dumps(diff)) == diff


def test_apply_diff_does_not_share_values_with_diff():
    diff = dict_diff({}, {"xs": [1, 2]})
    result = apply_diff({}, diff)
    result["xs"].append(3)
    assert diff[0]["value"] == [1, 2]


@pytest.mark.parametrize(
    "base, other",
    [({"xs": [1, 0]}, {"xs": [True, False]}), ({"xs": [1]}, {"xs": [1.0]})],
    ids=["int-to-bool", "int-to-float"],
)
def test_dict_diff_type_change_inside_list(base, other):
    result = apply_diff(base, dict_diff(base, other))
    assert json.dumps(result) == json.dumps(other)


# --------------------------------------------------------------------------------------------
# pick_seed
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config, expected",
    [
        ({"seed": 42}, 42),
        ({"seed": 0}, 0),  # falsy but an int: the app's own
        ({"seed": -5}, -5),
        ({}, 777),
        ({"seed": None}, 777),
        ({"seed": True}, 777),  # bool is not a seed
        ({"seed": 1.5}, 777),
        ({"seed": "42"}, 777),
        ({"model": {"seed": 3}}, 777),  # only the top-level key counts
    ],
)
def test_pick_seed(config, expected):
    assert pick_seed(config, 777) == expected


# --------------------------------------------------------------------------------------------
# to_bson_safe
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        (1, 1),
        ("s", "s"),
        (None, None),
        (b"raw", b"raw"),
        (Path("/tmp/x"), "/tmp/x"),
        (PurePosixPath("a/b"), "a/b"),
        ((1, 2), [1, 2]),
        ([Path("p"), (3, (4,))], ["p", [3, [4]]]),
        ({"a": {"b": Path("q")}}, {"a": {"b": "q"}}),
        ({1: "int key"}, {"1": "int key"}),
    ],
)
def test_to_bson_safe(value, expected):
    assert to_bson_safe(value) == expected


def test_to_bson_safe_returns_unknown_objects_unchanged():
    obj = object()
    assert to_bson_safe({"o": obj})["o"] is obj


def test_to_bson_safe_does_not_mutate_input():
    value = {"a": [Path("x")], "t": (1,)}
    to_bson_safe(value)
    assert value == {"a": [Path("x")], "t": (1,)}


# --------------------------------------------------------------------------------------------
# build_document
# --------------------------------------------------------------------------------------------

ADD_TIME = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)


def make_doc(**changes):
    kwargs = dict(
        exp_id=7,
        batch_id=3,
        config={"lr": 0.1, "model": {"name": "small"}, "out": Path("/tmp/out")},
        overrides=["optimizer.lr=0.1", "model=small"],
        hydra={"overrides": ["optimizer.lr=0.1", "model=small"], "job_num": 2, "sweep_dir": "s"},
        seed=1234,
        seml={"executable": "app.py", "name": "exp", "working_dir": "/w"},
        sbatch_options={"nodes": 1, "time": 60, "mem": "16G"},
        experiments_per_job=2,
        git={"path": "https://example.org/repo.git", "commit": "abc", "dirty": False},
        add_time=ADD_TIME,
    )
    kwargs.update(changes)
    return build_document(**kwargs)


def test_build_document_has_all_seml_fields():
    doc = make_doc()
    for key in (
        "_id",
        "batch_id",
        "status",
        "config",
        "config_unresolved",
        "config_hash",
        "add_time",
        "seml",
        "slurm",
        "git",
        "seed",
        "hydra",
    ):
        assert key in doc, key
    assert doc["_id"] == 7
    assert doc["batch_id"] == 3
    assert doc["status"] == states.STAGED == "STAGED"
    assert doc["add_time"] == ADD_TIME
    assert doc["seed"] == 1234


def test_build_document_config_and_hash():
    doc = make_doc()
    app_config = {"lr": 0.1, "model": {"name": "small"}, "out": "/tmp/out"}
    # the seed where Sacred keeps it; the hash is the app config's (a drawn seed is no identity)
    assert doc["config"] == {**app_config, "seed": 1234}
    assert doc["config_hash"] == seml_make_hash(app_config)
    assert doc["config_unresolved"] == {"optimizer": {"lr": 0.1}, "model": "small"}


def test_build_document_seml_block():
    doc = make_doc()
    assert doc["seml"]["version"] == list(documents.VERSION)
    assert doc["seml"]["executable"] == "app.py"
    assert doc["seml"]["name"] == "exp"
    assert doc["seml"]["working_dir"] == "/w"


def test_build_document_slurm_block():
    doc = make_doc(sbatch_options={"nodes": 2, "time": 30, "dir": Path("/d")})
    assert isinstance(doc["slurm"], list) and len(doc["slurm"]) == 1
    assert doc["slurm"][0]["experiments_per_job"] == 2
    assert doc["slurm"][0]["sbatch_options"] == {"nodes": 2, "time": 30, "dir": "/d"}


def test_build_document_git_block():
    assert make_doc()["git"] == {
        "path": "https://example.org/repo.git",
        "commit": "abc",
        "dirty": False,
    }


def test_build_document_omits_git_when_none():
    assert "git" not in make_doc(git=None)


def test_build_document_hydra_block():
    doc = make_doc(hydra={"overrides": ["a=1"], "job_num": 0, "output_dir": Path("/o")})
    assert doc["hydra"] == {
        "overrides": ["a=1"],
        "job_num": 0,
        "output_dir": "/o",
        "added_seed": True,
    }


def test_the_task_config_leaves_out_the_seed_staging_added():
    added = make_doc(config={"lr": 0.1})
    assert added["config"] == {"lr": 0.1, "seed": 1234}
    assert documents.task_config(added) == {"lr": 0.1}
    own = make_doc(config={"lr": 0.1, "seed": 7}, seed=7)
    assert own["config"] == {"lr": 0.1, "seed": 7} and "added_seed" not in own["hydra"]
    assert documents.task_config(own) == {"lr": 0.1, "seed": 7}
    # documents staged before config.seed: as they are
    assert documents.task_config({"config": {"lr": 0.1}, "hydra": {}}) == {"lr": 0.1}


def test_build_document_is_json_like_and_does_not_share_inputs():
    config = {"lr": 0.1, "xs": (1, 2)}
    doc = make_doc(config=config)
    doc["config"]["lr"] = 9
    assert config == {"lr": 0.1, "xs": (1, 2)}
    json.dumps({k: v for k, v in doc.items() if k != "add_time"})


def test_build_document_same_config_same_hash_regardless_of_order():
    a = make_doc(config={"a": 1, "b": {"c": 2, "d": 3}})
    b = make_doc(config={"b": {"d": 3, "c": 2}, "a": 1})
    assert a["config_hash"] == b["config_hash"]


def test_experiment_hash_is_seml_hash_for_single_task_points_and_includes_other_shapes():
    from seml_hydra.core.documents import config_hash, experiment_hash

    config = {"lr": 0.1}
    single = {"nodes": 1, "tasks_per_node": 1, "gpus_per_node": None, "timeout_min": 5}
    assert experiment_hash(config, single) == config_hash(config)
    assert experiment_hash(config, {**single, "timeout_min": 60}) == config_hash(config)
    two_nodes = {**single, "nodes": 2}
    assert experiment_hash(config, two_nodes) != config_hash(config)
    assert experiment_hash(config, two_nodes) != experiment_hash(
        config, {**single, "tasks_per_node": 2}
    )


# ------------------------------------------------------------------ storable / plain results


def _exact_types(value) -> set[str]:
    """Every type name in ``value`` (recursively through dicts and lists)."""
    if isinstance(value, dict):
        return {"dict"} | {t for v in value.values() for t in _exact_types(v)}
    if isinstance(value, list):
        return {"list"} | {t for v in value for t in _exact_types(v)}
    return {type(value).__name__}


def test_storable_result_turns_every_numpy_value_at_any_depth_into_plain_numbers_and_lists():
    np = pytest.importorskip("numpy")
    value, problems = documents.storable_result(
        {
            "acc": np.float64(0.93),  # a subclass of float
            "n": np.int64(3),
            "flag": np.bool_(True),
            "arr": np.arange(3),
            "deep": [{"x": (np.float32(0.5), np.array([[1, 2]]))}],
            "s": np.str_("a"),
        }
    )
    assert problems == []
    assert value == {
        "acc": 0.93,
        "n": 3,
        "flag": True,
        "arr": [0, 1, 2],
        "deep": [{"x": [0.5, [[1, 2]]]}],
        "s": "a",
    }
    assert _exact_types(value) <= {"dict", "list", "float", "int", "bool", "str"}
    assert type(value["acc"]) is float and type(value["flag"]) is bool


def test_storable_result_stores_datetime_path_tuple_enum_in_their_natural_form():
    import enum
    from datetime import date

    class Color(enum.Enum):
        RED = "red"

    class Level(enum.IntEnum):
        HIGH = 2

    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    value, problems = documents.storable_result(
        {
            "when": when,
            "day": date(2026, 1, 2),
            "path": Path("/a/b"),
            "pure": PurePosixPath("x/y"),
            "pair": (1, (2, "z")),
            "color": Color.RED,
            "level": Level.HIGH,
            "tags": frozenset({"t"}),
            "bytes": b"\x00\x01",
        }
    )
    assert problems == []
    assert value == {
        "when": when,  # a BSON date
        "day": "2026-01-02",
        "path": "/a/b",
        "pure": "x/y",
        "pair": [1, [2, "z"]],
        "color": "red",
        "level": 2,
        "tags": ["t"],
        "bytes": b"\x00\x01",
    }
    assert type(value["level"]) is int


def test_plain_result_decodes_only_data_tags_and_names_every_object_to_rebuild():
    stored = {
        "t": {"py/tuple": [1, {"py/set": [2]}]},
        "b": {"py/b64": "YWI="},
        "np": {"py/object": "numpy.float64", "dtype": "float64", "value": 0.9},
        "arr": {"py/object": "numpy.ndarray", "dtype": "int64", "values": [0, 1]},
        "json://1": "int key",
        "reduce": {"py/reduce": [{"py/function": "os.system"}, {"py/tuple": ["id"]}]},
        "obj": {"py/object": "numpy.ndarray", "py/state": {"x": 1}, "values": [1]},
        "fn": [{"py/function": "os.system"}],
        "ref": {"py/id": 1},
    }
    value, problems = documents.plain_result(stored)
    assert value["t"] == (1, {2}) and value["b"] == b"ab"
    assert value["np"] == 0.9 and value["arr"] == [0, 1] and value[1] == "int key"
    for key in ("reduce", "obj", "ref"):
        assert value[key] == stored[key]  # as stored, not rebuilt
    assert value["fn"] == stored["fn"]
    assert problems == [
        "result.reduce: py/reduce",
        "result.obj: py/object, py/state",
        "result.fn[0]: py/function",
        "result.ref: py/id",
    ]
    assert documents.plain_result({"a": [1.5, "x", None]}) == ({"a": [1.5, "x", None]}, [])


def test_stored_object_warning_names_every_key_under_a_tagged_result():
    """A result that is itself a tagged dict (``py/repr``) with plain keys holding more stored
    objects: the warning names each of them, not only the top one (the value stays as stored)."""
    import warnings

    from seml_hydra.store.results import StoredObjectWarning, restore_results

    forged = {
        "acc": {"py/reduce": [{"py/function": "os.system"}, {"py/tuple": ["id"]}]},
        "deep": [{"py/object": "subprocess.Popen", "py/state": {}}, {"py/type": "os.system"}],
        "py/repr": "os/os.system('id')",
    }
    docs = [{"_id": 1, "result": forged}]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        restore_results(docs, "victim")
    assert docs[0]["result"] == forged
    (warning,) = [w for w in caught if issubclass(w.category, StoredObjectWarning)]
    text = str(warning.message)
    for named in (
        "experiment 1: result: py/repr",
        "experiment 1: result.acc: py/reduce",
        "experiment 1: result.deep[0]: py/object, py/state",
        "experiment 1: result.deep[1]: py/type",
    ):
        assert named in text, text


def test_masked_hydra_node_masks_the_db_url_and_hydra_overrides_and_copies_only_them():
    from seml_hydra.launch.pipeline import masked_hydra_node

    shared = {"name": "app"}
    hydra = {
        "job": shared,
        "launcher": {"partition": "debug", "db": {"url": "mongodb://a:pw@h/db"}},
        "overrides": {"hydra": ["hydra.launcher.db.url=mongodb://a:pw@h/db"], "task": ["x=1"]},
    }
    masked = masked_hydra_node(hydra)
    assert masked["launcher"] == {"partition": "debug", "db": {"url": "mongodb://a:***@h/db"}}
    assert masked["overrides"]["hydra"] == ["hydra.launcher.db.url=mongodb://a:***@h/db"]
    assert masked["job"] is shared and "pw" in hydra["launcher"]["db"]["url"]  # a copy
    plain = {"launcher": {"db": {"url": "mongodb://h/db"}}, "overrides": {"hydra": []}}
    assert masked_hydra_node(plain) is plain


# -- dict_diff along known patches (diff_along / patch_tree) -------------------------------------
def _copied_along(base, patches):
    """``base`` copied along ``patches``' paths only, with their values set (compose's fast
    path makes its points so)."""
    out = dict(base)
    for path, value in patches.items():
        node = out
        for key in path[:-1]:
            node[key] = dict(node[key]) if isinstance(node[key], dict) else list(node[key])
            node = node[key]
        node[path[-1]] = value
    return out


DIFF_BASE = {
    "a": 1,
    "job": {"num": 0, "name": "app", "dirname": ""},
    "runtime": {"output_dir": "/o/0", "choices": {"g": "x"}},
    "xs": [1, 2],
    "nested": {"deep": {"v": 1, "w": 2}},
}


@pytest.mark.parametrize(
    ("mine", "theirs"),
    [
        ({("job", "num"): 1, ("runtime", "output_dir"): "/o/1"}, {("job", "num"): 2}),
        ({("xs",): [1, 3]}, {}),  # a list is a leaf
        ({("xs", 1): 9}, {("a",): 1}),  # a path into a list: the whole list differs
        ({("nested",): {"deep": {"v": 2, "w": 2}}}, {}),  # a dict value: walked below
        ({("job", "num"): 0, ("a",): 1.0}, {("a",): True}),  # equal / type changes
        ({("nested", "deep", "w"): 3, ("job", "dirname"): "x=1"}, {("job", "name"): "b"}),
    ],
)
def test_diff_along_the_patched_paths_equals_dict_diff(mine, theirs):
    point, base_point = _copied_along(DIFF_BASE, mine), _copied_along(DIFF_BASE, theirs)
    tree = documents.patch_tree(DIFF_BASE, [*mine, *theirs])
    assert documents.diff_along(base_point, point, tree) == dict_diff(base_point, point)


def test_patch_tree_follows_the_base_key_order_and_stops_at_lists():
    tree = documents.patch_tree(DIFF_BASE, [("xs", 0), ("runtime", "output_dir"), ("a",)])
    assert tree == (("a",), ("runtime", "output_dir"), ("xs",))
    assert documents.patch_tree(DIFF_BASE, [("job", "nope")]) is None


def test_dict_diff_leaves_no_garbage_cycle():
    # in a fresh interpreter: in this one, threads other tests left (pymongo's monitors, ...)
    # may leave cycles of their own while the collector is off
    import subprocess
    import sys

    check = (
        "import gc\n"
        "from seml_hydra.core.documents import dict_diff\n"
        "gc.collect()\n"
        "gc.disable()\n"
        "for _ in range(10):\n"
        "    dict_diff({'a': {'b': 1}}, {'a': {'b': 2}})\n"
        "assert gc.collect() == 0\n"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "config, path",
    [
        ({"a": 1, "b": {"c": [1, {"d": 2}]}}, None),
        ({"tags": {"v1.0": 1}}, ["tags", "v1.0"]),
        ({"a": [{"ok": 1}, {"$ref": 1}]}, ["a", "1", "$ref"]),
        ({"x": {"py/object": "os.system"}}, ["x", "py/object"]),
        ({"x": {1.5: "a"}}, ["x", "1.5"]),
        ({"x": {"json://1": 0}}, ["x", "json://1"]),
        ({"a$b": 1, "seed": 3}, None),
    ],
)
def test_sacred_key_problem_finds_the_first_key_sacred_refuses(config, path):
    assert documents.sacred_key_problem(config) == path


def test_sacred_key_problem_walks_a_shared_clean_subtree_once():
    shared = {"k": 1}
    first, second = {"a": shared}, {"b": shared, "c": {"x.y": 1}}  # alive: ids stay theirs
    clean: set[int] = set()
    assert documents.sacred_key_problem(first, clean) is None
    assert id(shared) in clean
    assert documents.sacred_key_problem(second, clean) == ["c", "x.y"]
