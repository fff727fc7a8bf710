"""MkDocs hooks: the reference tables that must not drift from the code are generated at build
time from it (one source of truth), replacing a marker line in a page:

- ``<!-- launcher-fields -->``: every field of ``seml_hydra.config.SemlLauncherConf`` (and
  ``DbConf``), its default, its sbatch option and the comment above it in ``config.py``;
- ``<!-- seml-commands -->``: every ``seml`` command with its help and every option;
- ``<!-- public-api -->``: a mkdocstrings block (``::: module.name``) per name of the public
  API (``seml_hydra._PUBLIC``), rendered from its docstring.

``tests/unit/test_docs.py`` checks that each field and option has a description.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def field_comments(source: str, class_name: str) -> dict[str, str]:
    """Field name -> the ``#`` comment lines right above it in the class ``class_name`` of
    ``source`` (section lines ``# -- ... --`` left out), joined into one sentence."""
    tree = ast.parse(source)
    lines = source.splitlines()
    out: dict[str, str] = {}
    for node in tree.body:
        if not (isinstance(node, ast.ClassDef) and node.name == class_name):
            continue
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            comment: list[str] = []
            i = stmt.lineno - 2
            while i >= 0 and lines[i].strip().startswith("#"):
                text = lines[i].strip().lstrip("#").strip()
                if not text.startswith("--"):
                    comment.insert(0, text)
                i -= 1
            out[stmt.target.id] = " ".join(comment)
    return out


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
    return "(required)"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _prose(text: str) -> str:
    """A comment as Markdown table text: ``_`` outside backquotes escaped (``_target_`` is no
    emphasis), ``|`` escaped."""
    parts = text.split("`")
    parts[::2] = [part.replace("_", "\\_").replace("*", "\\*") for part in parts[::2]]
    return _cell("`".join(parts))


def _yaml(value: Any) -> str:
    """A default as Hydra's YAML writes it (``null``, ``true``, ``[]``)."""
    import yaml

    return (
        yaml.safe_dump(value, default_flow_style=True, width=1000)
        .strip()
        .removesuffix("...")
        .strip()
    )


def launcher_fields_markdown() -> str:
    """The launcher fields as Markdown tables (``hydra.launcher.<field>``, then ``db.*``)."""
    from seml_hydra import config

    source = inspect.getsource(config)
    rows = ["| field | default | sbatch option | what it does |", "| --- | --- | --- | --- |"]
    comments = field_comments(source, "SemlLauncherConf")
    for f in dataclasses.fields(config.SemlLauncherConf):
        sbatch = f.metadata.get(config.SBATCH)
        default = _default(f)
        rows.append(
            f"| `{f.name}` | `{_cell(_yaml(default))}` | {f'`--{sbatch}`' if sbatch else ''} | "
            f"{_prose(comments.get(f.name, ''))} |"
        )
    db = field_comments(source, "DbConf")
    rows += ["", "| `db.` field | default | what it does |", "| --- | --- | --- |"]
    for f in dataclasses.fields(config.DbConf):
        rows.append(f"| `db.{f.name}` | `{_yaml(_default(f))}` | {_prose(db.get(f.name, ''))} |")
    return "\n".join(rows) + "\n"


def _commands(group: Any, ctx: Any) -> list[tuple[str, Any]]:
    out = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is not None and not command.hidden:
            out.append((name, command))
    return out


def _command_markdown(prefix: str, name: str, command: Any) -> list[str]:
    lines = [f"### `{prefix} {name}`", "", inspect.cleandoc(command.help or ""), ""]
    params = [p for p in command.params if not getattr(p, "hidden", False)]
    options = [p for p in params if p.param_type_name == "option" and p.name != "help"]
    arguments = [p for p in params if p.param_type_name == "argument"]
    if arguments:
        lines.append(
            "Arguments: " + ", ".join(f"`{(a.metavar or a.name).upper()}`" for a in arguments)
        )
        lines.append("")
    if options:
        lines += ["| option | what it does |", "| --- | --- |"]
        for opt in options:
            flags = ", ".join(f"`{o}`" for o in [*opt.opts, *opt.secondary_opts])
            lines.append(f"| {flags} | {_cell(opt.help or '')} |")
        lines.append("")
    subcommands = getattr(command, "commands", None)
    if subcommands:
        for sub_name in sorted(subcommands):
            lines += _command_markdown(f"{prefix} {name}", sub_name, subcommands[sub_name])
    return lines


def seml_commands_markdown() -> str:
    """Every ``seml`` command (root commands, then the commands on a collection) with its help
    text and options, from the typer/click tree."""
    import typer

    from seml_hydra.cli import app

    root = typer.main.get_command(app)
    ctx = root.make_context("seml", ["--help"], resilient_parsing=True)
    lines = ["## Commands without a collection", ""]
    for name in sorted(root.commands):
        lines += _command_markdown("seml", name, root.commands[name])
    lines += ["## Commands on a collection", ""]
    group = root.collection_group()
    for name, command in sorted(_commands(group, ctx)):
        lines += _command_markdown("seml COLLECTION", name, command)
    return "\n".join(lines) + "\n"


def public_api_markdown() -> str:
    """One ``::: <module>.<name>`` block (mkdocstrings) per public name, in
    ``seml_hydra._PUBLIC``'s order."""
    import seml_hydra

    return "\n".join(
        f"## `seml_hydra.{name}`\n\n::: {module}.{name}\n"
        for name, module in seml_hydra._PUBLIC.items()
    )


GENERATORS = {
    "<!-- public-api -->": public_api_markdown,
    "<!-- launcher-fields -->": launcher_fields_markdown,
    "<!-- seml-commands -->": seml_commands_markdown,
}


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """MkDocs hook: replace each marker line with its generated Markdown."""
    for marker, generate in GENERATORS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, generate())
    return markdown
