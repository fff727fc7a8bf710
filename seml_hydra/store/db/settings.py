"""Which MongoDB server and database to use: :class:`DbSettings` and how they are resolved.

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
   :func:`seml_hydra.store.db.client.connect` opens transparently (:mod:`seml_hydra.store.server.tunnel`);
4. the embedded default: a local ``mongod`` from the ``local-db`` extra, started on demand
   (see :mod:`seml_hydra.store.server.embedded`).

Resolving connects to nothing (:mod:`seml_hydra.store.db.client` does). ``yaml`` is imported
inside the function that reads a config file, so that ``seml --help`` stays fast.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict
from urllib.parse import parse_qs, unquote

from seml_hydra.store.errors import DatabaseError
from seml_hydra.store.masking import SSH_SECRET_KEYS, host_port, mask_uri, scrub, split_uri
from seml_hydra.store.server import embedded

__all__ = [
    "DEFAULT_DATABASE",
    "DbSettings",
    "default_config_path",
    "resolve_db_settings",
    "settings_from_config_file",
    "warn_if_open_to_others",
]

#: Database used when the chosen source names none (URI without a path, embedded server).
DEFAULT_DATABASE = "seml"
#: Environment variable holding a MongoDB URI (precedence step 2).
ENV_URI = "SEML_MONGODB_URI"
#: Environment variable overriding the path of SEML's mongodb.config (precedence step 3).
ENV_CONFIG = "SEML_MONGODB_CONFIG"
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
#: How to point seml-hydra at a server, for messages (ends without a full stop).
HOW_TO_CONFIGURE = (
    "write ~/.config/seml/mongodb.config (`seml configure`, mode 0600), "
    f"or set the environment variable {ENV_URI}=mongodb://USER:PASSWORD@HOST:PORT/DATABASE, "
    "or hydra.launcher.db.url=mongodb://HOST:PORT/DATABASE (a password on a command line is "
    "visible to every user in `ps`)"
)


@dataclass(frozen=True)
class DbSettings:
    """Where the experiments live: one MongoDB server and database.

    Instances are immutable and hashable, so :func:`~seml_hydra.store.db.client.connect` can
    cache one client per settings. Neither ``repr()`` nor :meth:`describe` ever show the password.

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
        uri: the raw MongoDB URI when the settings came from one;
            :func:`~seml_hydra.store.db.client.connect` then connects with the URI
            (``host``/``port``/``username`` are informational).
        source: where the settings came from, for messages: ``"launcher db.url"``,
            ``"env SEML_MONGODB_URI"``, a config file path, or ``"embedded mongod at ..."``.
        ssh: the config file's ``ssh_config`` block as sorted ``(key, value)`` pairs (lists
            made tuples), or None. ``host``/``port`` are then MongoDB's address as seen from
            the SSH host, and :func:`~seml_hydra.store.db.client.connect` goes through a
            tunnel. Secrets are hidden from ``repr``.
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
            return split_uri(self.uri)["hosts"]
        return host_port(self.host, self.port)

    def describe(self) -> str:
        """One line for humans, without the password.

        Returns:
            e.g. ``"mongodb://seml@127.0.0.1:27017/seml (from env SEML_MONGODB_URI)"``.
            Query options of a URI are left out (they may hold secrets).
        """
        user = f"{self.username}@" if self.username else ""
        scheme = split_uri(self.uri)["scheme"] if self.uri is not None else "mongodb"
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
        uri = None if self.uri is None else mask_uri(self.uri, "***")
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
        The settings; nothing is connected (use :func:`~seml_hydra.store.db.client.connect`).

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
    return dataclasses.replace(settings, **changes)


def _embedded_settings(env: Mapping[str, str], start: bool) -> DbSettings:
    data_dir = embedded.default_data_dir(env)
    server: embedded.EmbeddedServer | None
    if start:
        server = embedded.ensure_embedded_mongod(data_dir)
    else:
        server = embedded.find_running_embedded(data_dir)
        if server is None:
            raise DatabaseError(
                f"No MongoDB is configured and the embedded server (data in {data_dir}) is "
                f"not running; {HOW_TO_CONFIGURE}."
            )
    # its credentials file (0600, SEML's format) gives user, password and authSource; jobs
    # get its path from job_db_config and read it on their node
    settings = _settings_from_config_file(server.config_file)
    return _replace(
        settings,
        host=server.host,
        port=server.port,
        extra=(("directConnection", True),),
        source=f"embedded mongod at {server.host}:{server.port}, data in {server.data_dir}",
    )


def _check_database_name(name: str, where: str) -> str:
    bad = sorted({c for c in name if c in '/\\. "$\0'})
    if not name or bad or len(name.encode()) >= 64:
        raise DatabaseError(
            f"Invalid MongoDB database name {name!r} in {where}: it must be 1-63 bytes long "
            'and must not contain any of / \\ . space " $ or a null character.'
        )
    return name


def _settings_from_uri(uri: str, source: str) -> DbSettings:
    uri = uri.strip()
    try:
        parts = split_uri(uri)
    except ValueError as err:
        raise DatabaseError(
            f"Invalid MongoDB URI {mask_uri(uri, '***')!r} from {source}: {err}."
        ) from None
    masked = mask_uri(uri, "***")
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
    return DbSettings(
        host=unquote(host), port=port, uri=uri, source=source, **_login(parts, source)
    )


class _Login(TypedDict):
    """The login fields of :class:`DbSettings` a URI gives (:func:`_login`)."""

    database: str
    username: str | None
    password: str | None
    auth_source: str | None


def _login(parts: Mapping[str, str], source: str) -> _Login:
    """The ``database``, ``username``, ``password`` and ``auth_source`` fields of a URI split by
    ``split_uri`` (pure): the path's database (else :data:`DEFAULT_DATABASE`; an invalid name
    raises ``DatabaseError`` naming ``source``), the userinfo's user and password
    (percent-decoded; None when absent), and the ``authSource`` query option, else, with a user,
    MongoDB's rule: the URI's database, else ``"admin"``."""
    user, colon, pw = parts["userinfo"].partition(":")
    username = unquote(user) if user else None
    path = unquote(parts["path"])
    auth_source: str | None = parse_qs(parts["query"]).get("authSource", [None])[-1]
    if auth_source is None and username is not None:
        auth_source = path or "admin"
    return {
        "database": _check_database_name(path or DEFAULT_DATABASE, source),
        "username": username,
        "password": unquote(pw) if colon else None,
        "auth_source": auth_source,
    }


_WARNED_OPEN: set[str] = set()


def warn_if_open_to_others(path: Path) -> str | None:
    """Warn (once per file and process, one log line on ``seml_hydra.store.db.settings``) when the
    MongoDB config file ``path``, which holds the database password, can be read or written by
    the group or other users; the warning says the fix (``chmod 600 <path>``, the mode
    ``seml configure`` writes). Returns the warning, ``None`` when the file is private."""
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
            # YAML's error quotes the faulty line, which may be the password's
            f"MongoDB config file {path} is not valid YAML: {scrub(str(err))}. {hint}"
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
    # seml_hydra.store.server.tunnel.runtime_dir (a TCP port would let every local user in).
    cleaned = {
        k: _hashable(v)
        for k, v in block.items()
        if k not in ("remote_bind_address", "lock_file", "local_bind_address") and v is not None
    }
    return tuple(sorted(cleaned.items()))
