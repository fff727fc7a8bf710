"""Unit tests for the pure parts of the run step (seml_hydra.job.runner) and for
seml_hydra.core.hydra_node.job_config. No MongoDB, no Slurm, no task run."""

from __future__ import annotations

import copy
import logging
from types import SimpleNamespace

import pytest
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from seml_hydra.core import states
from seml_hydra.core.hydra_node import job_config
from seml_hydra.job.claim import claim_filter, pending_for
from seml_hydra.job.runner import adapt_hydra_node
from seml_hydra.job.slurm_env import execution_identity

# --------------------------------------------------------------------------------------------
# execution_identity
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env, expected",
    [
        pytest.param(
            {
                "SLURM_JOB_ID": "1005",
                "SLURM_ARRAY_JOB_ID": "1000",
                "SLURM_ARRAY_TASK_ID": "5",
                "SLURM_CLUSTER_NAME": "hpc",
                "SUBMITIT_EXECUTOR": "slurm",
            },
            {"cluster": "hpc", "array_id": 1000, "task_id": 5},
            id="slurm-array-task",
        ),
        pytest.param(
            {"SLURM_JOB_ID": "1005", "SLURM_ARRAY_JOB_ID": "1000", "SLURM_ARRAY_TASK_ID": "0"},
            {"cluster": "slurm", "array_id": 1000, "task_id": 0},
            id="slurm-array-no-cluster-name",
        ),
        pytest.param(
            {"SLURM_JOB_ID": "77", "SLURM_CLUSTER_NAME": "hpc"},
            {"cluster": "hpc", "array_id": 77, "task_id": 0},
            id="slurm-plain-job",
        ),
        pytest.param(
            {"SUBMITIT_EXECUTOR": "local", "SUBMITIT_LOCAL_JOB_ID": "4242"},
            {"cluster": "local", "array_id": 4242, "task_id": 0},
            id="submitit-local",
        ),
        pytest.param(
            {"SUBMITIT_LOCAL_JOB_ID": "4242"},
            {"cluster": "local", "array_id": 4242, "task_id": 0},
            id="submitit-local-without-executor-name",
        ),
        pytest.param(
            # the local executor run from inside a Slurm allocation: the local job wins
            {"SUBMITIT_EXECUTOR": "local", "SUBMITIT_LOCAL_JOB_ID": "9", "SLURM_JOB_ID": "77"},
            {"cluster": "local", "array_id": 9, "task_id": 0},
            id="submitit-local-inside-slurm",
        ),
    ],
)
def test_execution_identity(env, expected):
    assert execution_identity(env) == expected


def test_execution_identity_missing_names_the_variables():
    with pytest.raises(ValueError) as info:
        execution_identity({"HOME": "/root"})
    assert "SLURM_JOB_ID" in str(info.value)
    assert "SUBMITIT_LOCAL_JOB_ID" in str(info.value)


@pytest.mark.parametrize(
    "env, variable",
    [
        ({"SLURM_JOB_ID": "abc"}, "SLURM_JOB_ID"),
        (
            {"SLURM_JOB_ID": "1", "SLURM_ARRAY_JOB_ID": "x1", "SLURM_ARRAY_TASK_ID": "0"},
            "SLURM_ARRAY_JOB_ID",
        ),
        (
            {"SLURM_JOB_ID": "1", "SLURM_ARRAY_JOB_ID": "1", "SLURM_ARRAY_TASK_ID": "1.5"},
            "SLURM_ARRAY_TASK_ID",
        ),
        ({"SLURM_JOB_ID": ""}, "SLURM_JOB_ID"),
        ({"SUBMITIT_LOCAL_JOB_ID": "pid"}, "SUBMITIT_LOCAL_JOB_ID"),
        ({"SUBMITIT_EXECUTOR": "local"}, "SUBMITIT_LOCAL_JOB_ID"),  # local but no job id
    ],
)
def test_execution_identity_non_integer_names_the_variable(env, variable):
    with pytest.raises(ValueError, match=variable):
        execution_identity(env)


