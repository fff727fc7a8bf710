"""Unit tests for seml_hydra.launch.sbatch (validation, submitit parameters derived from the
config dataclasses, sbatch options, resource keys, chunking) and submit's pure parts (the
cleaned environment). No Slurm, no MongoDB."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
from support.launcher_conf import launcher, refusal

from seml_hydra.config import SemlLauncherConf, SemlLocalLauncherConf
from seml_hydra.launch.sbatch import (
    EXECUTOR_KEYS,
    GENERIC_KEYS,
    RESERVED_SBATCH_OPTIONS,
    SBATCH_NAMES,
    SCRIPT_TEXT_FIELDS,
    SLURM_KEYS,
    check_script_values,
    chunk,
    executor_parameters,
    resource_key,
    sbatch_options,
    validate_launcher,
)
from seml_hydra.launch.submit import clean_environment

# --------------------------------------------------------------------------------------------
# validate_launcher
# --------------------------------------------------------------------------------------------


def test_validate_launcher_accepts_defaults():
    validate_launcher(launcher())
    validate_launcher(dataclasses.asdict(SemlLocalLauncherConf()))


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"nodes": 0}, "nodes"),
        ({"nodes": -1}, "nodes"),
        ({"nodes": None}, "nodes"),
        ({"nodes": "2"}, "nodes"),
        ({"tasks_per_node": 0}, "tasks_per_node"),
        ({"experiments_per_job": 0}, "experiments_per_job"),
    ],
)
def test_validate_launcher_rejects_bad_counts(changes, field):
    with pytest.raises(ValueError, match=rf"hydra\.launcher\.{field}="):
        validate_launcher(launcher(**changes))


@pytest.mark.parametrize("option", ["comment", "job-name", "job_name", "array", "output", "error"])
def test_validate_launcher_rejects_reserved_additional_parameters(option):
    with pytest.raises(ValueError) as info:
        validate_launcher(launcher(additional_parameters={option: "x", "mail-type": "END"}))
    message = str(info.value)
    assert "additional_parameters" in message
    assert option in message
    assert "mail-type" not in message


def test_reserved_options_cover_the_launchers_own():
    for option in ("comment", "job-name", "array", "output"):
        assert option in RESERVED_SBATCH_OPTIONS


def test_validate_launcher_accepts_other_additional_parameters():
    validate_launcher(launcher(additional_parameters={"mail-type": "END", "exclusive": True}))


def test_validate_launcher_accepts_none_additional_parameters():
    validate_launcher(launcher(additional_parameters=None))


@pytest.mark.parametrize(
    "changes",
    [
        {"experiments_per_job": 2, "tasks_per_node": 2},
        {"experiments_per_job": 2, "nodes": 2},
        {"experiments_per_job": 3, "nodes": 2, "tasks_per_node": 4},
    ],
)
def test_validate_launcher_rejects_several_experiments_per_multi_task_job(changes):
    with pytest.raises(ValueError, match=r"experiments_per_job=\d+") as info:
        validate_launcher(launcher(**changes))
    assert "mutually exclusive" in str(info.value)


@pytest.mark.parametrize(
    "changes",
    [
        {"experiments_per_job": 2},
        {"experiments_per_job": 10, "nodes": 1, "tasks_per_node": 1},
        {"experiments_per_job": 1, "nodes": 2, "tasks_per_node": 4},
    ],
)
def test_validate_launcher_accepts(changes):
    validate_launcher(launcher(**changes))


# --------------------------------------------------------------------------------------------
# executor_parameters
# --------------------------------------------------------------------------------------------


#: (launcher changes, the field the error must name) of values that would break the job script
CONTROL_CHARACTER_CASES = [
    ({"partition": "debug\n#SBATCH --x"}, "hydra.launcher.partition="),
    ({"account": "acct\rtouch /tmp/x"}, "hydra.launcher.account="),
    ({"qos": "normal\t"}, "hydra.launcher.qos="),
    ({"constraint": "a\x00b"}, "hydra.launcher.constraint="),
    ({"exclude": "node1\x7f"}, "hydra.launcher.exclude="),
    ({"gres": "gpu:1\x1b[2J"}, "hydra.launcher.gres="),
    ({"submitit_folder": "/tmp/out\nhostname"}, "hydra.launcher.submitit_folder="),
    ({"setup": ["module load x", "echo a\necho b"]}, "hydra.launcher.setup[1]="),
    ({"additional_parameters": {"mail-type": "END\nid"}}, "additional_parameters.mail-type="),
    ({"additional_parameters": {"mail\ntype": "END"}}, "additional_parameters (an option name)"),
]


@pytest.mark.parametrize("changes, field", CONTROL_CHARACTER_CASES)
def test_validate_launcher_rejects_control_characters_naming_the_field(changes, field):
    message = refusal(**changes)
    assert "contains the control character" in message and field in message


#: (launcher changes, the field the error must name): sbatch drops a backslash from an
#: ``#SBATCH`` line (``--comment='a\\b'`` is the comment ``ab``)
BACKSLASH_CASES = [
    ({"partition": "de\\bug"}, "hydra.launcher.partition="),
    ({"name": "run\\1"}, "hydra.launcher.name="),
    ({"submitit_folder": "/tmp/a\\b/%j"}, "hydra.launcher.submitit_folder="),
    ({"additional_parameters": {"mail-user": "a\\b@x.org"}}, "additional_parameters.mail-user="),
]


@pytest.mark.parametrize("changes, field", BACKSLASH_CASES)
def test_validate_launcher_rejects_a_backslash_in_an_sbatch_line_naming_the_field(changes, field):
    message = refusal(**changes)
    assert "contains a backslash" in message and field in message


def test_a_backslash_in_a_shell_line_or_the_job_name_is_told_apart():
    """setup lines, srun_args and python are shell text (quoted by shlex: a backslash holds);
    the job name (``--job-name``, with the collection) is an #SBATCH line."""
    validate_launcher(launcher(setup=["echo a\\ b"], srun_args=["--x=a\\b"]))
    with pytest.raises(ValueError, match="contains a backslash"):
        check_script_values(launcher(), job_name="a\\b_1")


