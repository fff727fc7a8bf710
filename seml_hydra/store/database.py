"""Resolve, connect to and use the MongoDB database that stores the experiments.

One function, :func:`resolve_db_settings`, decides which MongoDB server and database the
launcher, the jobs and the CLI use. The first source that is set wins:

1. the launcher's ``db`` config (``hydra.launcher.db``): a mapping with the optional keys
   ``url`` (a MongoDB URI), ``config_file`` (path to a SEML-format ``mongodb.config``) and
   ``database`` (a database name that overrides whatever the chosen source says);
2. the environment variable ``SEML_MONGODB_URI`` (a MongoDB URI; the database name is the
   URI's path, else ``seml``);
3. SEML's config file ``~/.config/seml/mongodb.config`` (the file ``seml configure`` writes;
   its path can be overridden with the environment variable ``SEML_MONGODB_CONFIG``),
   including its ``ssh_config`` block: MongoDB is then reached through an SSH tunnel that
   :func:`connect` opens transparently (:mod:`seml_hydra.store.tunnel`);
4. the embedded default: a local ``mongod`` from the ``local-db`` extra, started on demand
   (see :mod:`seml_hydra.store.embedded`).

Experiment ids are handed out by :func:`next_ids`, an atomic counter that never collides with
ids that SEML itself wrote (SEML 0.5 uses ``max(_id) + 1``, starting at 1).

This module imports nothing heavy at import time: ``pymongo`` and ``yaml`` are imported
inside the functions that need them, so that ``seml --help`` stays fast.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from seml_hydra.core.errors import UserError

if TYPE_CHECKING:
    import pymongo
    import pymongo.collection
    import pymongo.database

__all__ = [
    "COUNTERS_COLLECTION",
    "DEFAULT_DATABASE",
    "DatabaseError",
    "DbSettings",
    "InvalidCollectionName",
    "connect",
    "default_config_path",
    "is_connection_error",
    "retry_budget_s",
    "retrying",
    "short_reason",
    "get_collection",
    "next_ids",
    "reset_client_cache",
    "job_db_config",
    "job_db_environment",
    "mask_credentials",
    "resolve_db_settings",
    "settings_from_config_file",
    "validate_collection_name",
]

#: Database used when the chosen source names none (URI without a path, embedded server).
DEFAULT_DATABASE = "seml"
#: Environment variable holding a MongoDB URI (precedence step 2).
ENV_URI = "SEML_MONGODB_URI"
#: Environment variable overriding the path of SEML's mongodb.config (precedence step 3).
ENV_CONFIG = "SEML_MONGODB_CONFIG"
#: Environment variable: how long (seconds) jobs and a waiting launcher keep retrying an
#: operation while MongoDB is unreachable (:func:`retrying`); 0 turns retrying off.
ENV_RETRY = "SEML_MONGODB_RETRY_S"
#: Default of :data:`ENV_RETRY`: an outage of a few minutes (a restart, a replica set election)
DEFAULT_RETRY_S = 300.0
#: Longest pause between two attempts of :func:`retrying` (seconds)
MAX_RETRY_DELAY_S = 10.0
#: Collection that holds the id counters of :func:`next_ids`.
COUNTERS_COLLECTION = "seml_hydra_counters"
#: Keys accepted in the launcher's ``db`` config.
DB_CFG_KEYS = ("url", "config_file", "database")
#: Keys SEML 0.5 requires in mongodb.config (``seml.database.get_mongodb_config``).
SEML_REQUIRED_KEYS = ("username", "password", "port", "host", "database")
#: Keys accepted in a config file's ``ssh_config`` block: ``sshtunnel.SSHTunnelForwarder``'s
#: arguments, SEML's retry/lock settings, our ``health_check_interval`` (seconds) and
#: ``ssh_known_hosts`` (file(s) the SSH host's key must be in, default ``~/.ssh/known_hosts``).
SSH_KEYS = (
    "ssh_address_or_host",
    "ssh_port",
    "ssh_username",
    "ssh_pkey",
    "ssh_password",
    "ssh_private_key_password",
    "ssh_config_file",
    "ssh_host_key",
    "ssh_proxy_enabled",
    "allow_agent",
    "host_pkey_directories",
    "compression",
    "set_keepalive",
    "local_bind_address",
    "remote_bind_address",
    "ssh_known_hosts",
    "retries_max",
    "retries_delay",
    "lock_file",
    "lock_timeout",
    "health_check_interval",
)
#: ``ssh_config`` keys holding secrets: never shown, never on a command line.
SSH_SECRET_KEYS = ("ssh_password", "ssh_private_key_password")
#: Server selection timeout of clients that go through a tunnel: long enough to ride out a
#: reconnection of the SSH connection (the tunnel process checks it every few seconds).
TUNNEL_SELECTION_TIMEOUT_S = 60.0

_HOW_TO_CONFIGURE = (
    "write ~/.config/seml/mongodb.config (`seml configure`, mode 0600), "
    f"or set the environment variable {ENV_URI}=mongodb://USER:PASSWORD@HOST:PORT/DATABASE, "
    "or hydra.launcher.db.url=mongodb://HOST:PORT/DATABASE (a password on a command line is "
    "visible to every user in `ps`)"
)


class DatabaseError(UserError):
    """A database problem explained for the user.

    The message is complete and never contains a password; callers print ``str(err)`` and
    need no traceback.
    """


class InvalidCollectionName(DatabaseError, ValueError):
    """A collection name that MongoDB (or seml-hydra) does not accept."""


@dataclass(frozen=True)
class DbSettings:
    """Where the experiments live: one MongoDB server and database.

    Instances are immutable and hashable, so :func:`connect` can cache one client per
    settings. Neither ``repr()`` nor :meth:`describe` ever show the password.

    Attributes:
        host: host name or IP of the (first) server, e.g. ``"127.0.0.1"``.
        port: TCP port of that server, e.g. ``27017``.
        database: database name that holds the collections.
        username: user to authenticate as, or ``None`` for no authentication.
        password: that user's password, or ``None``. Hidden from ``repr``.
        auth_source: database the user is defined in (SEML 0.5 uses the configured
            ``database``), or ``None`` for MongoDB's default.
        extra: further keyword arguments for ``pymongo.MongoClient`` as ``(name, value)``
            pairs, e.g. ``(("directConnection", False),)``.
        uri: the raw MongoDB URI when the settings came from one; :func:`connect` then
            connects with the URI (``host``/``port``/``username`` are informational).
        source: where the settings came from, for messages: ``"launcher db.url"``,
            ``"env SEML_MONGODB_URI"``, a config file path, or ``"embedded mongod at ..."``.
        ssh: the config file's ``ssh_config`` block as sorted ``(key, value)`` pairs (lists
            made tuples), or None. ``host``/``port`` are then MongoDB's address as seen from
            the SSH host, and :func:`connect` goes through a tunnel. Secrets are hidden from
            ``repr``.
        config_file: the config file the settings were read from, or None.
    """

    host: str
    port: int
    database: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    auth_source: str | None = None
    extra: tuple[tuple[str, Any], ...] = ()
    uri: str | None = None
    source: str = "explicit settings"
    ssh: tuple[tuple[str, Any], ...] | None = field(default=None, repr=False)
    config_file: str | None = None

    @property
    def is_embedded(self) -> bool:
        """True if these settings point at the embedded default server (step 4)."""
        return self.source.startswith("embedded mongod")

    def server(self) -> str:
        """``host:port`` (or the URI's host list), without user or password."""
        if self.uri is not None:
            return _split_uri(self.uri)["hosts"]
        return _host_port(self.host, self.port)

    def describe(self) -> str:
        """One line for humans, without the password.

        Returns:
            e.g. ``"mongodb://seml@127.0.0.1:27017/seml (from env SEML_MONGODB_URI)"``.
            Query options of a URI are left out (they may hold secrets).
        """
        user = f"{self.username}@" if self.username else ""
        scheme = _split_uri(self.uri)["scheme"] if self.uri is not None else "mongodb"
        via = f" via SSH {self.ssh_gateway()}" if self.ssh is not None else ""
        return f"{scheme}://{user}{self.server()}/{self.database}{via} (from {self.source})"

    def ssh_gateway(self) -> str:
        """``user@host:port`` of the SSH host (``""`` without ``ssh_config``)."""
        if self.ssh is None:
            return ""
        ssh = dict(self.ssh)
        host = ssh.get("ssh_address_or_host")
        port = ssh.get("ssh_port", 22)
        if isinstance(host, tuple):
            host, port = host[0], host[1]
        user = ssh.get("ssh_username")
        return f"{user + '@' if user else ''}{host}:{port}"

    def __repr__(self) -> str:
        uri = None if self.uri is None else _mask_uri(self.uri, "***")
        ssh = None
        if self.ssh is not None:
            ssh = tuple((k, "***" if k in SSH_SECRET_KEYS else v) for k, v in self.ssh)
        return (
            f"DbSettings(host={self.host!r}, port={self.port!r}, database={self.database!r}, "
            f"username={self.username!r}, auth_source={self.auth_source!r}, "
            f"extra={self.extra!r}, uri={uri!r}, source={self.source!r}, ssh={ssh!r}, "
            f"config_file={self.config_file!r})"
        )


# --------------------------------------------------------------------------- resolution


def default_config_path(env: Mapping[str, str] | None = None) -> Path:
    """Path of SEML's MongoDB config file.

    SEML 0.5 keeps it in ``typer.get_app_dir("seml")``, i.e. ``$XDG_CONFIG_HOME/seml`` or
    ``~/.config/seml`` on Linux, ``~/Library/Application Support/seml`` on macOS and
    ``%APPDATA%\\seml`` on Windows (``seml.settings.APP_DIR``). ``SEML_MONGODB_CONFIG`` in
    ``env`` overrides it.

    Args:
        env: environment to read (``os.environ`` when None).

    Returns:
        The path (which may not exist).
    """
    env = os.environ if env is None else env
    if env.get(ENV_CONFIG):
        return Path(env[ENV_CONFIG]).expanduser()
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    if sys.platform == "win32":
        base = Path(env["APPDATA"]) if env.get("APPDATA") else home
    elif sys.platform == "darwin":
        base = home / "Library" / "Application Support"
    else:
        base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
    return base / "seml" / "mongodb.config"


def resolve_db_settings(
    db_cfg: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    start_embedded: bool = True,
) -> DbSettings:
    """Decide which MongoDB server and database to use.

    Precedence (first that is set wins): ``db_cfg["url"]`` or ``db_cfg["config_file"]``,
    then ``env["SEML_MONGODB_URI"]``, then SEML's mongodb.config (``env["SEML_MONGODB_CONFIG"]``
    or the default path, see :func:`default_config_path`), then the embedded server.
    ``db_cfg["database"]`` overrides the database name of whichever source is chosen (the
    authentication database stays the source's).

    Args:
        db_cfg: the launcher's ``db`` config, a mapping with optional keys ``url``,
            ``config_file``, ``database`` (values ``None``/``""`` count as unset), or None.
        env: environment variables to read (``os.environ`` when None).
        start_embedded: in step 4, start the embedded ``mongod`` if it is not running. When
            False, an embedded server that is already running is used, else this fails.

    Returns:
        The settings; nothing is connected (use :func:`connect`).

    Raises:
        DatabaseError: unknown ``db_cfg`` keys, both ``url`` and ``config_file`` given, a
            malformed URI, a bad or unreadable config file or ``ssh_config`` block (message
            names the file and the key), or the embedded server cannot be used.
    """
    env = os.environ if env is None else env
    cfg = dict(db_cfg or {})
    unknown = sorted(set(cfg) - set(DB_CFG_KEYS))
    if unknown:
        raise DatabaseError(
            f"Unknown key(s) {', '.join(map(repr, unknown))} in hydra.launcher.db; "
            f"allowed are {', '.join(DB_CFG_KEYS)}."
        )
    url = cfg.get("url") or None
    config_file = cfg.get("config_file") or None
    database = cfg.get("database") or None
    if database is not None:
        database = _check_database_name(str(database), "hydra.launcher.db.database")
    if url is not None and config_file is not None:
        raise DatabaseError(
            "hydra.launcher.db sets both url and config_file; set only one of them."
        )

    if url is not None:
        settings = _settings_from_uri(str(url), "launcher db.url")
    elif config_file is not None:
        settings = _settings_from_config_file(Path(str(config_file)).expanduser())
    elif env.get(ENV_URI):
        settings = _settings_from_uri(env[ENV_URI], f"env {ENV_URI}")
    else:
        path = default_config_path(env)
        if env.get(ENV_CONFIG) or path.exists():
            settings = _settings_from_config_file(path)
        else:
            settings = _embedded_settings(env, start_embedded)

    if database is not None and database != settings.database:
        settings = _replace(settings, database=database)
    return settings


def _replace(settings: DbSettings, **changes: Any) -> DbSettings:
    import dataclasses

    return dataclasses.replace(settings, **changes)


def _embedded_settings(env: Mapping[str, str], start: bool) -> DbSettings:
    from seml_hydra.store import embedded as embedded_db

    data_dir = embedded_db.default_data_dir(env)
    if start:
        server = embedded_db.ensure_embedded_mongod(data_dir)
    else:
        server = embedded_db.find_running_embedded(data_dir)
        if server is None:
            raise DatabaseError(
                f"No MongoDB is configured and the embedded server (data in {data_dir}) is "
                f"not running; {_HOW_TO_CONFIGURE}."
            )
    # its credentials file (0600, SEML's format) gives user, password and authSource; jobs
    # get its path from job_db_config and read it on their node
    settings = _settings_from_config_file(server.config_file)
    return _replace(
        settings,
        host=server.host,
        port=server.port,
        extra=(("directConnection", True),),
        source=f"embedded mongod at {server.host}:{server.port} (data in {server.data_dir})",
    )


def _check_database_name(name: str, where: str) -> str:
    bad = sorted({c for c in name if c in '/\\. "$\0'})
    if not name or bad or len(name.encode()) >= 64:
        raise DatabaseError(
            f"Invalid MongoDB database name {name!r} in {where}: it must be 1-63 bytes long "
            'and must not contain any of / \\ . space " $ or a null character.'
        )
    return name


# URI handling: our own small parser so that resolving stays pure (pymongo's parser resolves
# mongodb+srv names over DNS). pymongo validates the URI again when connecting.


def _split_uri(uri: str) -> dict[str, str]:
    """Split a MongoDB URI into scheme, userinfo, hosts, path and query (raw strings)."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme not in ("mongodb", "mongodb+srv"):
        raise ValueError("it must start with mongodb:// or mongodb+srv://")
    end = len(rest)
    for ch in "/?":
        i = rest.find(ch, rest.rfind("@") + 1)
        if i != -1:
            end = min(end, i)
    netloc, tail = rest[:end], rest[end:]
    userinfo, at, hosts = netloc.rpartition("@")
    path, _, query = tail.lstrip("/").partition("?")
    return {
        "scheme": scheme,
        "userinfo": userinfo if at else "",
        "hosts": hosts,
        "path": path,
        "query": query,
    }


def _mask_uri(uri: str, replacement: str | None) -> str:
    """Return ``uri`` with its password replaced (or removed when ``replacement`` is None)."""
    try:
        parts = _split_uri(uri)
    except ValueError:
        return "<unparsable URI>"
    user, colon, _ = parts["userinfo"].partition(":")
    if colon:
        userinfo = user if replacement is None else f"{user}:{replacement}"
    else:
        userinfo = user
    netloc = f"{userinfo}@{parts['hosts']}" if parts["userinfo"] else parts["hosts"]
    out = f"{parts['scheme']}://{netloc}/{parts['path']}"
    return f"{out}?{parts['query']}" if parts["query"] else out


#: the password of a MongoDB URL anywhere in a text: ``scheme://user:`` + password + ``@``
#: (a URI's password cannot hold a raw ``@`` or ``/``: they must be percent-encoded)
#: ``mongodb://user:PASSWORD@``: the password runs to the last ``@`` before the host part (a
#: raw space or ``@`` in it is still a password to pymongo's URI parser, a raw ``/`` is not)
_URL_PASSWORD = re.compile(r"(mongodb(?:\+srv)?://[^\s:/@]*:)(?:[^\n/@]|@(?=[^\n/@]*@))*@")


def mask_credentials(text: str) -> str:
    """``text`` with the password of every MongoDB URL in it replaced by ``***``.

    Pure; for anything seml-hydra writes that may quote a URL: the launch command
    (``seml.command``), Hydra's config and overrides (``multirun.yaml``, ``.hydra/*.yaml``, the
    payload), messages. Only URL passwords are touched (``mongodb://alice:***@host/db``), never
    other text, so a short password such as ``seml`` does not mangle ``hydra/launcher=seml``.

    Args:
        text: any text, e.g. ``"app.py hydra.launcher.db.url=mongodb://a:pw@h/db"``.

    Returns:
        The masked text (``text`` itself when it holds no URL with a password).
    """
    return _URL_PASSWORD.sub(r"\1***@", text)


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _settings_from_uri(uri: str, source: str) -> DbSettings:
    from urllib.parse import parse_qs, unquote

    uri = uri.strip()
    try:
        parts = _split_uri(uri)
    except ValueError as err:
        raise DatabaseError(
            f"Invalid MongoDB URI {_mask_uri(uri, '***')!r} from {source}: {err}."
        ) from None
    masked = _mask_uri(uri, "***")
    if not parts["hosts"]:
        raise DatabaseError(f"Invalid MongoDB URI {masked!r} from {source}: no host.")
    # a replica set's URI lists several hosts (mongodb://h1:p1,h2:p2/db?replicaSet=rs): each
    # is checked; the first one is kept as host/port (informational, the URI is what connects)
    servers = []
    for entry in parts["hosts"].split(","):
        if entry.startswith("["):
            host, _, port_s = entry[1:].partition("]")
            port_s = port_s.lstrip(":")
        else:
            host, _, port_s = entry.partition(":")
        if not host:
            raise DatabaseError(
                f"Invalid MongoDB URI {masked!r} from {source}: empty host in "
                f"{parts['hosts']!r} (hosts are separated by single commas)."
            )
        try:
            port = int(port_s) if port_s else 27017
            if not 0 < port < 65536:
                raise ValueError
        except ValueError:
            raise DatabaseError(
                f"Invalid MongoDB URI {masked!r} from {source}: bad port {port_s!r}."
            ) from None
        servers.append((host, port))
    host, port = servers[0]
    user, colon, pw = parts["userinfo"].partition(":")
    username = unquote(user) if user else None
    password = unquote(pw) if colon else None
    query = parse_qs(parts["query"])
    database = unquote(parts["path"]) or DEFAULT_DATABASE
    _check_database_name(database, source)
    auth_source = query.get("authSource", [None])[-1]
    if auth_source is None and username is not None:
        # MongoDB's rule: the URI's database, else "admin".
        auth_source = unquote(parts["path"]) or "admin"
    return DbSettings(
        host=unquote(host),
        port=port,
        database=database,
        username=username,
        password=password,
        auth_source=auth_source,
        uri=uri,
        source=source,
    )


_WARNED_OPEN: set[str] = set()


def warn_if_open_to_others(path: Path) -> str | None:
    """Warn (once per file and process, one log line on ``seml_hydra.store.database``) when the
    MongoDB config file ``path``, which holds the database password, can be read or written by
    the group or other users; the warning says the fix (``chmod 600 <path>``, the mode
    ``seml configure`` writes). Returns the warning, ``None`` when the file is private."""
    import logging
    import stat

    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return None
    if not mode & 0o066:
        return None
    message = (
        f"Warning: the MongoDB config file {path} (mode {mode:04o}) can be read or changed "
        f"by other users and holds your database password: run `chmod 600 {path}`."
    )
    if str(path) not in _WARNED_OPEN:
        _WARNED_OPEN.add(str(path))
        logging.getLogger(__name__).warning(message)
    return message


def _settings_from_config_file(path: Path) -> DbSettings:
    """Read a SEML 0.5 mongodb.config (``seml.database.get_mongodb_config``).

    SEML requires ``username``, ``password``, ``port``, ``host`` and ``database``, uses
    ``database`` as the authentication database, passes ``directConnection`` (default False)
    to ``MongoClient`` and ignores every other key except ``ssh_config``.
    """
    import yaml

    hint = "Fix it, or run `seml configure` to rewrite it."
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise DatabaseError(
            f"MongoDB config file {path} does not exist ({ENV_CONFIG} or "
            "hydra.launcher.db.config_file points there)."
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise DatabaseError(f"Cannot read MongoDB config file {path}: {err}.") from None
    warn_if_open_to_others(path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise DatabaseError(
            f"MongoDB config file {path} is not valid YAML: {err}. {hint}"
        ) from None
    if not isinstance(data, dict):
        raise DatabaseError(
            f"MongoDB config file {path} must be a YAML mapping with the keys "
            f"{', '.join(SEML_REQUIRED_KEYS)}. {hint}"
        )
    for key in SEML_REQUIRED_KEYS:
        if key not in data:
            raise DatabaseError(f"MongoDB config file {path} has no key '{key}'. {hint}")
    host = data["host"]
    if not isinstance(host, str) or not host.strip():
        raise DatabaseError(
            f"MongoDB config file {path}: key 'host' must be a host name, got {host!r}. {hint}"
        )
    try:
        port = int(data["port"])
        if isinstance(data["port"], bool) or not 0 < port < 65536:
            raise ValueError
    except (TypeError, ValueError):
        raise DatabaseError(
            f"MongoDB config file {path}: key 'port' must be a port number (1-65535), "
            f"got {data['port']!r}. {hint}"
        ) from None
    if data["database"] is None or isinstance(data["database"], (dict, list)):
        raise DatabaseError(
            f"MongoDB config file {path}: key 'database' must be a database name. {hint}"
        )
    database = _check_database_name(str(data["database"]), f"{path} (key 'database')")
    for key in ("username", "password"):
        if isinstance(data[key], (dict, list)):
            raise DatabaseError(f"MongoDB config file {path}: key '{key}' must be a string. {hint}")
    username = None if data["username"] in (None, "") else str(data["username"])
    password = None if data["password"] is None else str(data["password"])
    ssh = None
    if data.get("ssh_config") is not None:
        ssh = _parse_ssh_config(data["ssh_config"], path, hint)
    # SEML 0.5 compares with the string 'True'; a YAML boolean true is accepted here as well.
    direct = data.get("directConnection", False)
    direct = direct is True or str(direct).strip().lower() == "true"
    if ssh is not None:
        direct = True  # SEML does the same: one server, behind the tunnel
    return DbSettings(
        host=host.strip(),
        port=port,
        database=database,
        username=username,
        password=password,
        auth_source=database if username is not None else None,
        extra=(("directConnection", direct),),
        source=str(path),
        ssh=ssh,
        config_file=str(path),
    )


def settings_from_config_file(path: str | Path) -> DbSettings:
    """Read one SEML ``mongodb.config`` (as step 3 of :func:`resolve_db_settings` does).

    Raises:
        DatabaseError: the file is missing, unreadable or invalid (names the file and key).
    """
    return _settings_from_config_file(Path(path).expanduser())


def _hashable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    return value


def _parse_ssh_config(block: Any, path: Path, hint: str) -> tuple[tuple[str, Any], ...]:
    """Check SEML's ``ssh_config`` block; returns it as sorted, hashable pairs."""
    where = f"MongoDB config file {path}: 'ssh_config'"
    if not isinstance(block, dict):
        raise DatabaseError(f"{where} must be a mapping (ssh_address_or_host: ..., ...). {hint}")
    unknown = sorted(str(k) for k in block if k not in SSH_KEYS)
    if unknown:
        raise DatabaseError(
            f"{where} has unknown key(s) {', '.join(map(repr, unknown))}; allowed are "
            f"{', '.join(SSH_KEYS)}. {hint}"
        )
    host = block.get("ssh_address_or_host")
    if isinstance(host, list) and len(host) == 2:
        host = host[0]
    if not isinstance(host, str) or not host.strip():
        raise DatabaseError(f"{where} needs 'ssh_address_or_host' (the SSH host). {hint}")
    for key, value in block.items():
        if isinstance(value, dict):
            raise DatabaseError(f"{where}: key {key!r} must not be a mapping. {hint}")
        if key in SSH_SECRET_KEYS and value is not None and not isinstance(value, str):
            raise DatabaseError(f"{where}: key {key!r} must be a string. {hint}")
    for key in ("ssh_port", "retries_max", "retries_delay", "lock_timeout", "set_keepalive"):
        if key in block:
            try:
                if isinstance(block[key], bool) or float(block[key]) < 0:
                    raise ValueError
            except (TypeError, ValueError):
                raise DatabaseError(
                    f"{where}: key {key!r} must be a non-negative number, got {block[key]!r}. "
                    f"{hint}"
                ) from None
    if "health_check_interval" in block:
        try:
            if float(block["health_check_interval"]) <= 0:
                raise ValueError
        except (TypeError, ValueError):
            raise DatabaseError(
                f"{where}: key 'health_check_interval' must be a positive number of seconds. {hint}"
            ) from None
    # remote_bind_address is always the configured host/port (as in SEML); lock_file is
    # replaced by per-user locks and local_bind_address by a Unix socket, both in the private
    # seml_hydra.store.tunnel.runtime_dir (a TCP port would let every local user in).
    cleaned = {
        k: _hashable(v)
        for k, v in block.items()
        if k not in ("remote_bind_address", "lock_file", "local_bind_address") and v is not None
    }
    return tuple(sorted(cleaned.items()))


# --------------------------------------------------------------------------- riding out outages

log = logging.getLogger(__name__)
_T = TypeVar("_T")


def retry_budget_s(env: Mapping[str, str] | None = None) -> float:
    """How long :func:`retrying` keeps trying by default: ``SEML_MONGODB_RETRY_S`` in ``env``
    (``os.environ`` when None), else :data:`DEFAULT_RETRY_S` (300 s).

    Returns:
        Seconds (``>= 0``; 0 means one attempt, no retry).

    Raises:
        DatabaseError: the variable is set to something else than a non-negative number.
    """
    env = os.environ if env is None else env
    raw = env.get(ENV_RETRY, "").strip()
    if not raw:
        return DEFAULT_RETRY_S
    try:
        value = float(raw)
        if not value >= 0 or value == float("inf"):
            raise ValueError
    except ValueError:
        raise DatabaseError(
            f"{ENV_RETRY}={raw!r} is not a number of seconds >= 0; set it to e.g. 300 "
            "(how long to retry while MongoDB is unreachable) or unset it."
        ) from None
    return value


def is_connection_error(error: BaseException) -> bool:
    """True for an error that says MongoDB could not be reached, not that the operation was
    wrong: pymongo's ``ConnectionFailure`` family (``AutoReconnect``,
    ``ServerSelectionTimeoutError``, ``NetworkTimeout``, ``NotPrimaryError`` during a replica set
    election, ...) and any error labelled ``RetryableWriteError`` by the server. Pure."""
    from pymongo import errors

    if isinstance(error, errors.ConnectionFailure):
        return True
    return isinstance(error, errors.PyMongoError) and error.has_error_label("RetryableWriteError")


def backoff_delay(attempt: int, cap_s: float = MAX_RETRY_DELAY_S) -> float:
    """Pause (seconds) before retry number ``attempt`` (1, 2, ...): 0.5, 1, 2, 4, 8, then
    ``cap_s``. Pure."""
    return min(cap_s, 0.5 * 2 ** max(0, attempt - 1))


def short_reason(error: BaseException) -> str:
    """pymongo's error message without its long topology description (e.g.
    ``"127.0.0.1:27017: [Errno 111] Connection refused"``). Pure."""
    return str(error).split(", Timeout:")[0].split(" (configured timeouts")[0]


def retrying(
    operation: Callable[[], _T],
    what: str,
    *,
    budget_s: float | None = None,
    on_retry: Callable[[int, BaseException, float], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> _T:
    """Run ``operation()`` and, while it fails because MongoDB is unreachable
    (:func:`is_connection_error`), run it again with a growing pause (:func:`backoff_delay`)
    until ``budget_s`` seconds have passed since the first attempt began. Every retry logs one
    warning (logger ``seml_hydra.store.database``) naming ``what`` and the reason; success after a
    failure logs that MongoDB is back.

    Only for operations that are safe to repeat: a write that reached the server before the
    connection dropped is done again, so it must be idempotent (a ``$set``, a filter that no
    longer matches once applied; not a bare ``$push`` or ``$inc``). Each attempt itself waits
    up to the client's server selection timeout (5 s for :func:`connect`'s clients).

    Args:
        operation: the database operation(s), called without arguments.
        what: what it does, for the log (e.g. ``"saving the result of experiment 3"``).
        budget_s: seconds to keep retrying; None reads :func:`retry_budget_s` (300 s); 0 runs
            ``operation`` once, without retry or log.
        on_retry: called before each pause with ``(attempt, error, seconds since the first
            attempt began)``, e.g. to show a waiting launcher's user what is going on.
        sleep, clock: ``time.sleep`` and ``time.monotonic`` (replaceable in unit tests).

    Returns:
        What ``operation()`` returned.

    Raises:
        The last connection error once the budget is spent (also logged), and any other error
        of ``operation`` at once.
    """
    budget = retry_budget_s() if budget_s is None else float(budget_s)
    if budget <= 0:
        return operation()
    started = clock()
    attempt = 0
    while True:
        try:
            result = operation()
        except Exception as error:
            if not is_connection_error(error):
                raise
            waited = clock() - started
            attempt += 1
            if waited >= budget:
                log.error(
                    "MongoDB still unreachable after %.0f s while %s (%s): giving up (%s=%g).",
                    waited,
                    what,
                    short_reason(error),
                    ENV_RETRY,
                    budget,
                )
                raise
            delay = min(backoff_delay(attempt), budget - waited)
            log.warning(
                "MongoDB unreachable while %s (%s); retry %d in %.1f s (%.0f of %g s spent, %s).",
                what,
                short_reason(error),
                attempt,
                delay,
                waited,
                budget,
                ENV_RETRY,
            )
            if on_retry is not None:
                on_retry(attempt, error, waited)
            sleep(delay)
            continue
        if attempt:
            log.warning(
                "MongoDB reachable again after %.0f s: %s succeeded.", clock() - started, what
            )
        return result


# --------------------------------------------------------------------------- connecting

_CLIENTS: dict[tuple[DbSettings, float], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _forget_clients_after_fork() -> None:
    # MongoClient is not fork-safe: a child builds its own clients.
    _CLIENTS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_clients_after_fork)


def reset_client_cache() -> None:
    """Close and forget every client cached by :func:`connect` (for tests and shutdown)."""
    with _CLIENTS_LOCK:
        clients = list(_CLIENTS.values())
        _CLIENTS.clear()
    for client in clients:
        client.close()


def _scrub(text: str, settings: DbSettings) -> str:
    from urllib.parse import quote

    text = mask_credentials(text)
    secrets = [settings.password] + [v for k, v in settings.ssh or () if k in SSH_SECRET_KEYS]
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***").replace(quote(secret, safe=""), "***")
    return text


def skip_exit_join() -> None:
    """Let the interpreter exit without waiting for pymongo's monitor threads.

    pymongo (>= 4.9) registers an atexit hook that joins its monitor threads, which sleep in
    0.5 s steps: a process that used MongoDB idles up to ~0.5 s at exit. Call this once every
    write is done (the ``seml`` command when it returns, a job when its experiments are
    recorded): the hook is dropped and the daemon monitor threads end with the interpreter.
    Without pymongo imported, or with other pymongo internals, it does nothing.
    """
    hook = getattr(sys.modules.get("pymongo.synchronous.monitor"), "_shutdown_resources", None)
    if hook is not None:
        import atexit

        atexit.unregister(hook)


def connect(
    settings: DbSettings, timeout_s: float = 5.0, *, retry: bool = False
) -> pymongo.database.Database:
    """Connect to the database of ``settings`` and check that the server answers.

    One ``MongoClient`` is cached per ``(settings, timeout_s)`` and process (forgotten in a
    forked child), so repeated calls are cheap: only the first one pings.

    Args:
        settings: from :func:`resolve_db_settings`.
        timeout_s: seconds to wait for the server (``serverSelectionTimeoutMS`` and
            ``connectTimeoutMS``) in each attempt.
        retry: keep pinging an unreachable server through :func:`retrying` (jobs: an outage at
            their start is ridden out) instead of failing after ``timeout_s``.

    Returns:
        The ``pymongo`` database ``settings.database``.

    Raises:
        DatabaseError: the server is unreachable within about ``timeout_s`` (the message
            names the server and how to configure another one), authentication failed
            (``OperationFailure`` code 18: names user and database, never the password),
            or the settings are invalid for pymongo.
    """
    key = (settings, float(timeout_s))
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
    if client is not None:
        return client[settings.database]

    import pymongo
    from pymongo import errors

    ms = max(1, int(timeout_s * 1000))
    options: dict[str, Any] = {
        "serverSelectionTimeoutMS": ms,
        "connectTimeoutMS": ms,
        "appname": "seml-hydra",
    }
    options.update(dict(settings.extra))
    host, port = settings.host, settings.port
    if settings.ssh is not None:
        from urllib.parse import quote_plus

        from seml_hydra.store import tunnel

        try:  # the tunnel's Unix socket: pymongo takes its percent-encoded path as the host
            host = quote_plus(
                tunnel.ensure_tunnel(dict(settings.ssh), (settings.host, settings.port)), safe=""
            )
        except tunnel.TunnelError as err:
            raise DatabaseError(
                _scrub(f"{err} Settings from {settings.source}.", settings)
            ) from None
        options["directConnection"] = True
        options["serverSelectionTimeoutMS"] = max(ms, int(TUNNEL_SELECTION_TIMEOUT_S * 1000))
    try:
        if settings.uri is not None:
            client = pymongo.MongoClient(settings.uri, **options)
        else:
            if settings.username is not None:
                options.update(username=settings.username, password=settings.password or "")
                if settings.auth_source is not None:
                    options["authSource"] = settings.auth_source
            client = pymongo.MongoClient(host=host, port=port, **options)
    except (errors.ConfigurationError, TypeError, ValueError) as err:
        raise DatabaseError(
            _scrub(f"Invalid MongoDB settings {settings.describe()}: {err}", settings)
        ) from None

    budget = retry_budget_s() if retry else 0.0
    try:
        retrying(
            lambda: client.admin.command("ping"),
            f"connecting to {settings.server()}",
            budget_s=budget,
        )
    except errors.OperationFailure as err:
        client.close()
        if err.code == 18:
            raise DatabaseError(
                f"MongoDB authentication failed for user {settings.username!r} on database "
                f"{settings.auth_source or 'admin'!r} at {settings.server()} (settings from "
                f"{settings.source}). Check the user name and password there."
            ) from None
        raise DatabaseError(
            _scrub(f"MongoDB at {settings.describe()} refused the connection: {err}", settings)
        ) from None
    except errors.ConnectionFailure as err:  # includes ServerSelectionTimeoutError
        client.close()
        raise DatabaseError(
            _scrub(
                f"Cannot reach MongoDB at {settings.server()} (settings from {settings.source}) "
                f"within {max(timeout_s, budget):g} s: {short_reason(err)}. Start mongod "
                "there, or point seml-hydra at "
                f"a reachable server: {_HOW_TO_CONFIGURE}.",
                settings,
            )
        ) from None
    except errors.PyMongoError as err:
        client.close()
        raise DatabaseError(
            _scrub(f"MongoDB error at {settings.describe()}: {err}", settings)
        ) from None

    with _CLIENTS_LOCK:
        cached = _CLIENTS.setdefault(key, client)
    if cached is not client:  # another thread won the race
        client.close()
    return cached[settings.database]


# --------------------------------------------------------------------------- collections


#: collections that hold something else than experiments: our id counters, Sacred's shared
#: metrics collection (where runs before per-collection metrics wrote), GridFS's bucket
RESERVED_COLLECTIONS = frozenset({COUNTERS_COLLECTION, "metrics", "fs"})
#: the metrics of experiments collection ``C`` are in ``METRICS_PREFIX + C``
#: (:func:`metrics_collection_name`); no experiments collection may start with it
METRICS_PREFIX = "seml_hydra_metrics."


def metrics_collection_name(collection: str) -> str:
    """The metrics collection of experiments collection ``collection``:
    ``"seml_hydra_metrics.<collection>"`` (documents ``{run_id, name, steps, values,
    timestamps}``, Sacred's format; ``run_id`` is the experiment's ``_id``). It is Omniboard's
    ``metricsCollectionName`` for runs collection ``collection``. Pure."""
    return METRICS_PREFIX + collection


#: the ``seml`` command's own first words: a collection so named could not be reached by
#: ``seml NAME COMMAND``
CLI_WORDS = frozenset({"list", "queue", "drop", "configure"})


def validate_collection_name(name: str) -> str:
    """Check a collection name before it reaches MongoDB.

    Rules (MongoDB's naming restrictions, plus a length cap): a non-empty string of at most
    100 characters, without ``$`` or a control character (below 0x20: null, newline, carriage
    return, tab...; or 0x7f: the name reaches the sbatch script as ``--comment`` and
    ``--job-name``, where a newline would end the ``#SBATCH`` block and inject a shell line),
    not starting with ``system.``
    (reserved), without a leading or trailing dot, none of the collections the database
    already uses for other things (:data:`RESERVED_COLLECTIONS`, GridFS's ``fs.*``, the metrics
    collections ``seml_hydra_metrics.*``), and not a
    first word of the ``seml`` command (:data:`CLI_WORDS`, or starting with ``-``).

    Args:
        name: the collection name, e.g. ``"my_sweep"``.

    Returns:
        ``name`` unchanged.

    Raises:
        InvalidCollectionName: (a ``DatabaseError`` and ``ValueError``) saying which rule
            the name breaks.
    """

    def bad(why: str) -> InvalidCollectionName:
        return InvalidCollectionName(f"Invalid collection name {name!r}: {why}.")

    if not isinstance(name, str):
        raise InvalidCollectionName(
            f"Invalid collection name {name!r}: it must be a string, not {type(name).__name__}."
        )
    if not name:
        raise bad("it is empty")
    if len(name) > 100:
        raise bad(f"it has {len(name)} characters, at most 100 are allowed")
    if "$" in name:
        raise bad("it must not contain '$'")
    control = next((c for c in name if ord(c) < 0x20 or ord(c) == 0x7F), None)
    if control is not None:
        raise bad(
            f"it contains the control character {control!r}; use printable characters only "
            "(the name goes into the Slurm job script)"
        )
    if name.startswith("system."):
        raise bad("names starting with 'system.' are reserved by MongoDB")
    if name.startswith(".") or name.endswith("."):
        raise bad("it must not start or end with '.'")
    if name in CLI_WORDS or name.startswith("-"):
        raise bad(
            f"`seml {name} ...` is the seml command's own, so the collection could not be "
            "managed; choose another name (hydra.launcher.collection=...)"
        )
    if name in RESERVED_COLLECTIONS or name.startswith(("fs.", METRICS_PREFIX)):
        raise bad(
            "it is used by seml-hydra, GridFS or Sacred (seml_hydra_counters, fs.*, metrics, "
            f"{METRICS_PREFIX}*); choose another name (hydra.launcher.collection=...)"
        )
    return name


def get_collection(name: str, settings: DbSettings) -> pymongo.collection.Collection:
    """The collection ``name`` in the database of ``settings``.

    Args:
        name: collection name, checked with :func:`validate_collection_name` before any
            connection is made.
        settings: from :func:`resolve_db_settings`.

    Returns:
        A ``pymongo`` collection (from the cached client of :func:`connect`).

    Raises:
        InvalidCollectionName: bad ``name``.
        DatabaseError: as :func:`connect`.
    """
    validate_collection_name(name)
    return connect(settings)[name]


# --------------------------------------------------------------------------- ids


def next_ids(
    db: pymongo.database.Database,
    counter_name: str,
    n: int,
    floor: Callable[[], int | None] | None = None,
) -> range:
    """Atomically reserve ``n`` new integer ids from a counter.

    The counter is the document ``{_id: counter_name, value: <last id handed out>}`` in the
    collection ``seml_hydra_counters`` of ``db``. Concurrent callers (threads, processes,
    hosts) always get disjoint ranges because every reservation is one ``$inc`` that returns
    the new value (``find_one_and_update`` with ``ReturnDocument.AFTER``).

    When the counter does not exist yet, ``floor()`` is called once (e.g. the largest ``_id``
    SEML already wrote to the collection, since SEML 0.5 numbers experiments ``max + 1``
    starting at 1) and the counter is created with ``$max: {value: floor()}`` before the
    ``$inc``. ``$max`` never lowers the value, so two processes creating the counter at once
    still never get the same ids. Without ``floor`` a new counter starts at 0 (first id 1).

    Args:
        db: the database (from :func:`connect`).
        counter_name: counter key, e.g. the experiment collection's name.
        n: number of ids to reserve (``>= 0``; 0 returns an empty range).
        floor: called only when the counter does not exist; returns the largest id already
            in use (``None`` counts as 0).

    Returns:
        ``range(first, first + n)`` of ids nobody else got.

    Raises:
        ValueError: ``n`` is negative or ``floor()`` returned a non-integer.
        pymongo.errors.PyMongoError: the database operation failed.
    """
    from pymongo import ReturnDocument
    from pymongo.errors import DuplicateKeyError

    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"next_ids: n must be a non-negative integer, got {n!r}")
    counters = db[COUNTERS_COLLECTION]
    query = {"_id": counter_name}
    inc = {"$inc": {"value": n}}

    doc = None
    if floor is not None:
        doc = counters.find_one_and_update(query, inc, return_document=ReturnDocument.AFTER)
        if doc is None:  # the counter does not exist yet: create it at the floor
            start = floor()
            start = 0 if start is None else start
            if isinstance(start, bool) or not isinstance(start, int):
                raise ValueError(f"next_ids: floor() must return an int, got {start!r}")
            for attempt in range(2):
                try:
                    counters.update_one(query, {"$max": {"value": start}}, upsert=True)
                    break
                except DuplicateKeyError:  # created concurrently; $max again on the doc
                    if attempt:
                        raise
    if doc is None:
        for attempt in range(2):
            try:
                doc = counters.find_one_and_update(
                    query, inc, upsert=True, return_document=ReturnDocument.AFTER
                )
                break
            except DuplicateKeyError:  # concurrent upsert of a new counter; retry once
                if attempt:
                    raise
    assert doc is not None
    last = int(doc["value"])
    return range(last - n + 1, last + 1)


def _url_has_password(url: Any) -> bool:
    """A MongoDB URL with a password part (also ``***``, a masked one)."""
    try:
        return isinstance(url, str) and ":" in _split_uri(url)["userinfo"]
    except ValueError:
        return False


def job_db_config(
    settings: DbSettings, launcher_db: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """What jobs resolve the database from on their node (issue: "jobs reach the database the
    way the launcher did"), never holding a secret (it is pickled into the submitit folder):

    - the launch's own ``db`` config (``url``, ``config_file``, ``database``) when it had one,
      except a ``url`` with a password (also a masked one, as ``seml start`` reads it back from
      the stored Hydra config): the password reaches the jobs through their environment
      instead (:func:`job_db_environment`);
    - the config file the settings came from (its path, so a node reads the same file even
      when its ``XDG_CONFIG_HOME``/``HOME`` differ; with an ``ssh_config`` block the node then
      opens its own tunnel);
      this includes the embedded server's 0600 credentials file (jobs cannot start it; they
      read its current port, user and password there);
    - else ``None`` (jobs read ``SEML_MONGODB_URI``: inherited, or set by
      :func:`job_db_environment`).

    Args:
        settings: the settings this process connected with (they may hold the password).
        launcher_db: the launch's ``hydra.launcher.db`` mapping, or None.

    Returns:
        A ``db`` mapping for :func:`resolve_db_settings` on the node, or None.
    """
    return _job_db(settings, launcher_db)[0]


def job_db_environment(
    settings: DbSettings, launcher_db: Mapping[str, Any] | None
) -> dict[str, str]:
    """Environment variables the jobs need besides :func:`job_db_config`: ``SEML_MONGODB_URI``
    with the full URI (password included) when the settings came from a URI with a password
    and the jobs get no URL or config file. The submission sets them in the environment of
    ``sbatch`` / the local job process only (readable by their owner alone, in
    ``/proc/<pid>/environ``; Slurm keeps a job's environment in its private state), never in a
    file, a pickle or on a command line.

    Returns:
        ``{"SEML_MONGODB_URI": uri}`` or ``{}``.
    """
    return _job_db(settings, launcher_db)[1]


def _job_db(
    settings: DbSettings, launcher_db: Mapping[str, Any] | None
) -> tuple[dict[str, Any] | None, dict[str, str]]:
    cfg = {k: v for k, v in dict(launcher_db or {}).items() if v}
    if _url_has_password(cfg.get("url")):
        del cfg["url"]  # the settings of this process hold it (or the seml command's own)
    env: dict[str, str] = {}
    if not cfg.get("url") and not cfg.get("config_file"):
        if settings.config_file is not None:
            cfg["config_file"] = settings.config_file
        elif settings.uri is not None and settings.password is not None:
            env[ENV_URI] = settings.uri
    return cfg or None, env