# --------------------------------------------------------------------------------------------
# claim_filter (the rule itself needs MongoDB and is tested against it elsewhere)
# --------------------------------------------------------------------------------------------


def test_claim_filter_shape():
    """PENDING for this job's array (or none recorded yet), or RUNNING/RESCHEDULED of this
    very array task (with a restart-count condition); both tested against MongoDB in
    test_claim.py."""
    execution = {"cluster": "hpc", "array_id": 1000, "task_id": 3, "slurm_output_file": "o"}
    pending, *same_job = claim_filter(12, execution)["$or"]
    assert claim_filter(12, execution)["_id"] == 12
    assert pending == {"status": states.PENDING, **pending_for(1000)}
    assert [branch["status"] for branch in same_job] == [states.RESCHEDULED, states.RUNNING]
    for branch in same_job:
        assert {k: v for k, v in branch.items() if k.startswith("execution.")} == {
            "execution.cluster": "hpc",
            "execution.array_id": 1000,
            "execution.task_id": 3,
        }
        assert "$expr" in branch


def test_claim_filter_never_matches_finished_or_staged_states():
    allowed = set()
    for branch in claim_filter(1, {"cluster": "c", "array_id": 1, "task_id": 0})["$or"]:
        status = branch["status"]
        allowed |= set(status["$in"]) if isinstance(status, dict) else {status}
    assert allowed == {states.PENDING, states.RUNNING, states.RESCHEDULED}
    assert not allowed & states.TERMINAL
    assert states.STAGED not in allowed


def test_claim_filter_requires_identity_keys():
    with pytest.raises(KeyError):
        claim_filter(1, {"cluster": "c", "array_id": 1})


# --------------------------------------------------------------------------------------------
# adapt_hydra_node (with Hydra's real default job_logging)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def composed_hydra():
    """Hydra's composed ``hydra`` node (defaults only): unresolved and resolved containers."""
    from hydra import compose, initialize
    from hydra.core.hydra_config import HydraConfig

    previous = HydraConfig.instance().cfg
    try:
        with initialize(version_base="1.3", config_path=None):
            cfg = compose(config_name=None, return_hydra_config=True)
    finally:
        HydraConfig.instance().cfg = previous
    unresolved = OmegaConf.to_container(cfg.hydra, resolve=False)
    with read_write(cfg), open_dict(cfg):  # what the launcher sets before resolving a point
        cfg.hydra.job.num = 0
        cfg.hydra.runtime.output_dir = "/tmp/seml_hydra_test/out"
    resolved = OmegaConf.to_container(cfg.hydra, resolve=True, throw_on_missing=False)
    return SimpleNamespace(unresolved=unresolved, resolved=resolved)


@pytest.fixture
def hydra_node(composed_hydra):
    return copy.deepcopy(composed_hydra.unresolved)


def fake_plan(global_rank=0, world_size=1, log_level=logging.INFO, writes_outputs=None):
    return SimpleNamespace(
        global_rank=global_rank,
        world_size=world_size,
        log_level=log_level,
        writes_outputs=global_rank == 0 if writes_outputs is None else writes_outputs,
    )


def test_default_job_logging_has_a_file_handler(hydra_node):
    """Precondition of the tests below: Hydra's default job logging writes a file."""
    assert "file" in hydra_node["job_logging"]["handlers"]
    assert "file" in hydra_node["job_logging"]["root"]["handlers"]
    assert hydra_node["output_subdir"] == ".hydra"


@pytest.mark.parametrize("world_size", [1, 4])
def test_adapt_primary_keeps_outputs(hydra_node, world_size):
    node = adapt_hydra_node(hydra_node, fake_plan(0, world_size))
    assert node["output_subdir"] == ".hydra"
    assert node["job_logging"]["handlers"]["file"] == hydra_node["job_logging"]["handlers"]["file"]
    assert node["job_logging"]["root"]["handlers"] == ["console", "file"]