def test_after_and_a_dependency_of_ones_own_are_refused_together():
    for key in ("dependency", "depend"):  # sbatch takes --depend for --dependency
        message = refusal(after=1, additional_parameters={key: "singleton"})
        assert "hydra.launcher.after and hydra.launcher.additional_parameters.dependency" in message
    validate_launcher(launcher(additional_parameters={"dependency": "singleton"}))
    validate_launcher(launcher(after=1))


@pytest.mark.parametrize(
    "changes",
    [
        {"partition": "debug", "account": "my-acct_1", "constraint": "a&b|c", "gres": "gpu:2"},
        {"setup": ["module load cuda/12", "export X='a b'; echo $X"]},
        {"additional_parameters": {"mail-type": "END", "hold": True, "begin": "now+1hour"}},
        {"partition": "débug ünïcode"},
    ],
)
def test_validate_launcher_accepts_printable_script_values(changes):
    validate_launcher(launcher(**changes))


def test_check_script_values_names_a_bad_job_name():
    with pytest.raises(ValueError, match=r"job name \(\[<name>_\]<collection>_<batch_id>\)"):
        check_script_values(launcher(), job_name="a\nb_1")
    check_script_values(launcher(), job_name="a b_1")


def test_executor_parameters_never_sends_none():
    params = executor_parameters(launcher(), comment="coll", name="coll_1")
    assert all(value is not None for value in params.values())
    for key in ("cpus_per_task", "gpus_per_node", "mem_gb"):
        assert key not in params
    for key in ("partition", "qos", "account", "constraint", "exclude", "gres", "setup"):
        assert f"slurm_{key}" not in params
    assert "slurm_array_parallelism" not in params
    several = executor_parameters(launcher(tasks_per_node=2), comment="coll", name="coll_1")
    assert "slurm_additional_parameters" not in several  # empty dict: nothing to send


def test_executor_parameters_defaults():
    params = executor_parameters(launcher(), comment="coll", name="coll_1")
    assert params["nodes"] == 1
    assert params["tasks_per_node"] == 1
    assert params["timeout_min"] == 60
    assert params["name"] == "coll_1"
    assert params["slurm_comment"] == "coll"


