"""The documentation's generated references (``docs/hooks.py``) are complete: every launcher
field has its description in ``config.py``, every ``seml`` command and option has help text,
and every public name is on the API page."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect

import pytest
from support.paths import ROOT

from seml_hydra import _PUBLIC, config


@pytest.fixture(scope="module")
def hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_launcher_field_has_a_description_in_config_py(hooks):
    source = inspect.getsource(config)
    for cls in (config.SemlLauncherConf, config.DbConf, config.SemlLocalLauncherConf):
        comments = hooks.field_comments(source, cls.__name__)
        fields = [f.name for f in dataclasses.fields(cls)]
        if cls is config.SemlLocalLauncherConf:  # only what it redefines is in its body
            fields = [name for name in fields if name in comments]
        missing = [name for name in fields if not comments.get(name)]
        assert not missing, f"{cls.__name__}: no comment above {missing}"
    table = hooks.launcher_fields_markdown()
    for f in dataclasses.fields(config.SemlLauncherConf):
        assert f"| `{f.name}` |" in table


def test_every_seml_command_and_option_is_documented(hooks):
    import typer

    from seml_hydra.cli import app

    text = hooks.seml_commands_markdown()
    root = typer.main.get_command(app)
    groups = [("seml", root.commands), ("seml COLLECTION", root.collection_group().commands)]
    for prefix, commands in groups:
        for name, command in commands.items():
            if command.hidden:
                continue
            assert f"### `{prefix} {name}`" in text
            assert (command.help or "").strip(), f"{prefix} {name} has no help text"
            for param in command.params:
                if param.param_type_name == "option" and param.name != "help":
                    assert (param.help or "").strip(), f"{prefix} {name} {param.opts} has no help"
                    assert f"`{param.opts[0]}`" in text


def test_every_public_name_is_on_the_api_page(hooks):
    text = hooks.public_api_markdown()
    for name, module in _PUBLIC.items():
        assert f"::: {module}.{name}" in text
