"""Pure parts of seml_hydra.track (the one KILLED-trace builder, the collection names the
completion cache lists) and the CLI's one declaration of the selector options
(seml_hydra.cli.options.on_collection). No services."""

from __future__ import annotations

import inspect

import pytest

from seml_hydra.cli.options import WITHOUT_STATES, Target, Yes, on_collection
from seml_hydra.track.cache import is_listed_collection
from seml_hydra.track.killed import recovered_message
from seml_hydra.track.outputs import TRACE_LINES, FileTail, killed_trace


def test_killed_trace_is_the_head_then_each_files_last_lines_or_why_it_was_not_read():
    lines = [f"line {i}" for i in range(TRACE_LINES + 5)]
    trace = killed_trace(
        "The job 7 ended.",
        [
            ("/o/7_0_log.err", FileTail(None, problem="not read: a symbolic link")),
            ("/o/7_0_log.out", FileTail("\n".join(lines).encode() + b"\xff")),
        ],
    )
    assert trace[0] == "The job 7 ended.\n"
    assert trace[1] == "(could not read /o/7_0_log.err: not read: a symbolic link)\n"
    assert trace[2] == "Last lines of /o/7_0_log.out:\n"
    # the last TRACE_LINES lines, invalid UTF-8 as U+FFFD, every line ending in a newline
    assert trace[3:] == [f"{line}\n" for line in lines[-TRACE_LINES:-1]] + [f"{lines[-1]}\ufffd\n"]
    assert killed_trace("Slurm job 8 ended.", []) == ["Slurm job 8 ended.\n"]


@pytest.mark.parametrize(
    "name",
    ["seml_hydra_counters", "metrics", "fs", "fs.files", "system.views", "seml_hydra_metrics.a"],
)
def test_reserved_collections_are_not_listed(name):
    """One list of reserved names (``store.db.collections.is_reserved_collection``): ``fs`` too."""
    assert not is_listed_collection(name)


def test_is_listed_collection_keeps_experiment_collections():
    assert is_listed_collection("train") and is_listed_collection("fsx")


def test_on_collection_gives_a_command_the_selector_options_after_its_arguments():
    """Typer reads the decorated command's signature: the context, the command's own
    arguments, the selector options (in help order), then the command's own options."""

    def restore(on: Target, target: str, yes: Yes = False) -> None:
        """Doc."""

    def hold(target: Target) -> None:
        """Doc."""

    def detect(target: Target) -> None:
        """Doc."""

    params = inspect.signature(on_collection()(restore)).parameters
    assert list(params) == [
        "ctx",
        "target",
        "sacred_id",
        "batch_id",
        "filter_states",
        "filter_dict",
        "yes",
    ]
    assert all(params[n].default is None for n in ("sacred_id", "filter_dict"))
    decorated = on_collection(WITHOUT_STATES)(hold)
    assert list(inspect.signature(decorated).parameters) == [
        "ctx",
        "sacred_id",
        "batch_id",
        "filter_dict",
    ]
    assert decorated.__doc__ == "Doc." and decorated.__name__ == "hold"
    assert list(inspect.signature(on_collection(())(detect)).parameters) == ["ctx"]


def test_every_collection_command_shows_its_selector_options():
    """The options each command had when it declared them itself."""
    import typer

    from seml_hydra.cli import app  # noqa: F401  (registers the commands)
    from seml_hydra.cli.core import collection_app

    group = typer.main.get_group(collection_app)
    selectors = {"sacred_id", "batch_id", "filter_states", "filter_dict"}
    without_states = selectors - {"filter_states"}
    expected = {
        "status": selectors,
        "start": without_states,
        "reset": selectors,
        "cancel": selectors,
        "delete": selectors,
        "hold": without_states,
        "release": without_states,
        "restore-sources": selectors,
        "download-sources": selectors,
        "detect-killed": set(),
        "print-fail-trace": selectors,
        "print-output": selectors,
        "print-command": selectors,
        "print-experiment": selectors,
        "description": {"set": selectors, "delete": selectors, "list": selectors},
        "results": selectors,
        "reload-sources": selectors,
        "clean-db": set(),
        "usage": selectors,
        "print-attempts": selectors,
        "launch-worker": without_states,
    }
    assert set(group.commands) == set(expected)
    for name, command in group.commands.items():
        if isinstance(expected[name], dict):  # a sub-group: its commands
            assert set(command.commands) == set(expected[name]), name
            for sub, subcommand in command.commands.items():
                options = {p.name for p in subcommand.params} & selectors
                assert options == expected[name][sub], (name, sub)
            continue
        options = {p.name for p in command.params} & selectors
        assert options == expected[name], name
    flags = {o for p in group.commands["status"].params for o in p.opts}
    assert {"-id", "--sacred-id", "-b", "--batch-id", "-s", "--states"} <= flags
    assert {"-fd", "--filter-dict"} <= flags


def test_recovered_message_names_the_ids_and_what_to_do_next():
    assert recovered_message([3, 1, 2]) == (
        "3 experiment(s) whose submission was interrupted (left PENDING without a Slurm job): "
        "1-3 are STAGED again"
    )
    assert recovered_message([5], "submit them with `seml c start`.").endswith(
        ": 5 are STAGED again; submit them with `seml c start`."
    )


def test_the_hints_of_a_stuck_job_quote_the_collection():
    from seml_hydra.track.jobs import stuck_message

    assert "Release it with `seml 'a b;c' release`" in stuck_message("1_0", "JobHeldUser", "a b;c")
    assert "`seml train release` as root" in stuck_message("1_0", "JobHeldAdmin", "train")