def test_executor_parameters_generic_keys_are_unprefixed():
    node = launcher(cpus_per_task=4, gpus_per_node=2, mem_gb=16, timeout_min=30)
    node["stderr_to_stdout"] = True
    params = executor_parameters(node, comment="c", name="n")
    for key in GENERIC_KEYS:
        assert params[key] == node[key]
        assert f"slurm_{key}" not in params


@pytest.mark.parametrize(
    "key, value",
    [
        ("partition", "gpu"),
        ("qos", "high"),
        ("account", "lab"),
        ("constraint", "a100"),
        ("exclude", "node[1-3]"),
        ("gres", "gpu:2"),
        ("setup", ["module load cuda"]),
        ("array_parallelism", 4),
    ],
)
def test_executor_parameters_slurm_keys_are_prefixed(key, value):
    params = executor_parameters(launcher(**{key: value}), comment="c", name="n")
    assert params[f"slurm_{key}"] == value
    assert key not in params


def test_executor_parameters_additional_parameters():
    params = executor_parameters(
        launcher(additional_parameters={"mail-type": "END"}, nodes=2), comment="c", name="n"
    )
    assert params["slurm_additional_parameters"] == {"mail-type": "END"}
    single = executor_parameters(
        launcher(additional_parameters={"mail-type": "END"}), comment="c", name="n"
    )
    assert single["slurm_additional_parameters"] == {"mail-type": "END", "signal": "B:USR2@120"}


def test_a_single_task_job_runs_without_srun_and_is_signalled_in_its_batch_shell():
    params = executor_parameters(launcher(signal_delay_s=30), comment="c", name="n")
    assert params["slurm_use_srun"] is False and "slurm_srun_args" not in params
    assert params["slurm_additional_parameters"] == {"signal": "B:USR2@30"}
    own = launcher(additional_parameters={"signal": "B:TERM@60"})
    params = executor_parameters(own, comment="c", name="n")
    assert params["slurm_additional_parameters"] == {"signal": "B:TERM@60"}  # the user's stays


@pytest.mark.parametrize(
    "changes", [{"srun_args": ["--cpu-bind=cores"]}, {"gpu_bind": "single:1"}, {"nodes": 2}]
)
def test_srun_only_options_or_several_tasks_keep_the_srun_step(changes):
    params = executor_parameters(launcher(**changes), comment="c", name="n")
    assert "slurm_use_srun" not in params and params["slurm_srun_args"][0].startswith("--ntasks=")
    assert "signal" not in (params.get("slurm_additional_parameters") or {})


@pytest.mark.parametrize(
    "nodes, tasks_per_node, ntasks",
    [(1, 4, 4), (2, 1, 2), (2, 3, 6), (4, 8, 32)],
)
def test_executor_parameters_srun_args_carry_explicit_task_counts(nodes, tasks_per_node, ntasks):
    params = executor_parameters(
        launcher(nodes=nodes, tasks_per_node=tasks_per_node), comment="c", name="n"
    )
    assert params["slurm_srun_args"] == [
        f"--ntasks={ntasks}",
        f"--ntasks-per-node={tasks_per_node}",
    ]


def test_executor_parameters_does_not_mutate_launcher():
    node = launcher(additional_parameters={"mail-type": "END"})
    snapshot = {k: (dict(v) if isinstance(v, dict) else v) for k, v in node.items()}
    params = executor_parameters(node, comment="c", name="n")
    params["slurm_additional_parameters"]["x"] = 1
    assert node == snapshot


def test_executor_parameters_make_submitits_sbatch_script(tmp_path):
    """submitit's Slurm executor takes every parameter we send (building the script needs no
    Slurm), and the script carries the comment, job name and explicit srun task counts."""
    import submitit

    node = launcher(
        partition="p",
        qos="q",
        cpus_per_task=2,
        mem_gb=8.0,
        gres="gpu:1",
        setup=["echo hi"],
        array_parallelism=3,
        additional_parameters={"mail-type": "END"},
        nodes=2,
        tasks_per_node=2,
    )
    executor = submitit.AutoExecutor(folder=tmp_path, cluster="slurm")
    executor.update_parameters(**executor_parameters(node, comment="coll", name="coll_7"))
    text = executor._executor._make_submission_file_text("python -u run.py", "uid")
    for line in (
        "#SBATCH --comment=coll",
        "#SBATCH --job-name=coll_7",
        "#SBATCH --partition=p",
        "#SBATCH --qos=q",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=2",
        "#SBATCH --mail-type=END",
        "echo hi",
    ):
        assert line in text.splitlines(), line
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    assert "--ntasks=4 --ntasks-per-node=2" in srun


