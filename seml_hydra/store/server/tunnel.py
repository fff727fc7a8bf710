"""SSH tunnels to MongoDB (the ``ssh_config`` block of SEML's ``mongodb.config``).

:func:`ensure_tunnel` returns the local address of a tunnel for an SSH configuration and a
MongoDB address (as seen from the SSH host). There is at most one tunnel per distinct
configuration, per machine user and host: processes of one user on one machine share it.

The tunnel runs in its own process, ``python -m seml_hydra.store.server.tunnel_worker`` (a small module of
ours: it never imports the user's script), started with the SSH options on a pipe (never on the
command line). It checks the SSH host's key against ``known_hosts`` before authenticating, and
its SSH connection every few seconds, reconnecting under a listening socket that stays open, so
the MongoDB clients using it keep working. Its local end is a Unix socket in the private runtime
directory (not a TCP port on 127.0.0.1, which every local user could use to reach MongoDB
through your SSH session).

Files live in a per-user runtime directory (:func:`runtime_dir`, mode 0700, checked to be ours),
per tunnel ``<key>-<hostname>``:

- ``.spawn.lock``: serialises starting a tunnel (``filelock``);
- ``.alive.lock``: an exclusive ``flock`` the tunnel process holds for its whole life; a free
  lock means no tunnel runs (whatever a stale state file says);
- ``.json``: the state (pid, socket path);
- ``.sock``: the tunnel's local end, a Unix socket (no access for group or others);
- ``.log``: the tunnel process's log (never holds a password).

The tunnel process ends when the process that started it ends. Every other process using the
tunnel runs a small keeper thread that notices this within about a second and starts a new
tunnel on the same socket, so long-running jobs survive the end of the launcher that opened it.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from seml_hydra.core.errors import UserError
from seml_hydra.store.masking import SSH_SECRET_KEYS

__all__ = [
    "TunnelError",
    "close_tunnels",
    "ensure_tunnel",
    "runtime_dir",
    "runtime_dir_candidates",
    "tunnel_paths",
]

#: environment variable overriding the runtime directory (tests, unusual systems)
ENV_RUNTIME_DIR = "SEML_HYDRA_RUNTIME_DIR"
#: seconds between two checks of the keeper thread
KEEPER_INTERVAL_S = 1.0


class TunnelError(UserError):
    """The tunnel cannot be opened; the message is for the user and holds no secret."""


# --------------------------------------------------------------------------- paths


class RuntimeDirError(TunnelError):
    """The per-user runtime directory cannot be created or is not private to this user."""


def private_dir_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` is not a private directory of this user, by ``lstat`` (a symlink is not
    followed): ``None`` when it is a real directory owned by the current uid with no group or
    other permission bits (mode ``0700`` or stricter), else a short reason such as
    ``"belongs to uid 1001"``. A directory passing this check is one nobody else can plant a
    file in or rename (apart from root)."""
    import stat

    try:
        st = os.lstat(path)
    except OSError as err:
        return f"cannot be inspected ({err.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != os.getuid():
        return f"belongs to uid {st.st_uid}, not to this user (uid {os.getuid()})"
    if st.st_mode & 0o077:
        return f"is open to others (mode {stat.S_IMODE(st.st_mode):04o}, 0700 expected)"
    return None


#: why a candidate directory was passed over: no tunnel socket path would fit in it
TOO_LONG = "is too long a path for the tunnel's Unix socket"
#: warnings already given by this process: one line per squatted path
_WARNED: set[str] = set()
#: the fresh directory of this process, by candidate list, when every shared one was taken
_PROCESS_DIRS: dict[tuple[str, ...], Path] = {}


