"""Command chaining (``seml COLLECTION reset start``): where ``cli.chain.split_chain`` cuts the
words, on the real command tree (no services)."""

from __future__ import annotations

import pytest
import typer

from seml_hydra.cli import app  # noqa: F401  (registers the commands)
from seml_hydra.cli.chain import split_chain
from seml_hydra.cli.core import collection_app


@pytest.fixture(scope="module")
def commands():
    return typer.main.get_group(collection_app).commands


@pytest.mark.parametrize(
    ("words", "pieces"),
    [
        ("status", [["status"]]),
        ("reset start", [["reset"], ["start"]]),
        ("reset -y -s FAILED start -n 2", [["reset", "-y", "-s", "FAILED"], ["start", "-n", "2"]]),
        # an option's value is never a command, also when it is a command's name
        ("status -fd start cancel", [["status", "-fd", "start"], ["cancel"]]),
        ("status --filter-dict=x start", [["status", "--filter-dict=x"], ["start"]]),
        # a positional argument the command still expects is never a command
        ("restore-sources status status", [["restore-sources", "status"], ["status"]]),
        ("description set reset start", [["description", "set", "reset"], ["start"]]),
        # a sub-group's sub-command is not the collection command of the same name
        ("description delete -y delete -y", [["description", "delete", "-y"], ["delete", "-y"]]),
        ("description list status", [["description", "list"], ["status"]]),
        # after --, everything is an argument
        ("print-output -- status", [["print-output", "--", "status"]]),
        # unknown words stay with their command: click reports them
        ("status bogus", [["status", "bogus"]]),
        ("status -h start", [["status", "-h"], ["start"]]),
    ],
)
def test_split_chain_cuts_only_where_the_current_command_cannot_take_the_word(
    commands, words, pieces
):
    assert split_chain(words.split(), commands) == pieces