def test_executor_parameters_accepted_by_local_executor(tmp_path):
    import submitit

    node = dataclasses.asdict(SemlLocalLauncherConf())
    node.update(partition="p", additional_parameters={"mail-type": "END"}, tasks_per_node=2)
    executor = submitit.AutoExecutor(folder=tmp_path, cluster="local")
    executor.update_parameters(**executor_parameters(node, comment="c", name="n"))


# --------------------------------------------------------------------------------------------
# sbatch_options
# --------------------------------------------------------------------------------------------


def test_sbatch_options_defaults():
    assert sbatch_options(launcher(), comment="coll", name="coll_2") == {
        "nodes": 1,
        "ntasks-per-node": 1,
        "ntasks": 1,
        "time": 60,
        "comment": "coll",
        "job-name": "coll_2",
    }


@pytest.mark.parametrize(
    "key, value, flag",
    [
        ("cpus_per_task", 4, "cpus-per-task"),
        ("gpus_per_node", 2, "gpus-per-node"),
        ("tasks_per_node", 3, "ntasks-per-node"),
        ("timeout_min", 90, "time"),
        ("partition", "gpu", "partition"),
        ("qos", "high", "qos"),
        ("account", "lab", "account"),
        ("constraint", "a100", "constraint"),
        ("exclude", "n1", "exclude"),
        ("gres", "gpu:1", "gres"),
    ],
)
def test_sbatch_options_use_sbatch_names(key, value, flag):
    options = sbatch_options(launcher(**{key: value}), comment="c", name="n")
    assert options[flag] == value
    if flag != key:
        assert key not in options


@pytest.mark.parametrize("mem_gb, mem", [(16, "16G"), (1, "1G")])
def test_sbatch_options_mem_in_gigabytes(mem_gb, mem):
    assert sbatch_options(launcher(mem_gb=mem_gb), comment="c", name="n")["mem"] == mem


def test_sbatch_options_no_mem_when_unset():
    assert "mem" not in sbatch_options(launcher(), comment="c", name="n")


def test_sbatch_options_mem_from_typed_launcher_node():
    from omegaconf import OmegaConf

    node = OmegaConf.structured(SemlLauncherConf)
    node.mem_gb = 16
    typed = OmegaConf.to_container(node, resolve=False)
    assert sbatch_options(typed, comment="c", name="n")["mem"] == "16G"


@pytest.mark.parametrize(
    "nodes, tasks_per_node, ntasks", [(1, 1, 1), (1, 4, 4), (3, 1, 3), (2, 4, 8)]
)
def test_sbatch_options_ntasks(nodes, tasks_per_node, ntasks):
    options = sbatch_options(
        launcher(nodes=nodes, tasks_per_node=tasks_per_node), comment="c", name="n"
    )
    assert options["ntasks"] == ntasks
    assert options["nodes"] == nodes
    assert options["ntasks-per-node"] == tasks_per_node


def test_sbatch_options_include_additional_parameters():
    options = sbatch_options(
        launcher(additional_parameters={"mail-type": "END", "exclusive": True}),
        comment="c",
        name="n",
    )
    assert options["mail-type"] == "END"
    assert options["exclusive"] is True


def test_sbatch_options_never_hold_none():
    options = sbatch_options(launcher(), comment="c", name="n")
    assert all(value is not None for value in options.values())


# --------------------------------------------------------------------------------------------
# resource_key
# --------------------------------------------------------------------------------------------


def test_resource_key_equal_for_equal_resources():
    a = launcher(partition="gpu", additional_parameters={"a": 1, "b": 2})
    b = launcher(partition="gpu", additional_parameters={"b": 2, "a": 1})
    b = dict(reversed(list(b.items())))  # key order must not matter
    assert resource_key(a) == resource_key(b)