def runtime_dir_candidates(env: Mapping[str, str] | None = None) -> list[Path]:
    """The per-user directories :func:`runtime_dir` tries, in order (no I/O but ``stat`` of
    ``$XDG_RUNTIME_DIR``): ``$XDG_RUNTIME_DIR/seml-hydra`` when that directory exists and
    belongs to this user, ``<tmp>/seml-hydra-<uid>`` (``tempfile.gettempdir()``, i.e.
    ``$TMPDIR``), then ``~/.cache/seml-hydra/run/<hostname>`` (``$HOME``, else the passwd
    entry's home: a home directory is its user's own, and per host because it may be shared)."""
    env = os.environ if env is None else env
    uid = os.getuid()
    found = []
    xdg = env.get("XDG_RUNTIME_DIR")
    if xdg:
        try:
            st = os.stat(xdg)
            if st.st_uid == uid and os.access(xdg, os.W_OK):
                found.append(Path(xdg) / "seml-hydra")
        except OSError:  # set by the login node, absent on this one
            pass
    found.append(Path(tempfile.gettempdir()) / f"seml-hydra-{uid}")
    home = env.get("HOME")
    if not home:
        import pwd

        try:
            home = pwd.getpwuid(uid).pw_dir
        except KeyError:
            home = None
    if home:
        found.append(Path(home) / ".cache" / "seml-hydra" / "run" / socket.gethostname())
    return found


def _private(path: Path) -> str | None:
    """Create ``path`` (mode 0700, missing parents too) if needed; ``None`` when it is a
    private directory of this user (:func:`private_dir_problem`), else why not."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        if os.path.lexists(path):  # a file or a dangling symlink someone put there
            return private_dir_problem(path) or f"cannot be used ({err.strerror or err})"
        return f"cannot be created ({err.strerror or err})"
    return private_dir_problem(path)


def _remove_process_dir(path: Path, pid: int) -> None:
    """At exit: remove this process's own fallback directory (not in a forked child)."""
    import shutil

    if os.getpid() == pid:
        shutil.rmtree(path, ignore_errors=True)


def runtime_dir(env: Mapping[str, str] | None = None, max_path_bytes: int | None = None) -> Path:
    """The per-user directory of the tunnels' locks, state and logs, and of the jobs' code
    snapshots (``seml_hydra.store.snapshot.node.materialized``); created mode 0700.

    ``$SEML_HYDRA_RUNTIME_DIR`` when set (refused when not private: it was asked for). Else
    the first of :func:`runtime_dir_candidates` that is (or can be made) a private directory
    of this user (:func:`private_dir_problem`: ours, mode 0700, not a symlink), so that one
    ``mkdir`` by another user in ``/tmp`` blocks nothing; else, as a last resort, a fresh
    ``tempfile.mkdtemp`` directory of this process (kept for its life, so its tunnels and
    snapshots are not shared with other processes). A candidate that is not private gives
    one warning line (``logging``) naming it and what to do, as does falling back to the
    process's own directory. Nothing is ever used from a directory that fails the check.

    Args:
        env: the environment (default ``os.environ``).
        max_path_bytes: pass over candidates whose path is longer (bytes): the tunnel's Unix
            socket must fit in :data:`MAX_SOCKET_PATH` (a long ``$HOME``). Not applied to
            ``$SEML_HYDRA_RUNTIME_DIR``.

    Returns:
        The directory's path.

    Raises:
        RuntimeDirError: (a :class:`TunnelError`) ``$SEML_HYDRA_RUNTIME_DIR`` cannot be created
            or is not private, or no private directory can be made at all.
    """
    env = os.environ if env is None else env
    if env.get(ENV_RUNTIME_DIR):
        path = Path(env[ENV_RUNTIME_DIR]).expanduser().absolute()
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as err:
            raise RuntimeDirError(
                f"cannot create the private runtime directory {path}: {err}"
            ) from None
        problem = private_dir_problem(path)
        if problem:
            raise RuntimeDirError(
                f"the runtime directory {path} is not a private directory of this user: it "
                f"{problem}. Remove it, or set {ENV_RUNTIME_DIR} to another directory."
            )
        return path
    candidates = runtime_dir_candidates(env)
    refused: list[tuple[Path, str]] = []
    for path in candidates:
        if max_path_bytes is not None and len(os.fsencode(path)) > max_path_bytes:
            refused.append((path, TOO_LONG))
            continue
        problem = _private(path)
        if problem is None:
            _warn_refused(refused, f"using {path} instead")
            return path
        refused.append((path, problem))
    key = tuple(str(p) for p in candidates)
    known = _PROCESS_DIRS.get(key)
    if known is not None and not private_dir_problem(known):
        path = known
    else:
        try:
            path = Path(tempfile.mkdtemp(prefix=f"seml-hydra-{os.getuid()}-"))
        except OSError as err:
            raise RuntimeDirError(
                "no private runtime directory can be made: "
                + "; ".join(f"{p} {why}" for p, why in refused)
                + f"; mkdtemp failed: {err}. Set {ENV_RUNTIME_DIR} to a private directory."
            ) from None
        _PROCESS_DIRS[key] = path
        import atexit

        atexit.register(_remove_process_dir, path, os.getpid())
    _warn_refused(
        refused,
        f"using {path}, private to this process (its tunnels and code snapshots are not "
        "shared with other processes)",
    )
    return path


