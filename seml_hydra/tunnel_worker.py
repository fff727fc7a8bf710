"""The SSH tunnel process: ``python -m seml_hydra.tunnel_worker`` (started by
:mod:`seml_hydra.tunnel`, never by hand).

It imports nothing of the user's (no ``__main__`` re-import, no pickles): its command line holds
only paths, a port and the parent's pid; the SSH options (including any ``ssh_password`` or
``ssh_private_key_password``) arrive as one JSON line on stdin, which then stays open as a
"parent alive" pipe.

Life of the process:

1. take the ``alive`` lock of its tunnel (an exclusive ``flock`` held until it exits: clients
   test it to know whether a tunnel runs);
2. open the tunnel with ``sshtunnel`` on the requested local port (0: any free port), check
   that the SSH host reaches MongoDB, write the state file, answer one JSON line on stdout
   (``{"ok": true, "port": ...}`` or ``{"ok": false, "error": ...}``);
3. every 0.25 s check that the SSH transport is alive and every ``health_check_interval``
   seconds open a probe channel to MongoDB through it; when the SSH connection is lost, connect
   again and hand the new transport to the listening socket, which never closes: the local
   port stays the same and MongoDB clients reconnect through it;
4. end when the parent ends (``PR_SET_PDEATHSIG``, a changed parent pid, or EOF on stdin), on
   SIGTERM/SIGINT, removing its state file.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

#: keys of the configuration that are ours (or SEML's), not ``SSHTunnelForwarder`` arguments
OWN_KEYS = (
    "retries_max",
    "retries_delay",
    "lock_file",
    "lock_timeout",
    "health_check_interval",
    "local_bind_address",
    "remote_bind_address",
)
SECRET_KEYS = ("ssh_password", "ssh_private_key_password")
PROBE_TIMEOUT_S = 5.0
#: how long a new local connection waits for a lost SSH connection to come back
HANDLER_WAIT_S = 60.0

log = logging.getLogger("seml_hydra.tunnel_worker")


class TunnelFailed(Exception):
    """The tunnel cannot be opened; the message is for the user (no secrets)."""


def _set_pdeathsig() -> None:
    """Ask Linux to send SIGTERM when the parent (thread) exits."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - other libc
        pass


def _scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