def test_resource_key_ignores_non_resource_fields():
    a = launcher(collection="one", force=False, wait=True, poll_interval_s=1.0)
    b = launcher(collection="two", force=True, wait=False, poll_interval_s=5.0)
    assert resource_key(a) == resource_key(b)


@pytest.mark.parametrize(
    "changes",
    [
        {"tasks_per_node": 2},
        {"nodes": 2},
        {"cpus_per_task": 8},
        {"gpus_per_node": 1},
        {"mem_gb": 32},
        {"timeout_min": 5},
        {"partition": "other"},
        {"setup": ["module load x"]},
        {"array_parallelism": 2},
        {"additional_parameters": {"mail-type": "END"}},
        {"experiments_per_job": 3},
    ],
)
def test_resource_key_differs_when_resources_differ(changes):
    assert resource_key(launcher()) != resource_key(launcher(**changes))


# --------------------------------------------------------------------------------------------
# chunk
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ids, size, expected",
    [
        ([], 3, []),
        ([1], 1, [[1]]),
        ([1, 2, 3], 1, [[1], [2], [3]]),
        ([1, 2, 3, 4], 2, [[1, 2], [3, 4]]),
        ([1, 2, 3, 4, 5], 2, [[1, 2], [3, 4], [5]]),
        ([5, 3, 9], 10, [[5, 3, 9]]),  # order kept
        ((1, 2, 3), 2, [[1, 2], [3]]),  # tuples give lists
    ],
)
def test_chunk(ids, size, expected):
    assert chunk(ids, size) == expected


def test_chunk_groups_are_lists():
    assert all(isinstance(g, list) for g in chunk(range(7), 3))


# --------------------------------------------------------------------------------------------
# clean_environment
# --------------------------------------------------------------------------------------------

LEAKY = {
    "SLURM_JOB_ID": "11",
    "SLURM_PROCID": "0",
    "SBATCH_PARTITION": "p",
    "SUBMITIT_EXECUTOR": "slurm",
    "MASTER_ADDR": "node1",
    "MASTER_PORT": "29500",
    "RANK": "3",
    "WORLD_SIZE": "4",
    "LOCAL_RANK": "1",
}
KEPT = {"SEML_TEST_KEEP_ME": "yes", "MY_RANK_VAR": "1", "XSLURM_NOT_A_PREFIX": "1"}


@pytest.fixture
def leaky_env(monkeypatch):
    for key, value in {**LEAKY, **KEPT}.items():
        monkeypatch.setenv(key, value)


def test_clean_environment_drops_leaky_variables_inside(leaky_env):
    with clean_environment():
        for key in LEAKY:
            assert key not in os.environ, key
        for key, value in KEPT.items():
            assert os.environ[key] == value


def test_clean_environment_keeps_slurm_conf_the_users_choice_of_cluster(leaky_env, monkeypatch):
    """sbatch must submit to the cluster SLURM_CONF names, which squeue/sacct/scontrol ask."""
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm-other/slurm.conf")
    with clean_environment():
        assert os.environ["SLURM_CONF"] == "/etc/slurm-other/slurm.conf"
        assert "SLURM_JOB_ID" not in os.environ


def test_clean_environment_restores_after(leaky_env):
    with clean_environment():
        pass
    for key, value in {**LEAKY, **KEPT}.items():
        assert os.environ[key] == value


def test_clean_environment_restores_on_exception(leaky_env):
    with pytest.raises(RuntimeError, match="boom"):
        with clean_environment():
            assert "SLURM_JOB_ID" not in os.environ
            raise RuntimeError("boom")
    for key, value in LEAKY.items():
        assert os.environ[key] == value


def test_clean_environment_without_leaky_variables(monkeypatch):
    for key in list(os.environ):
        if key.startswith(("SLURM_", "SBATCH_", "SUBMITIT_")) or key in LEAKY:
            monkeypatch.delenv(key)
    before = dict(os.environ)
    with clean_environment():
        assert dict(os.environ) == before
    assert dict(os.environ) == before