def _warn_refused(refused: list[tuple[Path, str]], using: str) -> None:
    """One warning line per process for the candidates passed over because they are not
    private (squatted), or for falling back to a directory of the process; an absent or too
    long candidate alone is not worth one when a shared directory is used."""
    import logging

    notable = [
        (p, why)
        for p, why in refused
        if not why.startswith("cannot be created") and why != TOO_LONG
    ]
    process = "private to this process" in using
    if notable:
        text = "; ".join(f"{p} {why}" for p, why in (refused if process else notable))
        message = (
            f"seml-hydra: the runtime directory {text}, so it is not used (nothing is read "
            f"from it): {using}. Ask the administrator to remove it (or remove it yourself if "
            f"it is yours), or set {ENV_RUNTIME_DIR} to a private directory."
        )
    elif process:
        text = "; ".join(f"{p} {why}" for p, why in refused)
        message = (
            f"seml-hydra: no shared runtime directory can be used ({text}): {using}. Set "
            f"{ENV_RUNTIME_DIR} to a private directory to share them."
        )
    else:
        return
    if message not in _WARNED:
        _WARNED.add(message)
        logging.getLogger(__name__).warning("%s", message)


def tunnel_key(ssh: Mapping[str, Any], remote: tuple[str, int]) -> str:
    """A short name for a tunnel: a hash of its configuration without the secrets."""
    public = {k: v for k, v in ssh.items() if k not in SSH_SECRET_KEYS}
    text = json.dumps([public, list(remote)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


#: the longest path of a Unix socket (``sun_path`` holds 108 bytes on Linux, with the NUL)
MAX_SOCKET_PATH = 107


def tunnel_paths(key: str, env: Mapping[str, str] | None = None) -> dict[str, Path]:
    """The files of tunnel ``key`` on this host: spawn/alive locks, state, log and socket.

    The socket is ``tunnel-<key>-<hostname>.sock``, or ``tunnel-<key>-<hash of hostname>.sock``
    when that path would be too long for a Unix socket; a runtime directory candidate too long
    for either is passed over (:func:`runtime_dir`).

    Raises:
        TunnelError: the runtime directory is not safe, or too long for a socket path.
    """
    host = socket.gethostname()
    names = [f"tunnel-{key}-{host}.sock"]
    names.append(f"tunnel-{key}-{hashlib.sha256(host.encode()).hexdigest()[:8]}.sock")
    room = MAX_SOCKET_PATH - 1 - min(len(os.fsencode(name)) for name in names)
    base = runtime_dir(env, max_path_bytes=room) / f"tunnel-{key}-{host}"
    sock = base.with_name(names[0])
    if len(os.fsencode(sock)) > MAX_SOCKET_PATH:
        sock = base.with_name(names[1])
    if len(os.fsencode(sock)) > MAX_SOCKET_PATH:
        raise TunnelError(
            f"the tunnel's socket path {sock} is longer than {MAX_SOCKET_PATH} bytes (the limit "
            f"of a Unix socket); set {ENV_RUNTIME_DIR} to a shorter private directory."
        )
    return {
        "spawn": base.with_name(base.name + ".spawn.lock"),
        "alive": base.with_name(base.name + ".alive.lock"),
        "state": base.with_name(base.name + ".json"),
        "log": base.with_name(base.name + ".log"),
        "socket": sock,
    }


def _read_state(path: Path) -> dict[str, Any] | None:
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def _alive_lock_held(path: Path) -> bool:
    """True when a tunnel process holds the ``alive`` lock (it runs)."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also releases our lock, if we got it
    return False


# --------------------------------------------------------------------------- spawning


def _spawn(
    ssh: Mapping[str, Any],
    remote: tuple[str, int],
    key: str,
    paths: dict[str, Path],
) -> tuple[subprocess.Popen[bytes], str]:
    """Start the tunnel process and wait for its answer; returns (process, socket path)."""
    log_path = paths["log"]
    try:  # keep the log small: start afresh when it grew past 1 MB
        if log_path.stat().st_size > 1_000_000:
            log_path.unlink()
    except OSError:
        pass
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    cmd = [
        sys.executable,
        "-m",
        "seml_hydra.store.server.tunnel_worker",
        "--state",
        str(paths["state"]),
        "--lock",
        str(paths["alive"]),
        "--parent",
        str(os.getpid()),
        "--socket",
        str(paths["socket"]),
        "--key",
        key,
    ]
    # cwd: the private runtime directory, so `python -m` puts no user directory (where a
    # module could shadow ours) first on sys.path.
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log_fd,
            cwd=str(paths["state"].parent),
            close_fds=True,
            start_new_session=True,  # the terminal's Ctrl-C is for the parent, not the tunnel
        )
    finally:
        os.close(log_fd)
    assert proc.stdin is not None and proc.stdout is not None
    payload = {"ssh": dict(ssh), "remote": list(remote)}
    try:
        proc.stdin.write(json.dumps(payload, default=str).encode() + b"\n")
        proc.stdin.flush()  # stdin stays open: its EOF tells the tunnel that we ended
    except OSError:
        pass
    retries = int(ssh.get("retries_max", 3))
    delay = float(ssh.get("retries_delay", 1.0))
    timeout = 30.0 + sum(delay * 2**i + 1 for i in range(retries))
    line = _read_line(proc, timeout)
    try:
        answer = json.loads(line) if line else None
    except ValueError:
        answer = None
    if not answer or not answer.get("ok"):
        _end(proc)
        why = (answer or {}).get("error") or (
            f"the tunnel process gave no answer within {timeout:.0f} s"
        )
        raise TunnelError(f"SSH tunnel to MongoDB failed: {why} (log: {log_path}).")
    return proc, str(answer["socket"])


def _end(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """End a tunnel process (one that failed or gave no answer, or a keeper's at
    :func:`close_tunnels`): SIGTERM, and SIGKILL when it is still there after ``grace_s``
    seconds, so that none is left holding the tunnel's lock."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        _warn(f"seml-hydra: the SSH tunnel process {proc.pid} ignored SIGTERM; killing it")
        proc.kill()
        proc.wait()
    if proc.stdin is not None:
        try:
            proc.stdin.close()
        except OSError:
            pass


def _read_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    import selectors

    assert proc.stdout is not None
    buf = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                break
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
    proc.stdout.close()
    return buf.decode(errors="replace").split("\n")[0]


# --------------------------------------------------------------------------- keeper


class _Keeper(threading.Thread):
    """Per process and tunnel: starts the tunnel (or finds the running one), then checks every
    second that a tunnel still runs and starts a new one on the same socket if not.

    Tunnel processes are started from this long-lived thread only, so their
    ``PR_SET_PDEATHSIG`` (which fires when the *thread* that started them ends) means "when
    this process ends"."""

    def __init__(self, ssh: Mapping[str, Any], remote: tuple[str, int], key: str) -> None:
        super().__init__(name=f"seml-hydra-tunnel-{key}", daemon=True)
        self.ssh = dict(ssh)
        self.remote = remote
        self.key = key
        self.paths: dict[str, Path] = {}
        self.socket: str | None = None
        self.error: TunnelError | None = None
        self.ready = threading.Event()
        self.stopping = threading.Event()
        self.proc: subprocess.Popen[bytes] | None = None

    def run(self) -> None:
        try:
            self.paths = tunnel_paths(self.key)
            self._ensure()
        except TunnelError as err:
            self.error = err
            self.ready.set()
            return
        except Exception as err:  # noqa: BLE001 - never let a secret out through a traceback
            self.error = TunnelError(f"SSH tunnel to MongoDB failed: {type(err).__name__}")
            self.ready.set()
            return
        self.ready.set()
        failures = 0
        while not self.stopping.wait(KEEPER_INTERVAL_S if not failures else min(30, 2**failures)):
            try:
                self._ensure()
                failures = 0
            except Exception as err:  # noqa: BLE001 - keep trying; clients retry meanwhile
                failures += 1
                _warn(f"seml-hydra: the SSH tunnel could not be restarted: {err}")
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()

    def _ensure(self) -> None:
        if self.socket is not None and _alive_lock_held(self.paths["alive"]):
            return  # the usual case: a tunnel runs
        from filelock import FileLock, Timeout

        lock_timeout = float(self.ssh.get("lock_timeout", 60))
        try:
            with FileLock(str(self.paths["spawn"]), timeout=lock_timeout, mode=0o600):
                state = _read_state(self.paths["state"]) or {}
                if _alive_lock_held(self.paths["alive"]) and state.get("socket"):
                    self.socket = str(self.paths["socket"])
                    return
                if self.socket is not None:
                    _warn(f"seml-hydra: restarting the SSH tunnel on {self.socket}")
                proc, self.socket = _spawn(self.ssh, self.remote, self.key, self.paths)
                old, self.proc = self.proc, proc
                if old is not None and old.poll() is None:
                    old.terminate()
        except Timeout:
            raise TunnelError(
                f"SSH tunnel to MongoDB failed: could not take the lock {self.paths['spawn']} "
                f"within {lock_timeout:g} s"
            ) from None


def _warn(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


_KEEPERS: dict[str, _Keeper] = {}
_KEEPERS_LOCK = threading.Lock()


def _forget_after_fork() -> None:
    global _KEEPERS_LOCK
    _KEEPERS.clear()  # threads do not survive fork: a child starts its own keepers
    _KEEPERS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def ensure_tunnel(ssh: Mapping[str, Any], remote: tuple[str, int]) -> str:
    """The local end of a running tunnel to ``remote`` through ``ssh``.

    Args:
        ssh: the ``ssh_config`` block (``sshtunnel.SSHTunnelForwarder`` arguments such as
            ``ssh_address_or_host``, ``ssh_port``, ``ssh_username``, ``ssh_pkey``, plus SEML's
            ``retries_max``, ``retries_delay``, ``lock_timeout`` and our
            ``health_check_interval`` and ``ssh_known_hosts``: the ``known_hosts`` file(s) the
            SSH host's key must be in, default ``~/.ssh/known_hosts``, plus
            ``/etc/ssh/ssh_known_hosts``).
        remote: MongoDB's ``(host, port)`` as seen from the SSH host.

    Returns:
        The path of the tunnel's Unix socket (in :func:`runtime_dir`; give it to pymongo as a
        percent-encoded host ending in ``.sock``).

    Raises:
        TunnelError: the tunnel cannot be opened, e.g. the SSH host's key is unknown or changed
            (message without secrets, saying how to accept the key, naming the log).
    """
    if not sys.platform.startswith(("linux", "darwin")):
        raise TunnelError("SSH tunnels are supported on Linux and macOS only")
    key = tunnel_key(ssh, remote)
    with _KEEPERS_LOCK:
        keeper = _KEEPERS.get(key)
        if keeper is None or (keeper.ready.is_set() and keeper.error is not None):
            keeper = _Keeper(ssh, remote, key)
            _KEEPERS[key] = keeper
            keeper.start()
    keeper.ready.wait()
    if keeper.error is not None:
        raise keeper.error
    assert keeper.socket is not None
    return keeper.socket


def close_tunnels(timeout_s: float = 5.0) -> None:
    """Stop this process's keepers and the tunnel processes it started (tests, shutdown)."""
    with _KEEPERS_LOCK:
        keepers = list(_KEEPERS.values())
        _KEEPERS.clear()
    for keeper in keepers:
        keeper.stopping.set()
    for keeper in keepers:
        keeper.join(timeout_s)
        if keeper.proc is not None:
            _end(keeper.proc, timeout_s)
