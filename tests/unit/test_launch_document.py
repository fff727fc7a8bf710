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
from seml_hydra.core.documents import apply_diff, diff_parent, same
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
