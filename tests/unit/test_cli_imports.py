"""The ``seml`` commands that need no database (help, version) import only what they print
with: typer and rich (and what they import), the ``cli`` and ``core`` modules of seml-hydra.
Each case runs the command in a fresh interpreter and reads ``sys.modules`` after it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: the help of a command of a typer group, the floor of every ``seml ... --help``: prints the
#: modules it imports (typer 0.29 imports pydantic to read the group's completion options)
TYPER_HELP = '''
import io, json, sys, typer
app = typer.Typer(rich_markup_mode="markdown")
@app.command()
def f(x: int = 0, y: list[str] | None = None) -> None:
    """`f` help."""
@app.command()
def g() -> None:
    """`g` help."""
out, sys.stdout = sys.stdout, io.StringIO()
for argv in (["--help"], ["f", "--help"]):
    try:
        app(argv)
    except SystemExit:
        pass
print(json.dumps(list(sys.modules)), file=out)
'''

#: run ``seml <argv>`` through the console script's entry point, then print what is imported
#: outside the packages :data:`TYPER_HELP` loads in a fresh interpreter (typer's help printer:
#: typer, rich and what they import, e.g. pydantic when it is installed)
SCRIPT = """
import json, subprocess, sys
argv, typer_help = json.loads(sys.argv[1]), sys.argv[2]
before = subprocess.run([sys.executable, "-c", typer_help], capture_output=True, text=True,
                        check=True).stdout
packages = {name.split(".")[0] for name in json.loads(before)}
sys.argv = ["seml", *argv]
from seml_hydra.cli import main
try:
    main()
except SystemExit:
    pass
extra = sorted(m for m in sys.modules if m.split(".")[0] not in packages)
print(json.dumps(extra), file=sys.stderr)
"""

#: seml-hydra's modules a command without database may import
ALLOWED_OWN = ("seml_hydra.cli", "seml_hydra.core")
#: packages none of them may import (what the commands import when they run)
HEAVY = ("pymongo", "bson", "hydra", "omegaconf", "submitit", "sacred", "pandas", "yaml")


def imported_by(*argv: str) -> list[str]:
    """The modules ``seml *argv`` imports outside the packages of typer's help printer and the
    standard library (run in a fresh interpreter)."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(argv), TYPER_HELP],
        capture_output=True,
        text=True,
        check=True,
    )
    extra = json.loads(done.stderr.strip().splitlines()[-1])
    return [m for m in extra if m.split(".")[0] not in sys.stdlib_module_names]


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["-V"],
        ["train", "--help"],
        ["configure", "--help"],
        ["list", "--help"],
        ["queue", "--help"],
        ["train", "status", "--help"],
        ["train", "results", "--help"],
        ["train", "start", "--help"],
    ],
    ids=" ".join,
)
def test_help_imports_only_typer_rich_cli_and_core(argv):
    extra = imported_by(*argv)
    own = {"seml_hydra", "seml_hydra._compat"}
    assert [m for m in extra if m not in own and not m.startswith(ALLOWED_OWN)] == []
    assert not [m for m in extra if m.split(".")[0] in HEAVY]


def test_root_help_lists_the_collection_commands_as_their_group_has_them():
    """``seml --help`` lists the collection commands from a parameterless listing: each with
    the name, order, help, panel and flags of the command that runs."""
    import typer

    from seml_hydra.cli import app

    root = typer.main.get_command(app)
    ctx = root.make_context("seml", ["--help"], resilient_parsing=True)
    real = root.collection_group()
    listing = root.collection_listing()
    assert list(listing) == real.list_commands(ctx)
    for name, listed in listing.items():
        command = real.get_command(ctx, name)
        for attribute in ("name", "help", "short_help", "hidden", "deprecated"):
            assert getattr(listed, attribute) == getattr(command, attribute), (name, attribute)
        assert listed.rich_help_panel == command.rich_help_panel
        assert root.get_command(ctx, name) is listed or name in root.commands