def test_recording_the_submitted_jobs_finishes_through_ctrl_c_then_reraises_it():
    """After sbatch the jobs exist: Ctrl-C during the write that records them in the documents
    must not leave them unrecorded (they would be submitted again)."""
    from seml_hydra.launch.submit import finish_despite_interrupt

    calls = []

    def write() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        finish_despite_interrupt(write)
    assert len(calls) == 3
    finish_despite_interrupt(lambda: calls.append(1))  # no interrupt: one call, no raise
    assert len(calls) == 4


# --------------------------------------------------------------------------------------------
# the mapping derived from the config dataclasses (seml_hydra.config field metadata)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("conf", [SemlLauncherConf, SemlLocalLauncherConf])
def test_every_launcher_field_is_classified_exactly_once(conf):
    """Each field says how it reaches submitit (generic, Slurm-only or launcher-only): a field
    added without a role (``foo: int = 1``) fails here instead of silently never reaching sbatch
    or reaching it under the wrong name."""
    from seml_hydra import config

    roles = {f.name: f.metadata.get(config.ROLE) for f in dataclasses.fields(conf)}
    unclassified = sorted(name for name, role in roles.items() if role not in config.ROLES)
    assert unclassified == []
    generic = {n for n, r in roles.items() if r == config.GENERIC}
    slurm = {n for n, r in roles.items() if r == config.SLURM}
    init = {n for n, r in roles.items() if r == config.EXECUTOR}
    only = {n for n, r in roles.items() if r == config.LAUNCHER}
    assert generic | slurm | init | only == set(roles)
    assert sum(map(len, (generic, slurm, init, only))) == len(roles)
    if conf is SemlLauncherConf:  # what the executor parameters are built from
        assert set(GENERIC_KEYS) == generic and set(SLURM_KEYS) == slurm
        assert set(EXECUTOR_KEYS) == init


def test_an_unclassified_field_is_caught():
    """The check above sees a plain new field: it carries no role."""
    from seml_hydra import config

    @dataclasses.dataclass
    class Extended(SemlLauncherConf):
        foo: int = 1

    assert dataclasses.fields(Extended)[-1].metadata.get(config.ROLE) not in config.ROLES


def test_generic_keys_are_submitits_and_sbatch_names_cover_the_resources():
    assert GENERIC_KEYS == (
        "nodes",
        "tasks_per_node",
        "cpus_per_task",
        "gpus_per_node",
        "mem_gb",
        "timeout_min",
        "stderr_to_stdout",
    )
    # stderr_to_stdout is no sbatch option: submitit leaves --error out
    assert set(SBATCH_NAMES) == {*GENERIC_KEYS, *SCRIPT_TEXT_FIELDS} - {"stderr_to_stdout"}
    assert SCRIPT_TEXT_FIELDS == (
        "gpus_per_task",
        "cpus_per_gpu",
        "mem_per_gpu",
        "mem_per_cpu",
        "partition",
        "qos",
        "account",
        "constraint",
        "exclude",
        "gres",
        "nodelist",
        "exclusive",
        "mail_type",
        "mail_user",
    )


#: every resource field set (values as a user would give them)
FULL = dict(
    nodes=2,
    tasks_per_node=4,
    cpus_per_task=8,
    gpus_per_node=1,
    mem_gb=16.5,
    timeout_min=90,
    signal_delay_s=60,
    max_requeues=2,
    partition="gpu",
    qos="high",
    account="lab",
    constraint="a100",
    exclude="node3",
    gres="gpu:1",
    setup=["module load cuda"],
    array_parallelism=5,
    additional_parameters={"mail-type": "END"},
)


def test_executor_parameters_of_a_full_config_are_those_of_the_hand_kept_lists():
    """The parameters the derived mapping gives for a config with every field set, as the
    hand-kept key lists (``GENERIC_KEYS``/``SLURM_KEYS`` written out) gave them."""
    assert executor_parameters(launcher(**FULL), comment="coll", name="coll_3") == {
        "nodes": 2,
        "tasks_per_node": 4,
        "cpus_per_task": 8,
        "gpus_per_node": 1,
        "mem_gb": 16.5,
        "timeout_min": 90,
        "name": "coll_3",
        "slurm_signal_delay_s": 60,
        "slurm_partition": "gpu",
        "slurm_qos": "high",
        "slurm_account": "lab",
        "slurm_constraint": "a100",
        "slurm_exclude": "node3",
        "slurm_gres": "gpu:1",
        "slurm_setup": ["module load cuda"],
        "slurm_array_parallelism": 5,
        "slurm_comment": "coll",
        "slurm_additional_parameters": {"mail-type": "END"},
        "slurm_srun_args": ["--ntasks=8", "--ntasks-per-node=4"],
    }


