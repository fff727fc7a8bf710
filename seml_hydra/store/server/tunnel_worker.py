"""The SSH tunnel process: ``python -m seml_hydra.store.server.tunnel_worker`` (started by
:mod:`seml_hydra.store.server.tunnel`, never by hand).

It imports nothing of the user's (no ``__main__`` re-import, no pickles): its command line holds
only paths and the parent's pid; the SSH options (including any ``ssh_password`` or
``ssh_private_key_password``) arrive as one JSON line on stdin, which then stays open as a
"parent alive" pipe.

Life of the process:

1. take the ``alive`` lock of its tunnel (an exclusive ``flock`` held until it exits: clients
   test it to know whether a tunnel runs);
2. open the tunnel with ``sshtunnel``, its local end a Unix socket (``--socket``, in the
   private runtime directory, no access for group or others: no other user can connect to it,
   unlike a TCP port on 127.0.0.1), after checking the SSH host's key against ``known_hosts``
   before anything is authenticated (:func:`seml_hydra.store.server.known_hosts.check_host_key`);
   check that the SSH host reaches MongoDB, write the state file, answer one JSON line on
   stdout (``{"ok": true, "socket": ...}`` or ``{"ok": false, "error": ...}``);
3. every 0.25 s check that the SSH transport is alive and every ``health_check_interval``
   seconds open a probe channel to MongoDB through it; when the SSH connection is lost, connect
   again (host key checked again) and hand the new transport to the listening socket, which
   never closes: the socket stays the same and MongoDB clients reconnect through it;
4. end when the parent ends (``PR_SET_PDEATHSIG``, a changed parent pid, or EOF on stdin), on
   SIGTERM/SIGINT, removing its state file; during step 2 too (the signal ends the start where
   it waits, as :class:`Stopped`), so no process is left holding the lock of a tunnel that never
   opened.

A login the SSH host refuses (every key and the password offered) is not retried: the answer
says whom it refused, the server's words (``Permission denied (publickey)``) and each key
offered (sshtunnel only logs it, then waits forever in its ``stop()``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from seml_hydra.store.masking import scrub
from seml_hydra.store.server.known_hosts import (
    check_host_key,
    known_hosts_files,
    known_hosts_name,
    load_known_hosts,
)

#: keys of the configuration that are ours (or SEML's), not ``SSHTunnelForwarder`` arguments
OWN_KEYS = (
    "retries_max",
    "retries_delay",
    "lock_file",
    "lock_timeout",
    "health_check_interval",
    "local_bind_address",
    "remote_bind_address",
    "ssh_known_hosts",
)
PROBE_TIMEOUT_S = 5.0
#: how long a new local connection waits for a lost SSH connection to come back
HANDLER_WAIT_S = 60.0

log = logging.getLogger("seml_hydra.store.server.tunnel_worker")


class TunnelFailed(Exception):
    """The tunnel cannot be opened; the message is for the user (no secrets)."""


class HostKeyRejected(TunnelFailed):
    """The SSH host's key is unknown or differs from ``known_hosts``: nothing was authenticated.
    (Not a ``paramiko.SSHException``, so sshtunnel does not swallow it.)"""


class LoginRefused(TunnelFailed):
    """The SSH host refused every key (and the password) offered; not retried. (Not a
    ``paramiko.SSHException``, so sshtunnel does not swallow it.)"""


class Stopped(TunnelFailed):
    """A signal (the parent's SIGTERM, ``PR_SET_PDEATHSIG``) or the end of the parent's stdin
    came before the tunnel was up: raised in the main thread wherever it waits."""


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


class Tunnel:
    """One ``SSHTunnelForwarder`` whose SSH connection can be replaced under a listening socket
    that stays open (same socket)."""

    def __init__(self, config: dict[str, Any], socket_path: str) -> None:
        self.config = config
        self.remote = (str(config["remote"][0]), int(config["remote"][1]))
        self.ssh = dict(config["ssh"])
        #: the local end: a Unix socket in the private runtime directory
        self.socket_path = socket_path
        self.known_hosts = known_hosts_files(self.ssh.get("ssh_known_hosts"))
        self.retries_max = max(1, int(self.ssh.get("retries_max", 3)))
        self.retries_delay = float(self.ssh.get("retries_delay", 1.0))
        self.interval = float(self.ssh.get("health_check_interval", 3.0))
        self.forwarder: Any = None
        #: fingerprint -> file, of the key ``ssh_pkey`` names (loaded by :meth:`_make_forwarder`)
        self.key_files: dict[str, str] = {}
        #: the logins the SSH host refused in the current connection attempt
        self.refusals: list[dict[str, Any]] = []
        #: why the current connection attempt failed before any login (sshtunnel only logs it)
        self.connect_error: str | None = None
        #: why the key of ``ssh_pkey`` could not be offered (:func:`load_private_key`), or None
        self.key_problem: str | None = None

        #: set by a connection that found the SSH connection down: reconnect now
        self.wake = threading.Event()
        #: set when a channel could not be opened: probe the SSH connection now
        self.suspect = threading.Event()

    # -- opening ---------------------------------------------------------------------------
    def _forwarder_class(self) -> Any:
        """``SSHTunnelForwarder`` whose connection handlers use the current SSH transport and,
        while it is down, wait for it (instead of closing the client's connection at once), and
        whose SSH transports check the host key before authenticating.

        sshtunnel (0.4, 0.5) builds a bare ``paramiko.Transport`` per attempt
        (``_get_transport``) and calls ``transport.connect(hostkey=None, ...)``, which runs the
        key exchange (``start_client``) and then authenticates, with no host key check at all.
        Our hook wraps that transport's ``start_client``: right after the key exchange, before
        any key or password is sent, the server's key is checked against ``known_hosts``
        (:func:`seml_hydra.store.server.known_hosts.check_host_key`); a refused key closes the
        transport and raises :class:`HostKeyRejected`. The host key types ``known_hosts`` has
        for the host are offered first, as OpenSSH and ``paramiko.SSHClient`` do."""
        from sshtunnel import SSHTunnelForwarder

        tunnel = self

        class Forwarder(SSHTunnelForwarder):  # type: ignore[misc]  # sshtunnel ships no types
            def _get_transport(self) -> Any:
                transport = super()._get_transport()
                tunnel.guard_transport(transport, self.ssh_host, self.ssh_port, self.ssh_username)
                tunnel.record_refusals(transport, self.ssh_username)
                return transport

            def _connect_to_gateway(self) -> None:
                import paramiko

                tunnel.refusals.clear()
                tunnel.connect_error = None
                try:
                    super()._connect_to_gateway()
                except (paramiko.SSHException, OSError) as err:
                    tunnel.connect_error = scrub(str(err) or type(err).__name__)
                    raise
                if not self.is_active:
                    # every login was refused: sshtunnel only logs it, then binds the local
                    # socket all the same, whose shutdown() in stop() would wait forever
                    raise LoginRefused(tunnel.refusal_message())

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

    def guard_transport(self, transport: Any, host: str, port: int, user: str | None) -> None:
        """Make ``transport`` check the host key right after its key exchange (see
        :meth:`_forwarder_class`)."""
        known = load_known_hosts(self.known_hosts)
        entries = known.keys_for(known_hosts_name(host, port))
        if entries:
            types: list[str] = []
            for name in dict.fromkeys(key.get_name() for key in entries):
                types += ["rsa-sha2-512", "rsa-sha2-256", name] if name == "ssh-rsa" else [name]
            options = transport.get_security_options()
            offered = list(options.key_types)
            options.key_types = [t for t in types if t in offered] + [
                t for t in offered if t not in types
            ]
        start_client = transport.start_client

        def checked_start_client(*args: Any, **kwargs: Any) -> Any:
            result = start_client(*args, **kwargs)
            why = check_host_key(
                known,
                host,
                port,
                transport.get_remote_server_key(),
                files=self.known_hosts[:-1],
                user=user,
            )
            if why is not None:
                transport.close()
                raise HostKeyRejected(why)
            return result

        transport.start_client = checked_start_client

    def record_refusals(self, transport: Any, user: str | None) -> None:
        """Make ``transport`` note each login the SSH host refuses in :attr:`refusals` (what was
        offered, the server's list of methods, paramiko's reason): sshtunnel swallows them."""
        import paramiko

        connect = transport.connect

        def recorded_connect(*args: Any, **kwargs: Any) -> Any:
            try:
                return connect(*args, **kwargs)
            except paramiko.AuthenticationException as err:
                allowed = getattr(err, "allowed_types", None)
                if allowed is None and transport.is_active():
                    try:  # the server lists its methods in its answer to "none"
                        transport.auth_none(user or "")
                    except paramiko.BadAuthenticationType as none_err:
                        allowed = none_err.allowed_types
                    except Exception:  # noqa: BLE001 - paramiko's reason is enough
                        pass
                pkey = kwargs.get("pkey")
                self.refusals.append(
                    {
                        "offered": self.describe_key(pkey) if pkey else "the ssh_password",
                        "allowed": None if allowed is None else list(allowed),
                        "reason": scrub(str(err) or type(err).__name__),
                    }
                )
                raise

        transport.connect = recorded_connect

    def describe_key(self, pkey: Any) -> str:
        """``the key FILE (TYPE SHA256:...)`` for the key of ``ssh_pkey``, else where sshtunnel
        found it (the SSH agent, ``host_pkey_directories``: ``~/.ssh/id_*``)."""
        fingerprint = _fingerprint(pkey)
        what = f"{pkey.get_name()} {fingerprint}"
        path = self.key_files.get(fingerprint)
        if path is not None:
            return f"the key {path} ({what})"
        where = self.ssh.get("host_pkey_directories") or "~/.ssh"
        return f"the key {what} (from the SSH agent or {where})"

    def refusal_message(self) -> str:
        """Why the login failed, for the user, from :attr:`refusals`: whom the SSH host refused,
        its words (OpenSSH's ``Permission denied (METHODS)``, else paramiko's reason), every key
        or password offered, and what to check."""
        user = self.ssh.get("ssh_username") or "(no ssh_username)"
        unloaded = f" ({self.key_problem})" if self.key_problem else ""
        if not self.refusals:
            return (
                f"no login of user {user!r} on the SSH host {self.describe_gateway()} could be "
                f"tried (no key or password to offer){unloaded}"
            )
        last = self.refusals[-1]
        words = last["reason"]
        if last["allowed"] is not None:
            words = f"Permission denied ({','.join(last['allowed'])})"
        offered = [r["offered"] for r in self.refusals]
        tried = offered[0] if len(offered) == 1 else ", ".join(offered[:-1]) + f" and {offered[-1]}"
        host, port = self.gateway()
        key = self.ssh.get("ssh_pkey")
        check = f"ssh {'-i ' + shlex.quote(str(key)) + ' ' if key else ''}-p {port} {user}@{host}"
        return (
            f"the SSH host {host}:{port} refused the login of user {user!r}: {words}; tried "
            f"{tried}{unloaded}. Add the key's public half to the authorized_keys of {user} there, or set "
            f"ssh_username/ssh_pkey in ssh_config to a login it accepts (check with `{check}`)"
        )

    def wait_for_transport(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self.transport_alive():
            self.wake.set()
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def _make_forwarder(self) -> Any:
        kwargs = {k: v for k, v in self.ssh.items() if k not in OWN_KEYS}
        if isinstance(kwargs.get("ssh_address_or_host"), list):
            kwargs["ssh_address_or_host"] = tuple(kwargs["ssh_address_or_host"])
        for key in ("ssh_pkey", "ssh_config_file"):
            if isinstance(kwargs.get(key), str):
                kwargs[key] = os.path.expanduser(kwargs[key])
        self.key_problem = None
        if isinstance(kwargs.get("ssh_pkey"), str):  # loaded here, to say why it cannot be
            passphrase = self.ssh.get("ssh_private_key_password") or self.ssh.get("ssh_password")
            try:
                kwargs["ssh_pkey"] = load_private_key(kwargs["ssh_pkey"], passphrase)
            except TunnelFailed as err:  # as sshtunnel: the other keys and the password remain
                self.key_problem = str(err)
                log.warning("%s; offering the other keys and the password, if any", err)
                del kwargs["ssh_pkey"]
            else:
                self.key_files[_fingerprint(kwargs["ssh_pkey"])] = self.ssh["ssh_pkey"]
        kwargs.setdefault("set_keepalive", 5.0)
        try:
            return self._forwarder_class()(
                remote_bind_address=self.remote,
                local_bind_address=self.socket_path,
                logger=logging.getLogger("seml_hydra.store.server.tunnel_worker.sshtunnel"),
                mute_exceptions=False,
                **kwargs,
            )
        except (ValueError, TypeError) as err:  # unknown arguments, bad address, no key...
            why = f" ({self.key_problem})" if self.key_problem else ""
            raise TunnelFailed(f"invalid ssh_config: {scrub(str(err))}{why}") from None

    def open(self) -> str:
        """Open the tunnel (retried with a jittered exponential back-off; a refused host key is
        not retried); returns the socket path."""
        from sshtunnel import BaseSSHTunnelForwarderError

        _remove_stale_socket(self.socket_path)
        delay, error = self.retries_delay, "unknown error"
        for attempt in range(self.retries_max):
            forwarder = self.forwarder = self._make_forwarder()
            try:
                forwarder.start()
                break
            except BaseSSHTunnelForwarderError as err:
                error = self.connect_error or scrub(str(err) or type(err).__name__)
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
        ok, why = self.probe()
        if not ok:
            self.forwarder.stop(force=True)
            raise TunnelFailed(
                f"the SSH host {self.describe_gateway()} cannot reach MongoDB at "
                f"{self.remote[0]}:{self.remote[1]}: {why}"
            )
        log.info(
            "tunnel up: %s -> %s:%s via %s",
            self.socket_path,
            *self.remote,
            self.describe_gateway(),
        )
        return self.socket_path

    def gateway(self) -> tuple[str, int]:
        """The SSH host's ``(host, port)``."""
        host = self.ssh.get("ssh_address_or_host")
        if isinstance(host, (list, tuple)):
            return str(host[0]), int(host[1])
        return str(host), int(self.ssh.get("ssh_port", 22))

    def describe_gateway(self) -> str:
        host, port = self.gateway()
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
            return False, scrub(f"{err}")
        except Exception as err:  # transport dead, timeout
            return False, scrub(f"{type(err).__name__}: {err}")

    def reconnect(self) -> None:
        """Replace the SSH connection; the listening socket stays open."""
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

    def local_end_answers(self) -> bool:
        import socket

        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(2)
                sock.connect(self.socket_path)
                return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.forwarder is not None:
            try:
                self.forwarder.stop(force=True)
            except Exception:  # noqa: BLE001
                pass


def _fingerprint(pkey: Any) -> str:
    """``SHA256:...`` of a paramiko key (``MD5:..`` before paramiko 3), as ``ssh-keygen -l``."""
    return getattr(pkey, "fingerprint", None) or f"MD5:{pkey.get_fingerprint().hex(':')}"


def load_private_key(path: str, passphrase: str | None) -> Any:
    """The private key in ``path`` (ed25519, ECDSA or RSA, OpenSSH or PEM format) as paramiko
    loads it, decrypted with ``passphrase``. (sshtunnel, loading it itself, only logs why it
    cannot; the tunnel offers the other keys then too, but says why this one was not.)

    Raises:
        TunnelFailed: the file cannot be read, is encrypted and no passphrase is set, or is
            no key of those types (or the passphrase is wrong); the message names the file.
    """
    import paramiko

    problems = []
    kinds = [paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey]
    kinds += [paramiko.DSSKey] if hasattr(paramiko, "DSSKey") else []  # paramiko < 4
    for cls in kinds:
        try:
            return cls.from_private_key_file(path, password=passphrase)
        except paramiko.PasswordRequiredException:
            raise TunnelFailed(
                f"the SSH key {path} (ssh_pkey) is encrypted and ssh_config sets no "
                "ssh_private_key_password for it"
            ) from None
        except OSError as err:
            raise TunnelFailed(
                f"cannot read the SSH key {path} (ssh_pkey): {err.strerror or err}"
            ) from None
        except (paramiko.SSHException, ValueError) as err:
            problems.append(scrub(str(err) or type(err).__name__))
    why = "not an ed25519, ECDSA or RSA private key"
    if passphrase:
        why = f"a wrong ssh_private_key_password, or {why}"
    raise TunnelFailed(
        f"cannot load the SSH key {path} (ssh_pkey): {why} ({'; '.join(dict.fromkeys(problems))})"
    )


def _remove_stale_socket(path: str) -> None:
    """Remove the socket a killed tunnel left (this process holds the tunnel's lock, so none
    runs; the directory is private). Anything that is not a socket of ours is left alone (the
    bind then fails and says so)."""
    import stat

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISSOCK(st.st_mode) and st.st_uid == os.getuid():
        os.unlink(path)


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
    parser = argparse.ArgumentParser(prog="python -m seml_hydra.store.server.tunnel_worker")
    parser.add_argument("--state", required=True, help="state file (JSON) to write")
    parser.add_argument("--lock", required=True, help="the tunnel's 'alive' lock file")
    parser.add_argument("--parent", type=int, required=True, help="pid of the parent process")
    parser.add_argument("--socket", required=True, help="the Unix socket to listen on")
    parser.add_argument("--key", default="", help="the tunnel's key (for the state file)")
    args = parser.parse_args(argv)

    _set_pdeathsig()
    if os.getppid() != args.parent:  # the parent died before prctl
        return 1
    os.umask(0o077)  # the socket (and every file) is the user's alone
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,  # the tunnel's log file (the parent redirects stderr)
        format=f"%(asctime)s [tunnel pid {os.getpid()}] %(levelname)s %(message)s",
    )
    logging.getLogger("paramiko").setLevel(logging.WARNING)
    logging.getLogger("seml_hydra.store.server.tunnel_worker.sshtunnel").setLevel(logging.CRITICAL)

    out = sys.stdout

    def answer(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    stop = threading.Event()
    starting = True  # until the tunnel is up, a signal ends the start where it waits

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()
        if starting:
            raise Stopped(f"stopped by {signal.Signals(signum).name} before the tunnel was up")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    try:
        config = json.loads(sys.stdin.readline())
    except ValueError:
        answer({"ok": False, "error": "the tunnel process got no configuration"})
        return 1
    except Stopped as err:
        log.error("%s", err)
        return 1

    def watch_stdin() -> None:  # EOF: the parent is gone
        try:
            while sys.stdin.read(4096):
                pass
        except (OSError, ValueError):
            pass
        stop.set()
        if starting:  # interrupt the start in the main thread (on_signal)
            os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch_stdin, name="stdin-eof", daemon=True).start()

    state_path = Path(args.state)
    try:
        tunnel = Tunnel(config, args.socket)
        if stop.is_set():  # the parent went before the handlers were set
            raise Stopped("the parent ended before the tunnel was up")
        lock_fd = _acquire_alive_lock(Path(args.lock), 5.0)
        tunnel.open()
        starting = False
    except Exception as err:  # noqa: BLE001 - report, never with secrets
        starting = False
        msg = str(err) if isinstance(err, TunnelFailed) else f"{type(err).__name__}: {err}"
        log.error("%s", scrub(msg))
        try:
            answer({"ok": False, "error": scrub(msg)})
        except OSError:  # the parent is gone
            pass
        return 1
    state = {
        "pid": os.getpid(),
        "parent": args.parent,
        "socket": tunnel.socket_path,
        "key": args.key,
        "started": time.time(),
    }
    _write_state(state_path, state)
    answer({"ok": True, "socket": tunnel.socket_path})
    try:  # stdout is not needed any more
        out.close()
    except OSError:
        pass

    try:
        _health_loop(tunnel, args.parent, stop)
    finally:
        log.info("tunnel on %s closing", tunnel.socket_path)
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
        log.warning("SSH connection lost; reconnecting (%s stays open)", tunnel.socket_path)
        delay = min(tunnel.retries_delay, 1.0)
        while not stop.is_set() and os.getppid() == parent:
            try:
                tunnel.reconnect()
                log.info("SSH connection re-established; tunnel on %s", tunnel.socket_path)
                last_probe = 0.0
                break
            except Exception as err:  # noqa: BLE001 - keep trying
                log.warning(
                    "reconnect failed (%s); retrying in %.1f s",
                    scrub(str(err)),
                    delay,
                )
                stop.wait(delay)
                tunnel.wake.clear()
                delay = min(delay * 2, tunnel.interval + 5.0)
        if not tunnel.local_end_answers():
            log.error("the socket %s does not answer any more", tunnel.socket_path)


if __name__ == "__main__":
    sys.exit(main())