@pytest.mark.parametrize("global_rank", [1, 3])
def test_adapt_non_primary_drops_outputs(hydra_node, global_rank):
    node = adapt_hydra_node(hydra_node, fake_plan(global_rank, 4, logging.ERROR))
    assert node["output_subdir"] is None
    assert "file" not in node["job_logging"]["handlers"]
    assert "file" not in node["job_logging"]["root"]["handlers"]
    assert node["job_logging"]["root"]["handlers"] == ["console"]
    assert "console" in node["job_logging"]["handlers"]


@pytest.mark.parametrize(
    "level, name",
    [
        (logging.DEBUG, "DEBUG"),
        (logging.INFO, "INFO"),
        (logging.WARNING, "WARNING"),
        (logging.ERROR, "ERROR"),
        (logging.CRITICAL, "CRITICAL"),
    ],
)
@pytest.mark.parametrize("global_rank", [0, 1])
def test_adapt_sets_root_level_name(hydra_node, level, name, global_rank):
    node = adapt_hydra_node(hydra_node, fake_plan(global_rank, 2, level))
    assert node["job_logging"]["root"]["level"] == name


def test_adapt_root_level_custom_number_is_usable(hydra_node):
    node = adapt_hydra_node(hydra_node, fake_plan(0, 1, 15))
    logging.getLogger("seml_hydra.test.level").setLevel(node["job_logging"]["root"]["level"])


@pytest.mark.parametrize("global_rank", [0, 1])
def test_adapt_prefixes_formats_with_rank_when_several_ranks(hydra_node, global_rank):
    node = adapt_hydra_node(hydra_node, fake_plan(global_rank, 2))
    formatters = node["job_logging"]["formatters"]
    assert formatters
    for name, formatter in formatters.items():
        original = hydra_node["job_logging"]["formatters"][name]["format"]
        assert formatter["format"] == f"[rank {global_rank}] {original}"


def test_adapt_single_rank_formats_unchanged(hydra_node):
    node = adapt_hydra_node(hydra_node, fake_plan(0, 1))
    assert node["job_logging"]["formatters"] == hydra_node["job_logging"]["formatters"]


@pytest.mark.parametrize("global_rank, world_size", [(0, 1), (0, 2), (1, 2)])
def test_adapt_does_not_mutate_input(hydra_node, global_rank, world_size):
    before = copy.deepcopy(hydra_node)
    node = adapt_hydra_node(hydra_node, fake_plan(global_rank, world_size, logging.ERROR))
    assert hydra_node == before
    node["job_logging"]["root"]["handlers"].append("x")
    assert hydra_node == before


def test_adapt_keeps_the_rest_of_the_node(hydra_node):
    node = adapt_hydra_node(hydra_node, fake_plan(1, 2, logging.ERROR))
    for key in hydra_node:
        if key not in ("job_logging", "output_subdir"):
            assert node[key] == hydra_node[key], key


def test_adapt_node_without_job_logging():
    node = adapt_hydra_node({"output_subdir": ".hydra"}, fake_plan(1, 2, logging.ERROR))
    assert node["output_subdir"] is None


def test_adapted_job_logging_is_a_valid_logging_config(composed_hydra, tmp_path):
    """The non-primary node configures logging without the file handler (dictConfig would
    create the file). Checked on a private copy of the config, against the resolved node."""
    import logging.config

    node = adapt_hydra_node(copy.deepcopy(composed_hydra.resolved), fake_plan(1, 2, logging.ERROR))
    conf = copy.deepcopy(node["job_logging"])
    conf["root"] = {}  # do not touch the test process' root logger
    conf["loggers"] = {"seml_hydra.test.adapted": node["job_logging"]["root"]}
    conf["disable_existing_loggers"] = False
    logging.config.dictConfig(conf)
    logger = logging.getLogger("seml_hydra.test.adapted")
    try:
        assert logger.level == logging.ERROR
        assert [type(h) for h in logger.handlers] == [logging.StreamHandler]
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)