def test_sbatch_options_and_resource_key_of_a_full_config_are_unchanged():
    assert sbatch_options(launcher(**FULL), comment="coll", name="coll_3") == {
        "nodes": 2,
        "ntasks-per-node": 4,
        "cpus-per-task": 8,
        "gpus-per-node": 1,
        "time": 90,
        "partition": "gpu",
        "qos": "high",
        "account": "lab",
        "constraint": "a100",
        "exclude": "node3",
        "gres": "gpu:1",
        "mem": "16896M",
        "ntasks": 8,
        "comment": "coll",
        "job-name": "coll_3",
        "mail-type": "END",
    }
    # the fields FULL leaves unset count as null
    unset = ("cpus_per_gpu", "exclusive", "mail_type", "mail_user", "mem_per_cpu", "mem_per_gpu")
    unset += ("name", "nodelist", "python", "srun_args", "stderr_to_stdout", "after")
    unset += ("gpus_per_task", "gpu_bind", "visible_gpus", "max_failures")
    assert json.loads(resource_key(launcher(**FULL))) == {
        "account": "lab",
        "additional_parameters": {"mail-type": "END"},
        "array_parallelism": 5,
        "constraint": "a100",
        "cpus_per_task": 8,
        "exclude": "node3",
        "experiments_per_job": 1,
        "gpus_per_node": 1,
        "gres": "gpu:1",
        "mem_gb": 16.5,
        "nodes": 2,
        "partition": "gpu",
        "qos": "high",
        "setup": ["module load cuda"],
        "signal_delay_s": 60,
        "tasks_per_node": 4,
        "timeout_min": 90,
        **dict.fromkeys(unset),
        "after_kind": "ok",
    }


def test_the_local_executor_takes_a_backslash_it_writes_no_sbatch_line_for():
    """seml_local writes no ``#SBATCH`` line: a backslash in its name, folder or job name is
    fine there (second attacker, session 7: refused since the backslash check, and a collection
    with one was staged and then left STAGED by a refusal blaming sbatch)."""
    local = launcher(name="run\\1", submitit_folder="/tmp/a\\b/%j")
    validate_launcher(local, "local")
    check_script_values(local, job_name="a\\b_1", sbatch=False)
    with pytest.raises(ValueError, match="contains a backslash"):
        validate_launcher(local, "slurm")
    with pytest.raises(ValueError, match="control character"):
        check_script_values(local, job_name="a\nb_1", sbatch=False)


def test_orphaned_tasks_are_those_with_no_experiment_left():
    from seml_hydra.launch.submit import orphaned_tasks

    groups = [[1, 2], [3], [4, 5]]
    assert orphaned_tasks(groups, {1, 2, 3, 4, 5}) == []
    assert orphaned_tasks(groups, {2, 5}) == [1]  # one experiment left keeps its task
    assert orphaned_tasks(groups, set()) == [0, 1, 2]


def test_resource_groups_are_labelled_by_the_options_that_differ():
    """Two resource groups of one launch printed the same "Submitted" line but for the job id
    (outside tester): each now names the sbatch options that tell it from the others."""
    from seml_hydra.launch.sbatch import group_labels
    from seml_hydra.launch.submit import array_note

    one = {"ntasks": 1, "cpus-per-task": 1, "comment": "c", "job-name": "c_1"}
    two = {"ntasks": 2, "cpus-per-task": 1, "comment": "c", "job-name": "c_2", "gres": "gpu:1"}
    assert group_labels([one, two]) == ["ntasks=1", "gres=gpu:1, ntasks=2"]
    assert group_labels([one]) == [""] and group_labels([one, dict(one)]) == ["", ""]
    assert array_note("ntasks=2", (1, 2, 8)) == (
        ", ntasks=2, array 1 of 2: Slurm's MaxArraySize (8) allows at most 8 tasks per array"
    )
    assert array_note("", None) == ""
