"""``launch.compose``'s entry, ``iter_point_chunks``: the fast path gives exactly what Hydra's full
composition gives (``compose.full.compose_full``: ``load_sweep_config`` per point), on the
example app and on tricky configs (``tests/apps/conf_fast``): interpolations of every kind fed by
swept values, typed structured-config fields, enums, missing values, groups,
``+``/``++``/``~``/``@pkg`` overrides, and the same error as Hydra for a bad value; the points
stream chunk by chunk; ``omegaconf``'s parser is patched only while a chunk is composed. No
MongoDB, no Slurm."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import omegaconf.base
import pytest
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.hydra import Hydra
from hydra._internal.utils import create_config_search_path
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException
from hydra.types import RunMode
from omegaconf import OmegaConf
from support.paths import ROOT

from seml_hydra.core.documents import NODE_FIELDS, dict_diff, point_hydra_node, same, to_bson_safe
from seml_hydra.launch import compose
from seml_hydra.launch.compose.full import compose_full
from seml_hydra.launch.document import hydra_doc, node_diff

APPS = ROOT / "tests" / "apps"


def _load_fast_app() -> None:
    """Import ``tests/apps/fast_app.py`` (registers its structured-config schema)."""
    spec = importlib.util.spec_from_file_location("fast_app", APPS / "fast_app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    yield
    GlobalHydra.instance().clear()


def sweep(config_dir: Path, args: list[str], task_name: str = "app"):
    """``(config_loader, master config, job overrides)`` as Hydra's multirun and the basic
    sweeper produce them for ``app.py -m <args>``."""
    GlobalHydra.instance().clear()
    hydra = Hydra.create_main_hydra2(
        task_name=task_name, config_search_path=create_config_search_path(str(config_dir))
    )
    master = hydra.compose_config(
        "config", args, run_mode=RunMode.MULTIRUN, with_log_configuration=False
    )
    HydraConfig.instance().set_config(master)
    task = [a for a in args if not a.startswith("hydra")]
    overrides = OverridesParser.create().parse_overrides(task)
    points = BasicSweeper.split_arguments(overrides, None)[0]
    return hydra.config_loader, master, points


def compose_points(loader, master, job_overrides, initial: int) -> list:
    """Every point of the entry, composed as one chunk."""
    chunks = compose.iter_point_chunks(loader, master, job_overrides, initial, len(job_overrides))
    return [point for chunk in chunks for point in chunk]


def assert_same_as_full(config_dir: Path, args: list[str], fast: str = "all") -> list:
    loader, master, job_overrides = sweep(config_dir, args)
    points = compose_points(loader, master, job_overrides, 3)
    assert [p.overrides for p in points] == [list(o) for o in job_overrides]
    for point, overrides in zip(points, job_overrides):
        config, hydra_node = compose_full(loader, master, overrides, point.job_num)
        assert same(point.config, config), (overrides, point.config, config)
        diff = {
            k: (point.hydra.get(k), hydra_node.get(k))
            for k in {*hydra_node, *point.hydra}
            if not same(point.hydra.get(k), hydra_node.get(k))
        }
        assert not diff, (overrides, diff)
        assert point.job_num == 3 + point.index
        # the node diff read along the fast path's patches is dict_diff's, entry for entry
        base = points[0]
        entries = node_diff(point, base.hydra, base.origin, {})
        assert entries == dict_diff(base.hydra, point.hydra), overrides
        # the document's hydra block rebuilds the node Hydra composed (what a job runs), with
        # the node's leaves the block holds as fields of its own left out of its diff
        block = hydra_doc(point, base.hydra, base.origin, {})
        assert same(point_hydra_node(base.hydra, block), to_bson_safe(hydra_node)), overrides
        if block.get("node_from_doc"):
            paths = [entry["path"] for entry in block["node_diff"]]
            assert not [path for path, _ in NODE_FIELDS if list(path) in paths], overrides
            # job.override_dirname too, where Hydra's rule needs no parser
            derived = not point.hydra["job"]["config"]["override_dirname"]["exclude_keys"]
            assert (["job", "override_dirname"] not in paths) == derived, overrides
    stats = compose.last_stats
    assert stats["points"] == len(points)
    if fast == "all":
        assert stats["fast"] == len(points), stats
        assert all(p.origin is not None for p in points)
    elif fast == "none":
        assert stats["fast"] == 0, stats
    return points


EXAMPLE = ROOT / "examples" / "conf"
FAST = APPS / "conf_fast"


@pytest.mark.parametrize(
    "args",
    [
        ["optimizer.lr=0.1,0.01,0.001", "model=small,large", "seed=1,2"],
        ["hydra/launcher=seml", "optimizer.lr=0.1,0.01", "epochs=1,2", "data.noise=0.0,0.5"],
        ["hydra/launcher=seml", "+slurm=cpu,multinode", "optimizer.lr=0.1,0.01"],
        ["optimizer=sgd,adam", "optimizer.lr=0.5,0.25"],
    ],
)
def test_example_app_fast_equals_full(args):
    points = assert_same_as_full(EXAMPLE, args)
    # a plain sweep's documents take the output dir, overrides and job number from their fields
    assert all(hydra_doc(p, points[0].hydra)["node_from_doc"] for p in points)
    # every point has its own output dir, job number and override dirname
    assert len({p.hydra["runtime"]["output_dir"] for p in points}) == len(points)
    assert len({p.hydra["job"]["override_dirname"] for p in points}) == len(points)


@pytest.mark.parametrize(
    "args",
    [
        # interpolations fed by swept values: single, concatenated, relative, container alias,
        # ${hydra:...} of the output dir / job num / task overrides / override_dirname
        ["lr=0.1,0.2,0.3", "name=a,b"],
        ["lr=0.1,0.2", "model=small,large", "model.hidden=3,4"],
        ["nested.a=5,6", "lr=1,2"],
        # typed structured-config fields: conversion (int -> float), enum, optional
        ["typed.lr=1,2", "typed.steps=3,4"],
        ["typed.mode=FAST,SLOW", "typed.ratio=null,0.5"],
        ["typed.label=1,true"],
        # a missing value filled; scalars of every kind
        ["missing=1,x", "flag=true,false", "maybe=1.5,null"],
        # config groups in the sweep: one composition per combination
        ["db=sqlite,mysql", "lr=1,2", "db.port=1,2"],
        # group overrides with a package or an append are part of the combination
        ["+db@other=mysql", "lr=0.1,0.2", "other.port=5,6"],
        ["~db", "lr=0.1,0.2"],
        # the Hydra node depends on the override dirname; chdir
        ["hydra.sweep.subdir=${hydra.job.override_dirname}", "lr=1,2", "seed=3,4"],
        ["hydra.job.chdir=true", "lr=1,2"],
    ],
)
def test_tricky_configs_fast_equals_full(args):
    _load_fast_app()
    assert_same_as_full(FAST, args)


@pytest.mark.parametrize(
    "args",
    [
        ["+extra=1,2", "lr=0.1,0.2"],
        ["++lr=0.5,0.6"],
        ["~flag", "lr=0.1,0.2"],
        ["items=[1],[2,3]"],
        ["nested={a:7},{a:8}"],
    ],
)
def test_overrides_the_fast_path_does_not_take_are_composed_in_full(args):
    _load_fast_app()
    assert_same_as_full(FAST, args, fast="none")


def test_mixed_sweep_takes_the_fast_path_where_it_can():
    _load_fast_app()
    assert_same_as_full(FAST, ["lr=0.1,0.2,0.3", "db=sqlite,mysql", "+extra=1,2"], fast="none")
    assert_same_as_full(
        FAST, ["lr=0.1,0.2,0.3", "db=sqlite,mysql", "model=small,large"], fast="all"
    )
    assert compose.last_stats["combinations"] == 4
    # an interpolation in an override string is resolved in hydra.overrides.task too: full path
    assert_same_as_full(FAST, ["name='${seed}',b", "seed=5,6"], fast="some")
    assert compose.last_stats["fast"] == 2


def test_per_point_launcher_value_through_an_app_key():
    """``tasks_per_node: ${ntasks}``: the launcher node follows the swept app value."""
    points = assert_same_as_full(
        APPS / "conf_tasks", ["hydra/launcher=seml", "ntasks=1,2,3", "+x=1"], fast="none"
    )
    points = assert_same_as_full(APPS / "conf_tasks", ["hydra/launcher=seml", "ntasks=1,2,3"])
    assert [p.launcher["tasks_per_node"] for p in points] == [1, 2, 3]


def test_points_share_unchanged_subtrees():
    points = assert_same_as_full(EXAMPLE, ["optimizer.lr=0.1,0.01", "seed=1,2"])
    assert points[0].config["data"] is points[1].config["data"]
    assert points[0].hydra["launcher"] is points[1].hydra["launcher"]
    assert points[0].hydra["job"] is not points[1].hydra["job"]


@pytest.mark.parametrize(
    "args",
    [
        ["typed.steps=3,abc"],
        ["lr=1,2", "nothere=3,4"],
        ["typed.mode=FAST,MEDIUM"],
        ["alias.a=3,4"],
        ["missing=1,2", "lr='${nothere}'"],
    ],
)
def test_a_bad_point_raises_hydras_own_error(args):
    _load_fast_app()
    loader, master, job_overrides = sweep(FAST, args)
    with pytest.raises(Exception) as fast_error:
        compose_points(loader, master, job_overrides, 0)
    expected = None
    for overrides in job_overrides:
        try:
            compose_full(loader, master, overrides, 0)
        except Exception as error:
            expected = error
            break
    assert expected is not None
    assert type(fast_error.value) is type(expected)
    assert str(fast_error.value) == str(expected)


def test_hydra_config_is_restored():
    loader, master, job_overrides = sweep(EXAMPLE, ["seed=1,2,3"])
    before = HydraConfig.instance().cfg
    compose_points(loader, master, job_overrides, 0)
    assert HydraConfig.instance().cfg is before


def test_large_grid_is_fast_and_equal_on_samples():
    """A 400-point grid: every point by the fast path, samples equal to the full composition."""
    values = ",".join(str(i / 100) for i in range(1, 21))
    loader, master, job_overrides = sweep(EXAMPLE, [f"optimizer.lr={values}", "seed=range(20)"])
    points = compose_points(loader, master, job_overrides, 0)
    assert compose.last_stats == {"points": 400, "fast": 400, "combinations": 1}
    for index in (0, 1, 57, 199, 399):
        config, hydra_node = compose_full(loader, master, job_overrides[index], index)
        assert same(points[index].config, config)
        assert same(points[index].hydra, hydra_node)
    assert os.path.isabs(points[0].hydra["sweep"]["dir"])


# -- the points streamed, chunk by chunk ---------------------------------------------------------
def test_iter_point_chunks_gives_the_points_chunk_by_chunk():
    loader, master, job_overrides = sweep(EXAMPLE, ["optimizer.lr=0.1,0.2,0.3", "seed=1,2"])
    whole = compose_points(loader, master, job_overrides, 5)
    chunks = list(compose.iter_point_chunks(loader, master, job_overrides, 5, 4))
    assert [len(c) for c in chunks] == [4, 2]
    streamed = [p for c in chunks for p in c]
    assert [(p.index, p.job_num, p.overrides) for p in streamed] == [
        (p.index, p.job_num, p.overrides) for p in whole
    ]
    assert all(same(a.config, b.config) and same(a.hydra, b.hydra) for a, b in zip(streamed, whole))
    assert compose.last_stats["points"] == 6


def test_iter_point_chunks_composes_a_bad_point_only_when_its_chunk_is_asked_for():
    loader, master, job_overrides = sweep(EXAMPLE, ["optimizer.lr=0.1,0.2", "seed=1"])
    bad = [*job_overrides, ["optimizer.oops=1"]]
    chunks = compose.iter_point_chunks(loader, master, bad, 0, 2)
    assert [p.overrides for p in next(chunks)] == [list(o) for o in job_overrides]
    with pytest.raises(ConfigCompositionException, match="oops"):
        next(chunks)


@pytest.mark.parametrize("raise_at", [-1, 2])
def test_omegaconf_parser_is_patched_only_while_a_chunk_is_composed(raise_at):
    """The parse cache serves the points' resolutions while a chunk is composed; between two
    chunks (the pipeline stages meanwhile), after the last and after a bad point,
    ``omegaconf.base.parse`` is OmegaConf's own."""
    original = omegaconf.base.parse
    cached = []

    def probe(x: int, block_at: int, raise_at: int, gate: str) -> int:
        cached.append(omegaconf.base.parse is not original)
        if x == raise_at:
            raise ValueError(f"point x={x} cannot be composed")
        return x

    OmegaConf.register_new_resolver("probe", probe, replace=True)
    try:
        loader, master, job_overrides = sweep(
            APPS / "conf_chunks", ["x=0,1,2,3", f"raise_at={raise_at}"]
        )
        chunks = compose.iter_point_chunks(loader, master, job_overrides, 0, 2)
        assert [p.config["probe"] for p in next(chunks)] == [0, 1]
        assert omegaconf.base.parse is original  # the caller holds the first chunk
        if raise_at == -1:
            assert [p.config["probe"] for p in next(chunks)] == [2, 3]
            assert omegaconf.base.parse is original
            assert next(chunks, None) is None
        else:
            with pytest.raises(Exception, match="x=2 cannot be composed"):
                next(chunks)
    finally:
        OmegaConf.clear_resolver("probe")
    assert omegaconf.base.parse is original
    assert any(cached)  # the points' resolutions went through the cache