# --------------------------------------------------------------------------------------------
# core.hydra_node.job_config
# --------------------------------------------------------------------------------------------

APP_CONFIG = {
    "lr": 0.1,
    "epochs": 3,
    "flag": True,
    "nothing": None,
    "model": {"name": "small", "layers": [64, 32], "opts": {"a.b": 1}},
    "items": [{"x": 1}, {"x": 2}],
}


@pytest.fixture
def restore_hydra_config():
    from hydra.core.hydra_config import HydraConfig

    previous = HydraConfig.instance().cfg
    yield
    HydraConfig.instance().cfg = previous


def test_job_config_hydra_node_is_typed(composed_hydra):
    from hydra.conf import HydraConf

    cfg = job_config(copy.deepcopy(APP_CONFIG), copy.deepcopy(composed_hydra.resolved), "12_3")
    assert isinstance(cfg, DictConfig)
    assert OmegaConf.get_type(cfg, "hydra") is HydraConf


def test_job_config_is_accepted_by_hydra_config(composed_hydra, restore_hydra_config):
    from hydra.core.hydra_config import HydraConfig

    cfg = job_config(copy.deepcopy(APP_CONFIG), copy.deepcopy(composed_hydra.resolved), "12_3")
    HydraConfig.instance().set_config(cfg)
    assert HydraConfig.get().job.id == "12_3"
    assert HydraConfig.get().job.num == 0
    assert HydraConfig.get().runtime.output_dir == "/tmp/seml_hydra_test/out"


def test_job_config_sets_job_id(composed_hydra):
    cfg = job_config({}, copy.deepcopy(composed_hydra.resolved), "1000_7")
    assert cfg.hydra.job.id == "1000_7"


def test_job_config_without_job_id_keeps_the_stored_one(composed_hydra):
    node = copy.deepcopy(composed_hydra.resolved)
    node["job"]["id"] = "stored"
    assert job_config({}, node, None).hydra.job.id == "stored"


def test_job_config_keeps_app_keys_intact(composed_hydra):
    config = copy.deepcopy(APP_CONFIG)
    cfg = job_config(config, copy.deepcopy(composed_hydra.resolved), "1_0")
    app = OmegaConf.to_container(cfg, resolve=True)
    app.pop("hydra")
    assert app == APP_CONFIG
    assert [type(app[k]) for k in ("lr", "epochs", "flag")] == [float, int, bool]
    assert config == APP_CONFIG  # input untouched
    assert cfg.model.layers[1] == 32


def test_job_config_keeps_hydra_node_values(composed_hydra):
    node = copy.deepcopy(composed_hydra.resolved)
    cfg = job_config({}, node, "1_0")
    hydra = OmegaConf.to_container(cfg.hydra, resolve=False)
    for key in ("job_logging", "run", "sweep", "output_subdir", "overrides"):
        assert hydra[key] == node[key], key


def test_job_config_keeps_adapted_nodes(composed_hydra):
    """A non-primary rank's node (output_subdir None, no file handler) survives the merge onto
    the HydraConf schema."""
    node = adapt_hydra_node(composed_hydra.resolved, fake_plan(1, 2, logging.ERROR))
    cfg = job_config({}, node, "1_1")
    assert cfg.hydra.output_subdir is None
    assert "file" not in cfg.hydra.job_logging.handlers
    assert list(cfg.hydra.job_logging.root.handlers) == ["console"]
    assert cfg.hydra.job_logging.formatters.simple.format.startswith("[rank 1] ")


def test_job_config_does_not_reinterpret_resolved_strings(composed_hydra):
    stored = OmegaConf.to_container(
        OmegaConf.create({"cmd": r"echo \${HOME}", "tpl": r"\${oc.env:USER}"}), resolve=True
    )
    assert stored == {"cmd": "echo ${HOME}", "tpl": "${oc.env:USER}"}  # what staging stores
    cfg = job_config(stored, copy.deepcopy(composed_hydra.resolved), "1_0")
    assert cfg.cmd == "echo ${HOME}"
    assert cfg.tpl == "${oc.env:USER}"