class Tunnel:
    """One ``SSHTunnelForwarder`` whose SSH connection can be replaced under a listening socket
    that stays open (same local port)."""

    def __init__(self, config: dict[str, Any], port: int) -> None:
        self.config = config
        self.remote = (str(config["remote"][0]), int(config["remote"][1]))
        self.ssh = dict(config["ssh"])
        self.secrets = [str(self.ssh[k]) for k in SECRET_KEYS if self.ssh.get(k)]
        local = self.ssh.get("local_bind_address") or ["127.0.0.1", 0]
        self.local_host = str(local[0])
        self.port = int(port or local[1] or 0)
        self.retries_max = max(1, int(self.ssh.get("retries_max", 3)))
        self.retries_delay = float(self.ssh.get("retries_delay", 1.0))
        self.interval = float(self.ssh.get("health_check_interval", 3.0))
        self.forwarder: Any = None

        #: set by a connection that found the SSH connection down: reconnect now
        self.wake = threading.Event()
        #: set when a channel could not be opened: probe the SSH connection now
        self.suspect = threading.Event()

    # -- opening ---------------------------------------------------------------------------
    def _forwarder_class(self) -> Any:
        """``SSHTunnelForwarder`` whose connection handlers use the current SSH transport and,
        while it is down, wait for it (instead of closing the client's connection at once)."""
        from sshtunnel import SSHTunnelForwarder

        tunnel = self

        class Forwarder(SSHTunnelForwarder):
            def _make_ssh_forward_handler_class(self, remote_address_: Any) -> Any:
                base = super()._make_ssh_forward_handler_class(remote_address_)
                forwarder = self

                class Handler(base):  # type: ignore[misc, valid-type]
                    @property
                    def ssh_transport(self) -> Any:  # the transport of the moment
                        return forwarder._transport

                    def handle(self) -> None:
                        from sshtunnel import HandlerSSHTunnelForwarderError

                        # Nothing is read from the client before the channel is open, so a
                        # failed open (SSH connection just lost) can wait for the reconnection
                        # and be tried again: the client only sees a slow connect.
                        deadline = time.monotonic() + HANDLER_WAIT_S
                        while True:
                            tunnel.wait_for_transport(max(0.0, deadline - time.monotonic()))
                            try:
                                super().handle()
                                return
                            except HandlerSSHTunnelForwarderError:
                                if time.monotonic() > deadline:
                                    raise
                                tunnel.suspect.set()
                                tunnel.wake.set()
                                time.sleep(0.1)

                return Handler

        return Forwarder

    def wait_for_transport(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self.transport_alive():
            self.wake.set()
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def _make_forwarder(self, port: int) -> Any:
        kwargs = {k: v for k, v in self.ssh.items() if k not in OWN_KEYS}
        if isinstance(kwargs.get("ssh_address_or_host"), list):
            kwargs["ssh_address_or_host"] = tuple(kwargs["ssh_address_or_host"])
        for key in ("ssh_pkey", "ssh_config_file"):
            if isinstance(kwargs.get(key), str):
                kwargs[key] = os.path.expanduser(kwargs[key])
        kwargs.setdefault("set_keepalive", 5.0)
        try:
            return self._forwarder_class()(
                remote_bind_address=self.remote,
                local_bind_address=(self.local_host, port),
                logger=logging.getLogger("seml_hydra.tunnel_worker.sshtunnel"),
                mute_exceptions=False,
                **kwargs,
            )
        except (ValueError, TypeError) as err:  # unknown arguments, bad address...
            raise TunnelFailed(f"invalid ssh_config: {_scrub(str(err), self.secrets)}") from None

    def open(self) -> int:
        """Open the tunnel (retried with a jittered exponential back-off); returns the port."""
        from sshtunnel import BaseSSHTunnelForwarderError

        delay, error = self.retries_delay, "unknown error"
        for attempt in range(self.retries_max):
            forwarder = self.forwarder = self._make_forwarder(self.port)
            try:
                forwarder.start()
                break
            except BaseSSHTunnelForwarderError as err:
                error = _scrub(str(err) or type(err).__name__, self.secrets)
                if "might be in use" in error and self.port:
                    # our old port is taken by someone else: take any free one
                    log.warning("local port %s is in use; taking another one", self.port)
                    self.port = 0
                forwarder.stop(force=True)
                self.forwarder = None
            if attempt + 1 < self.retries_max:
                log.warning("cannot open the SSH tunnel (%s); retrying in %.1f s", error, delay)
                time.sleep(delay)
                delay = delay * 2 + random.uniform(0, 1)
        else:
            raise TunnelFailed(
                f"cannot open an SSH connection to {self.describe_gateway()}: {error}"
            )
        self.port = int(self.forwarder.local_bind_port)
        ok, why = self.probe()
        if not ok:
            self.forwarder.stop(force=True)
            raise TunnelFailed(
                f"the SSH host {self.describe_gateway()} cannot reach MongoDB at "
                f"{self.remote[0]}:{self.remote[1]}: {why}"
            )
        log.info(
            "tunnel up: %s:%s -> %s:%s via %s",
            self.local_host,
            self.port,
            *self.remote,
            self.describe_gateway(),
        )
        return self.port

    def describe_gateway(self) -> str:
        host = self.ssh.get("ssh_address_or_host")
        if isinstance(host, (list, tuple)):
            host, port = host[0], host[1]
        else:
            port = self.ssh.get("ssh_port", 22)
        user = self.ssh.get("ssh_username")
        return f"{user + '@' if user else ''}{host}:{port}"

    # -- health ----------------------------------------------------------------------------
    def transport_alive(self) -> bool:
        """The SSH connection is up *and* authenticated (a channel opened on a transport that
        is still authenticating is refused by the server and times out)."""
        transport = getattr(self.forwarder, "_transport", None)
        return transport is not None and transport.is_active() and transport.is_authenticated()

    def probe(self) -> tuple[bool, str]:
        """Open (and close) a channel to MongoDB through the SSH connection."""
        import paramiko

        try:
            chan = self.forwarder._transport.open_channel(
                "direct-tcpip", self.remote, ("127.0.0.1", 0), timeout=PROBE_TIMEOUT_S
            )
            chan.close()
            return True, ""
        except paramiko.ChannelException as err:  # the SSH host refused: MongoDB unreachable
            return False, _scrub(f"{err}", self.secrets)
        except Exception as err:  # transport dead, timeout
            return False, _scrub(f"{type(err).__name__}: {err}", self.secrets)

    def reconnect(self) -> None:
        """Replace the SSH connection; the listening socket (local port) stays open."""
        fwd = self.forwarder
        old = getattr(fwd, "_transport", None)
        if old is not None:
            try:
                old.close()
            except Exception:  # noqa: BLE001 - already dead
                pass
        fwd._connect_to_gateway()  # the handlers read fwd._transport: nothing else to update
        if not self.transport_alive():
            raise TunnelFailed(f"cannot connect to {self.describe_gateway()}")

    def local_port_answers(self) -> bool:
        import socket

        try:
            with socket.create_connection((self.local_host, self.port), timeout=2):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.forwarder is not None:
            try:
                self.forwarder.stop(force=True)
            except Exception:  # noqa: BLE001
                pass


def _acquire_alive_lock(path: Path, timeout_s: float) -> int:
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise TunnelFailed("another tunnel process holds this tunnel's lock") from None
            time.sleep(0.05)


def _write_state(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(state, f)
    os.replace(tmp, path)


def _remove_own_state(path: Path) -> None:
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m seml_hydra.tunnel_worker")
    parser.add_argument("--state", required=True, help="state file (JSON) to write")
    parser.add_argument("--lock", required=True, help="the tunnel's 'alive' lock file")
    parser.add_argument("--parent", type=int, required=True, help="pid of the parent process")
    parser.add_argument("--port", type=int, default=0, help="local port to bind (0: any)")
    parser.add_argument("--key", default="", help="the tunnel's key (for the state file)")
    args = parser.parse_args(argv)

    _set_pdeathsig()
    if os.getppid() != args.parent:  # the parent died before prctl
        return 1
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,  # the tunnel's log file (the parent redirects stderr)
        format=f"%(asctime)s [tunnel pid {os.getpid()}] %(levelname)s %(message)s",
    )
    logging.getLogger("paramiko").setLevel(logging.WARNING)
    logging.getLogger("seml_hydra.tunnel_worker.sshtunnel").setLevel(logging.CRITICAL)

    out = sys.stdout

    def answer(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    line = sys.stdin.readline()
    try:
        config = json.loads(line)
    except ValueError:
        answer({"ok": False, "error": "the tunnel process got no configuration"})
        return 1

    def watch_stdin() -> None:  # EOF: the parent is gone
        try:
            while sys.stdin.read(4096):
                pass
        except (OSError, ValueError):
            pass
        stop.set()

    threading.Thread(target=watch_stdin, name="stdin-eof", daemon=True).start()

    state_path = Path(args.state)
    tunnel = Tunnel(config, args.port)
    try:
        lock_fd = _acquire_alive_lock(Path(args.lock), 5.0)
        tunnel.open()
    except TunnelFailed as err:
        log.error("%s", err)
        answer({"ok": False, "error": str(err)})
        return 1
    except Exception as err:  # noqa: BLE001 - report, never with secrets
        msg = _scrub(f"{type(err).__name__}: {err}", tunnel.secrets)
        log.error("%s", msg)
        answer({"ok": False, "error": msg})
        return 1
    state = {
        "pid": os.getpid(),
        "parent": args.parent,
        "host": tunnel.local_host,
        "port": tunnel.port,
        "key": args.key,
        "started": time.time(),
    }
    _write_state(state_path, state)
    answer({"ok": True, "host": tunnel.local_host, "port": tunnel.port})
    try:  # stdout is not needed any more
        out.close()
    except OSError:
        pass

    try:
        _health_loop(tunnel, args.parent, stop)
    finally:
        log.info("tunnel on port %s closing", tunnel.port)
        tunnel.stop()
        _remove_own_state(state_path)
        os.close(lock_fd)
    return 0


def _health_loop(tunnel: Tunnel, parent: int, stop: threading.Event) -> None:
    last_probe = time.monotonic()
    while not stop.is_set():
        tunnel.wake.wait(0.25)
        tunnel.wake.clear()
        if stop.is_set():
            return
        if os.getppid() != parent:
            log.info("parent %s ended", parent)
            return
        healthy = tunnel.transport_alive()
        due = time.monotonic() - last_probe >= tunnel.interval
        if healthy and (due or tunnel.suspect.is_set()):
            tunnel.suspect.clear()
            last_probe = time.monotonic()
            healthy, why = tunnel.probe()
            if not healthy and tunnel.transport_alive():
                # SSH works but MongoDB does not answer there: reconnecting will not help
                log.warning("MongoDB unreachable through the SSH host: %s", why)
                continue
        if healthy:
            continue
        log.warning("SSH connection lost; reconnecting (local port %s stays open)", tunnel.port)
        delay = min(tunnel.retries_delay, 1.0)
        while not stop.is_set() and os.getppid() == parent:
            try:
                tunnel.reconnect()
                log.info("SSH connection re-established; tunnel on port %s", tunnel.port)
                last_probe = 0.0
                break
            except Exception as err:  # noqa: BLE001 - keep trying
                log.warning(
                    "reconnect failed (%s); retrying in %.1f s",
                    _scrub(str(err), tunnel.secrets),
                    delay,
                )
                stop.wait(delay)
                tunnel.wake.clear()
                delay = min(delay * 2, tunnel.interval + 5.0)
        if not tunnel.local_port_answers():
            log.error("the local port %s does not answer any more", tunnel.port)


if __name__ == "__main__":
    sys.exit(main())
