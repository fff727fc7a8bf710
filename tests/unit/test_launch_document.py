"""Unit tests for seml_hydra.launch.document (a composed point -> its STAGED document, the
blocks a launch shares) and for the diff helpers it and the node rebuild share
(``core.documents.same`` / ``diff_parent``). Pure: no MongoDB, no Hydra run, no clock."""

from __future__ import annotations

import copy
import dataclasses
import random
from datetime import datetime, timezone

from omegaconf import OmegaConf

from seml_hydra.config import SemlLauncherConf
from seml_hydra.core import states
from seml_hydra.core.documents import (
    NODE_FIELDS,
    apply_diff,
    dict_diff,
    diff_parent,
    point_hydra_node,
    same,
)
from seml_hydra.core.hydra_node import JOB_ID_TOKEN
from seml_hydra.launch.compose import SweepPoint
from seml_hydra.launch.document import (
    LaunchDocs,
    draw_seed,
    draw_seeds,
    hydra_doc,
    make_document,
    refreshed_fields,
    seml_doc,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def hydra_node(num: int, **launcher) -> dict:
    """A resolved ``hydra`` node as ``compose`` gives it (the parts documents read)."""
    return {
        "job": {"name": "train", "num": num},
        "sweep": {"dir": "multirun/x"},
        "runtime": {"output_dir": f"/abs/multirun/x/{num}", "cwd": "/home/me/app", "choices": {}},
        "launcher": {**dataclasses.asdict(SemlLauncherConf()), **launcher},
    }


def point(num: int, config: dict, overrides: list[str], **launcher) -> SweepPoint:
    return SweepPoint(num, num, overrides, config, hydra_node(num, **launcher))


POINTS = [
    point(0, {"lr": 0.1}, ["lr=0.1"]),
    point(1, {"lr": 0.01, "seed": 7}, ["lr=0.01"], partition="gpu"),
]


def docs_of(points: list[SweepPoint]) -> LaunchDocs:
    seml = seml_doc(points[0], payload_id="p1", executor="slurm", argv=["app.py", "-m"])
    return LaunchDocs("coll", points[0].hydra, seml, None, NOW)


def test_hydra_doc_stores_the_node_as_a_diff_against_the_launchs_base():
    base, other = POINTS[0].hydra, POINTS[1].hydra
    block = hydra_doc(POINTS[1], base)
    assert block["overrides"] == ["lr=0.01"] and block["job_num"] == 1
    assert block["job_name"] == "train" and block["output_dir"] == "/abs/multirun/x/1"
    assert apply_diff(base, block["node_diff"]) == other
    assert hydra_doc(POINTS[0], base)["node_diff"] == []


def full_point(
    num: int, overrides: list[str], subdir: str | None = None, exclude: list[str] | None = None
) -> SweepPoint:
    """A point whose node has what Hydra's has of the document's fields (``overrides.task``,
    ``job.num``, ``runtime.output_dir``) and what is resolved from them."""
    subdir = str(num) if subdir is None else subdir
    node = hydra_node(num)
    node["sweep"]["subdir"] = subdir
    node["runtime"]["output_dir"] = f"/abs/multirun/x/{subdir}"
    node["overrides"] = {"hydra": ["hydra/launcher=seml"], "task": list(overrides)}
    dirname_conf = {"kv_sep": "=", "item_sep": ",", "exclude_keys": list(exclude or [])}
    node["job"]["config"] = {"override_dirname": dirname_conf}
    kept = [o for o in overrides if o.split("=")[0] not in (exclude or [])]
    node["job"]["override_dirname"] = ",".join(sorted(kept))
    node["job_logging"] = {"handlers": {"file": {"filename": f"/abs/multirun/x/{subdir}/t.log"}}}
    return SweepPoint(num, num, list(overrides), {"lr": num}, node)


FULL = [
    full_point(0, ["lr=0.1", "b=1"]),
    full_point(1, ["lr=0.01", "b=1"]),
    full_point(2, ["lr=0.001", "b=2"]),
]
FIELD_PATHS = [list(path) for path, _ in NODE_FIELDS] + [["job", "override_dirname"]]


def test_hydra_doc_leaves_the_nodes_values_it_holds_as_fields_out_of_the_diff():
    base = FULL[0].hydra
    for point in FULL:
        block = hydra_doc(point, base)
        assert block["node_from_doc"] is True
        paths = [entry["path"] for entry in block["node_diff"]]
        assert not [path for path in FIELD_PATHS if path in paths]
        # what is only resolved from them stays in the diff
        if point is not FULL[0]:
            assert ["sweep", "subdir"] in paths
            assert ["job_logging", "handlers", "file", "filename"] in paths
        # the job rebuilds the node Hydra composed, through the one reader
        assert point_hydra_node(base, block) == point.hydra
        assert point_hydra_node(base, block) is not base


def test_a_document_staged_with_the_fields_in_its_diff_rebuilds_the_same_node():
    base = FULL[0].hydra
    for point in FULL[1:]:
        old = {**hydra_doc(point, base), "node_diff": dict_diff(base, point.hydra)}
        old.pop("node_from_doc", None)
        assert [path for path in FIELD_PATHS if path in [e["path"] for e in old["node_diff"]]]
        assert point_hydra_node(base, old) == point.hydra
        # an explicit entry wins over the field, even where the block says node_from_doc
        mixed = {**old, "node_from_doc": True, "output_dir": "/elsewhere", "job_num": 99}
        assert point_hydra_node(base, mixed) == point.hydra
    # a block without any of it (an old test document): the base as it is
    assert point_hydra_node(base, {"node_diff": []}) == base
    assert point_hydra_node(base, None) == base


def test_hydra_doc_keeps_in_the_diff_what_its_fields_do_not_hold():
    base = FULL[0].hydra
    # overrides.task with an interpolation resolved: not the document's overrides
    odd = full_point(1, ["lr=${x}"])
    odd.hydra["overrides"]["task"] = ["lr=5"]
    block = hydra_doc(odd, base)
    assert "node_from_doc" not in block
    assert ["overrides", "task"] in [entry["path"] for entry in block["node_diff"]]
    assert point_hydra_node(base, block) == odd.hydra
    # the first point of such a sweep: equal to the base, nothing in the diff, and no field used
    first = full_point(0, ["lr=${x}"])
    first.hydra["overrides"]["task"] = ["lr=5"]
    block = hydra_doc(first, first.hydra)
    assert block["node_diff"] == [] and "node_from_doc" not in block
    assert point_hydra_node(first.hydra, block) == first.hydra


def test_hydra_doc_keeps_an_override_dirname_it_cannot_derive_as_an_explicit_entry():
    # exclude_keys: deriving it would need Hydra's override parser
    points = [full_point(n, [f"lr={n}", "seed=1"], exclude=["seed"]) for n in range(2)]
    for point in points:
        block = hydra_doc(point, points[0].hydra)
        assert block["node_from_doc"] is True
        entries = [e for e in block["node_diff"] if e["path"] == ["job", "override_dirname"]]
        # the first point's too, though its node is the base
        assert entries == [{"path": ["job", "override_dirname"], "value": f"lr={point.job_num}"}]
        assert point_hydra_node(points[0].hydra, block) == point.hydra
    # a value Hydra's rule does not give (here: set by hand): kept
    odd = full_point(1, ["lr=1"])
    odd.hydra["job"]["override_dirname"] = "mine"
    block = hydra_doc(odd, FULL[0].hydra)
    assert {"path": ["job", "override_dirname"], "value": "mine"} in block["node_diff"]
    assert point_hydra_node(FULL[0].hydra, block) == odd.hydra


def test_hydra_doc_keeps_an_output_dir_with_the_job_id_token_in_the_diff():
    token = [full_point(n, [f"lr={n}"], subdir=f"{n}_{JOB_ID_TOKEN}") for n in range(2)]
    block = hydra_doc(token[1], token[0].hydra)
    assert "node_from_doc" not in block
    assert ["runtime", "output_dir"] in [entry["path"] for entry in block["node_diff"]]
    # the job records its output dir in the document: the node still has the token
    ran = {**block, "output_dir": "/abs/multirun/x/1_77_1"}
    assert point_hydra_node(token[0].hydra, ran) == token[1].hydra
    first = {**hydra_doc(token[0], token[0].hydra), "output_dir": "/abs/multirun/x/0_77_0"}
    assert point_hydra_node(token[0].hydra, first) == token[0].hydra


def test_seml_doc_masks_the_password_of_a_url_on_the_command_line():
    block = seml_doc(
        POINTS[0],
        payload_id="p1",
        executor="local",
        argv=["app.py", "hydra.launcher.db.url=mongodb://u:secret@h/db"],
    )
    assert "secret" not in block["command"]
    assert block["launcher"] == "seml_hydra.local" and block["payload_file"] == "p1"
    assert block["executable"].endswith("/app.py") and block["working_dir"] == "/home/me/app"


def test_make_document_builds_the_staged_document_with_the_points_own_sbatch_options():
    docs = docs_of(POINTS)
    doc = make_document(docs, POINTS[1], exp_id=5, batch_id=3, seed=7)
    assert doc["_id"] == 5 and doc["batch_id"] == 3 and doc["status"] == states.STAGED
    assert doc["seed"] == 7 and doc["add_time"] == NOW
    assert doc["config"] == {"lr": 0.01, "seed": 7}
    assert doc["config_unresolved"] == {"lr": 0.01}
    options = doc["slurm"][0]["sbatch_options"]
    assert options["partition"] == "gpu" and options["job-name"] == "coll_3"
    assert options["comment"] == "coll"
    assert doc["seml"]["payload_file"] == "p1" and "git" not in doc
    assert apply_diff(POINTS[0].hydra, doc["hydra"]["node_diff"]) == POINTS[1].hydra


def test_refreshed_fields_join_this_batch_with_this_launchs_blocks():
    docs = docs_of(POINTS)
    fields = refreshed_fields(docs, POINTS[1], 9)
    assert fields["batch_id"] == 9 and fields["seml"] == docs.seml
    assert fields["seml"] is not docs.seml
    assert fields["hydra"] == hydra_doc(POINTS[1], docs.base_hydra)


def test_draw_seed_keeps_the_apps_seed_else_draws_one():
    assert draw_seed({"seed": 42}, random.Random(0)) == 42
    drawn = draw_seed({}, random.Random(0))
    assert drawn == random.Random(0).randrange(2**31)


def test_same_tells_types_apart_all_the_way_down():
    assert same({"a": [1, {"b": 2.0}]}, {"a": [1, {"b": 2.0}]})
    assert not same({"a": [1]}, {"a": [1.0]})
    assert not same({"a": True}, {"a": 1})
    assert not same([1, 2], (1, 2))


def test_diff_parent_walks_and_creates_levels_in_dicts_and_dictconfigs():
    plain: dict = {"a": {"b": 1}}
    node, leaf = diff_parent(plain, ["a", "x", "y"])
    node[leaf] = 2
    assert plain == {"a": {"b": 1, "x": {"y": 2}}}
    cfg = OmegaConf.create({"a": {"b": 1}})
    node, leaf = diff_parent(cfg, ["a", "x", "y"])
    node[leaf] = 2  # the created level is the DictConfig's own node, not a detached dict
    assert OmegaConf.to_container(cfg) == {"a": {"b": 1, "x": {"y": 2}}}
    untouched = copy.deepcopy(plain)
    assert diff_parent(untouched, ["only"]) == (untouched, "only")


def test_the_points_description_is_stored_as_seml_description_and_the_config_hash_ignores_it():
    points = [
        point(0, {"lr": 0.1}, ["lr=0.1"], description="lr 0.1"),
        point(1, {"lr": 0.1}, ["lr=0.1"]),
        point(2, {"lr": 0.1}, ["lr=0.1"], description=" "),
    ]
    launch = docs_of(points)
    made = [make_document(launch, p, exp_id=i, batch_id=1, seed=0) for i, p in enumerate(points)]
    assert made[0]["seml"]["description"] == "lr 0.1"
    assert "description" not in made[1]["seml"] and "description" not in made[2]["seml"]
    assert len({d["config_hash"] for d in made}) == 1  # the same experiment, described or not
    assert refreshed_fields(launch, points[0], 2)["seml"]["description"] == "lr 0.1"
    assert "description" not in launch.seml  # the launch's shared block is not changed


def test_draw_seeds_reads_4_bytes_a_point_in_one_call_and_keeps_the_apps_seed():
    calls = []

    def random_bytes(n):
        calls.append(n)
        return bytes([0xFF] * 4 + [0x00] * 4 + [0x02, 0, 0, 0])

    seeds = draw_seeds([{}, {}, {"seed": 7}], random_bytes)
    assert calls == [12]
    assert seeds == [2**31 - 1, 0, 7]  # 31 bits of each 4 bytes; the app's own seed stays


def test_draw_seeds_are_uniform_31_bit_numbers():
    seeds = draw_seeds([{}] * 20_000)
    assert all(0 <= s < 2**31 for s in seeds)
    assert len(set(seeds)) > 19_900
    assert abs(sum(seeds) / len(seeds) / 2**30 - 1) < 0.02