def _fast_and_full(base, node, monkeypatch):
    """``job_config`` of ``node`` from the typed ``base`` and from scratch, and how often the
    fast path had to type a node from scratch."""
    import pickle

    from seml_hydra.core import hydra_node as node_module

    typed = pickle.dumps(node_module.typed_hydra_node(base))
    calls = []
    real = node_module.typed_hydra_node
    monkeypatch.setattr(node_module, "typed_hydra_node", lambda n: calls.append(1) or real(n))
    fast = job_config(
        copy.deepcopy(APP_CONFIG), node, "5_1", typed_base=pickle.loads(typed), base_node=base
    )
    from_scratch = len(calls)
    full = job_config(copy.deepcopy(APP_CONFIG), copy.deepcopy(node), "5_1")
    return fast, full, from_scratch


@pytest.mark.parametrize("global_rank, world_size", [(0, 1), (1, 2), (0, 4)])
def test_job_config_from_the_typed_base_equals_the_full_merge(
    composed_hydra, global_rank, world_size, monkeypatch
):
    """The jobs' fast path (typed base of the batch + the point's changed leaves) builds the
    same typed ``hydra`` node as merging the point's whole node onto the schema."""
    from hydra.conf import HydraConf

    base = copy.deepcopy(composed_hydra.resolved)
    point = copy.deepcopy(base)  # another sweep point of the batch
    point["job"]["num"] = 7
    point["job"]["override_dirname"] = "lr=${oc.env:HOME}"  # a literal "${" survives
    point["runtime"]["output_dir"] = "/tmp/seml_hydra_test/out/7"
    point["overrides"]["task"] = ["lr=0.5"]
    point["sweeper"]["new_key"] = {"nested": [1, 2]}
    node = adapt_hydra_node(point, fake_plan(global_rank, world_size, logging.ERROR))

    fast, full, from_scratch = _fast_and_full(base, node, monkeypatch)
    assert from_scratch == 0
    assert OmegaConf.get_type(fast, "hydra") is HydraConf
    assert OmegaConf.to_container(fast, resolve=False) == OmegaConf.to_container(
        full, resolve=False
    )
    assert fast.hydra.job.override_dirname == "lr=${oc.env:HOME}"
    assert ("file" in fast.hydra.job_logging.handlers) == (global_rank == 0)


def test_job_config_falls_back_to_the_full_merge_when_a_change_is_refused(
    composed_hydra, monkeypatch
):
    """A change the typed base refuses (deleting a field of Hydra's schema) is merged from
    scratch, with the same result as before the fast path existed."""
    base = copy.deepcopy(composed_hydra.resolved)
    node = copy.deepcopy(base)
    del node["job"]["env_set"]
    fast, full, from_scratch = _fast_and_full(base, node, monkeypatch)
    assert from_scratch == 1
    assert OmegaConf.to_container(fast, resolve=False) == OmegaConf.to_container(
        full, resolve=False
    )


def test_with_job_id_puts_the_job_id_in_every_string_holding_the_token():
    from seml_hydra.core.hydra_node import JOB_ID_TOKEN, with_job_id

    node = {
        "sweep": {"dir": "/m", "subdir": f"0_{JOB_ID_TOKEN}"},
        "runtime": {"output_dir": f"/m/0_{JOB_ID_TOKEN}"},
        "job": {"id": JOB_ID_TOKEN, "num": 0},
        "handlers": [{"filename": f"/m/0_{JOB_ID_TOKEN}/app.log"}],
    }
    out = with_job_id(node, "12_3")
    assert out == {
        "sweep": {"dir": "/m", "subdir": "0_12_3"},
        "runtime": {"output_dir": "/m/0_12_3"},
        "job": {"id": "12_3", "num": 0},
        "handlers": [{"filename": "/m/0_12_3/app.log"}],
    }
    assert node["job"]["id"] == JOB_ID_TOKEN  # the input is left as it is
