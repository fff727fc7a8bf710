"""``seml configure``: write SEML's MongoDB config file (mode 0600), optionally with an SSH
tunnel (``ssh_config``). The password is asked without echo and never printed; there is no
option for it (a password on a command line is visible in ``ps``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from seml_hydra.cli.core import ROOT_PANEL, app, console

_SSH_PANEL = "SSH tunnel (ssh_config)"


def write_config_file(path: Path, config: dict[str, Any]) -> None:
    """Write ``config`` as YAML to ``path``, mode 0600 from the first byte (atomic replace).

    The directory is created with mode 0700 when missing.
    """
    import yaml

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(config, f, sort_keys=False)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise


def _read_secret(label: str, from_stdin: bool, allow_empty: bool = False) -> str:
    if from_stdin:
        value = sys.stdin.readline().rstrip("\r\n")
    else:
        value = typer.prompt(
            label, hide_input=True, default="" if allow_empty else None, show_default=False
        )
    return value


@app.command("configure", rich_help_panel=ROOT_PANEL)
def configure(
    host: Annotated[
        str | None,
        typer.Option(
            help="MongoDB host (as seen from the SSH host with --ssh).", show_default=False
        ),
    ] = None,
    port: Annotated[
        int | None, typer.Option(help="MongoDB port [default: 27017].", show_default=False)
    ] = None,
    database: Annotated[
        str | None, typer.Option("--database", "--db", help="Database name.", show_default=False)
    ] = None,
    username: Annotated[str | None, typer.Option(help="MongoDB user.", show_default=False)] = None,
    password_stdin: Annotated[
        bool,
        typer.Option(
            "--password-stdin",
            help="Read the password (then the SSH key passphrase, with --ssh) as lines from "
            "stdin instead of asking for it.",
        ),
    ] = False,
    ssh: Annotated[
        bool,
        typer.Option(
            "--ssh",
            help="Reach MongoDB through an SSH tunnel (adds an ssh_config block).",
            rich_help_panel=_SSH_PANEL,
        ),
    ] = False,
    ssh_host: Annotated[
        str | None,
        typer.Option(
            help="SSH host (implies --ssh).", show_default=False, rich_help_panel=_SSH_PANEL
        ),
    ] = None,
    ssh_port: Annotated[
        int | None,
        typer.Option(
            help="SSH port [default: 22].", show_default=False, rich_help_panel=_SSH_PANEL
        ),
    ] = None,
    ssh_username: Annotated[
        str | None, typer.Option(help="SSH user.", show_default=False, rich_help_panel=_SSH_PANEL)
    ] = None,
    ssh_pkey: Annotated[
        str | None,
        typer.Option(
            help="SSH private key file [default: ~/.ssh/id_rsa].",
            show_default=False,
            rich_help_panel=_SSH_PANEL,
        ),
    ] = None,
    yes: Annotated[
        bool, typer.Option("-y", "--yes", help="Overwrite an existing file without asking.")
    ] = False,
    check: Annotated[
        bool, typer.Option("--check/--no-check", help="Connect with the new settings afterwards.")
    ] = True,
) -> None:
    """Write the MongoDB settings (SEML's mongodb.config, mode 0600); asks for what is missing.

    The file is `$SEML_MONGODB_CONFIG`, else `$XDG_CONFIG_HOME/seml/mongodb.config` (default
    `~/.config/seml/mongodb.config`). The password is stored in it in plain text, readable by
    you only, and never shown.
    """
    from seml_hydra.store.db.settings import default_config_path

    path = default_config_path()
    out = console()
    if path.exists() and not yes:
        typer.confirm(f"{path} exists and will be overwritten. Continue?", abort=True)
    if host is None:
        host = typer.prompt(
            "MongoDB host" + (" (as seen from the SSH host)" if ssh or ssh_host else "")
        )
    if port is None:
        port = typer.prompt("Port", default=27017, type=int)
    if database is None:
        database = typer.prompt("Database name", default="seml")
    if username is None:
        username = typer.prompt("User name")
    password = _read_secret("Password", password_stdin)
    config: dict[str, Any] = {
        "host": host,
        "port": int(port),
        "database": database,
        "username": username,
        "password": password,
    }
    if ssh or ssh_host:
        if ssh_host is None:
            ssh_host = typer.prompt("SSH host")
        if ssh_port is None:
            ssh_port = typer.prompt("SSH port", default=22, type=int)
        if ssh_username is None:
            ssh_username = typer.prompt("SSH user name")
        if ssh_pkey is None:
            ssh_pkey = typer.prompt("SSH private key file", default="~/.ssh/id_rsa")
        passphrase = _read_secret(
            "Passphrase of the SSH key (empty: none)", password_stdin, allow_empty=True
        )
        block: dict[str, Any] = {
            "ssh_address_or_host": ssh_host,
            "ssh_port": int(ssh_port),
            "ssh_username": ssh_username,
            "ssh_pkey": ssh_pkey,
        }
        if passphrase:
            block["ssh_private_key_password"] = passphrase
        config["ssh_config"] = block

    # check the content the way every reader will, before replacing anything
    from seml_hydra.store.db.settings import settings_from_config_file
    from seml_hydra.store.errors import DatabaseError

    tmp_check = path.with_name(f".{path.name}.{os.getpid()}.check")
    write_config_file(tmp_check, config)
    try:
        settings = settings_from_config_file(tmp_check)
    except DatabaseError as err:
        raise DatabaseError(str(err).replace(str(tmp_check), "the new settings")) from None
    finally:
        tmp_check.unlink(missing_ok=True)
    write_config_file(path, config)
    settings = _replace_source(settings, path)
    out.print(f"Wrote {path} (mode 0600): {settings.describe().rsplit(' (from ', 1)[0]}")
    if settings.ssh is not None:
        port_flag = "" if int(ssh_port or 22) == 22 else f" -p {ssh_port}"
        out.print(
            "The SSH host's key must be in ~/.ssh/known_hosts (checked before logging in): "
            f"connect once with `ssh{port_flag} {ssh_username}@{ssh_host}` if it is not."
        )
    if check:
        from seml_hydra.store.db.client import connect

        db = connect(settings)
        out.print(f"Connected: database {db.name!r} answers.")


def _replace_source(settings: Any, path: Path) -> Any:
    import dataclasses

    return dataclasses.replace(settings, source=str(path), config_file=str(path))
