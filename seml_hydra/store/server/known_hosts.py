"""Checking an SSH host's key against ``known_hosts`` before anything is authenticated, as
OpenSSH does (for the SSH tunnel process, :mod:`seml_hydra.store.server.tunnel_worker`).

The files are read line by line (``@revoked`` and ``@cert-authority`` lines kept apart, since
paramiko's ``HostKeys.load`` fails on them; malformed lines skipped with a warning). ``paramiko``
is imported only where a key or a hashed host name is read.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

__all__ = [
    "KnownHosts",
    "check_host_key",
    "known_hosts_files",
    "known_hosts_name",
    "load_known_hosts",
    "parse_known_hosts_line",
]

#: the files the SSH host's key is looked up in when ``ssh_known_hosts`` is not set (OpenSSH's
#: ``UserKnownHostsFile``); the system file is always read as well (``GlobalKnownHostsFile``)
USER_KNOWN_HOSTS = "~/.ssh/known_hosts"
SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"

log = logging.getLogger("seml_hydra.store.server.tunnel_worker.known_hosts")


def known_hosts_name(host: str, port: int) -> str:
    """The name OpenSSH files a host under in ``known_hosts``: ``host``, or ``[host]:port``
    for a port other than 22."""
    return host if int(port) == 22 else f"[{host}]:{port}"


def known_hosts_files(setting: Any) -> list[str]:
    """The ``known_hosts`` files to read: ``ssh_known_hosts`` (a path or a list of paths,
    ``~`` expanded; default ``~/.ssh/known_hosts``) plus the system's ``/etc/ssh/ssh_known_hosts``."""
    if setting in (None, "", []):
        paths = [USER_KNOWN_HOSTS]
    else:
        paths = [setting] if isinstance(setting, str) else [str(p) for p in setting]
    return [os.path.expanduser(p) for p in paths] + [SYSTEM_KNOWN_HOSTS]


class KnownHosts:
    """The entries of ``known_hosts`` files, read line by line as OpenSSH does.

    Attributes:
        files: the files that were read (for messages).
        plain: ``(host patterns, paramiko.PKey)`` of the ordinary lines (hashed ``|1|`` names
            included).
        revoked: the keys of ``@revoked`` lines: refused for every host, even when an ordinary
            line lists them too (stricter than OpenSSH, which matches the line's host patterns).
        authorities: the host patterns of ``@cert-authority`` lines. paramiko checks no host
            certificates, so these lines trust nothing; they only explain a refusal.
    """

    def __init__(self) -> None:
        self.files: list[str] = []
        self.plain: list[tuple[list[str], Any]] = []
        self.revoked: list[Any] = []
        self.authorities: list[list[str]] = []

    def keys_for(self, name: str) -> list[Any]:
        """The keys the ordinary lines give host ``name`` (``known_hosts_name``), file order."""
        return [key for patterns, key in self.plain if _name_listed(name, patterns)]

    def is_revoked(self, key: Any) -> bool:
        """Whether ``key`` (a ``paramiko.PKey``) is on a ``@revoked`` line."""
        return any(key.asbytes() == bad.asbytes() for bad in self.revoked)

    def has_authority_for(self, name: str) -> bool:
        """Whether a ``@cert-authority`` line's host patterns (``*``, ``?``, ``!``) match ``name``."""
        return any(_pattern_listed(name, patterns) for patterns in self.authorities)


def _name_listed(name: str, patterns: list[str]) -> bool:
    """``name`` is one of ``patterns`` literally or as a hashed ``|1|salt|hash`` name."""
    import paramiko  # lazy: slow to import

    for pattern in patterns:
        if pattern == name:
            return True
        if pattern.startswith("|1|") and paramiko.HostKeys.hash_host(name, pattern) == pattern:
            return True
    return False


def _pattern_listed(name: str, patterns: list[str]) -> bool:
    """OpenSSH's host pattern list: a match of a ``!pattern`` excludes, else any match counts."""
    matched = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        body = pattern[1:] if negated else pattern
        regex = re.escape(body).replace(r"\*", ".*").replace(r"\?", ".")
        if _name_listed(name, [body]) or re.fullmatch(regex, name, re.IGNORECASE):
            if negated:
                return False
            matched = True
    return matched


def parse_known_hosts_line(line: str) -> tuple[str | None, Any] | None:
    """One ``known_hosts`` line as ``(marker, paramiko.HostKeyEntry or None)``.

    ``marker`` is ``None``, ``"@revoked"`` or ``"@cert-authority"``; the entry is ``None`` for
    a key type paramiko does not know (skipped quietly, as it is not an error). Returns ``None``
    for a blank line or a comment.

    Raises:
        ValueError: the line is malformed (an unknown marker, too few fields, bad base64).
    """
    import paramiko  # lazy: slow to import
    from paramiko.hostkeys import HostKeyEntry, InvalidHostKey

    line = line.strip()
    if not line or line.startswith("#"):
        return None
    marker = None
    if line.startswith("@"):
        marker, _, line = line.partition(" ")
        if marker not in ("@revoked", "@cert-authority"):
            raise ValueError(f"unknown marker {marker}")
    fields = line.split()  # OpenSSH separates fields by any blanks; paramiko by one
    if len(fields) < 3:
        raise ValueError("expected host names, a key type and a key")
    try:
        entry = HostKeyEntry.from_line(" ".join(fields[:3]))
    except (InvalidHostKey, paramiko.SSHException, ValueError) as err:
        raise ValueError(f"the key cannot be read ({type(err).__name__})") from None
    return marker, entry


def load_known_hosts(files: list[str]) -> KnownHosts:
    """The entries of those of ``files`` that exist (:class:`KnownHosts`), read line by line:
    comments and blank lines skipped; ``@revoked`` and ``@cert-authority`` lines kept apart
    (paramiko's ``HostKeys.load`` fails on them); a malformed line skipped with a warning
    naming the file and the line number. An unreadable file is skipped with a warning."""
    known = KnownHosts()
    for path in files:
        if not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
        except (OSError, UnicodeDecodeError) as err:
            log.warning("cannot read %s: %s", path, err)
            continue
        known.files.append(path)
        for lineno, line in enumerate(lines, 1):
            try:
                parsed = parse_known_hosts_line(line)
            except ValueError as err:
                log.warning("%s line %d skipped: not a known_hosts entry (%s)", path, lineno, err)
                continue
            if parsed is None or parsed[1] is None:
                continue
            marker, entry = parsed
            if marker == "@revoked":
                known.revoked.append(entry.key)
            elif marker == "@cert-authority":
                known.authorities.append(list(entry.hostnames))
            else:
                known.plain.append((list(entry.hostnames), entry.key))
    return known


def check_host_key(
    known: KnownHosts, host: str, port: int, key: Any, *, files: list[str], user: str | None
) -> str | None:
    """Whether the key an SSH host offered is one ``known_hosts`` has for it.

    Args:
        known: the entries of the ``known_hosts`` files (:func:`load_known_hosts`).
        host, port: the SSH host as connected to.
        key: the ``paramiko.PKey`` it offered (``Transport.get_remote_server_key()``).
        files: the files ``known`` was read from (for the message).
        user: the SSH user (for the message).

    Returns:
        None when the key is known for that host and not revoked; else a message for the user
        saying whether the key is revoked, the host is unknown (noting that ``@cert-authority``
        lines are not supported when one matches it) or its key changed, and what to do.
    """
    name = known_hosts_name(host, port)
    keys = known.keys_for(name)
    offered = f"{key.get_name()} key {_fingerprint(key)}"
    where = " or ".join(files)
    ssh = f"ssh{'' if int(port) == 22 else f' -p {port}'} {user + '@' if user else ''}{host}"
    if known.is_revoked(key):
        return (
            f"the SSH host {name} offered the {offered}, which is revoked (a @revoked line of "
            f"{where}), so it was refused and nothing was sent to it."
        )
    if not keys:
        if known.has_authority_for(name):
            scan = f"ssh-keyscan{'' if int(port) == 22 else f' -p {port}'} {host}"
            return (
                f"the SSH host {name} has only a @cert-authority line in {where} (it offered "
                f"the {offered}): certificate-based host keys are not supported, so it was not "
                f"trusted and nothing was sent to it. Add a plain entry with `{scan} >> "
                f"~/.ssh/known_hosts` after checking that the fingerprint is the host's."
            )
        return (
            f"the SSH host {name} is not in {where} (it offered the {offered}), so it was not "
            f"trusted and nothing was sent to it. If that is its key, accept it by connecting "
            f"once with `{ssh}` and answering yes (or set ssh_known_hosts in ssh_config)."
        )
    if any(key.asbytes() == known_key.asbytes() for known_key in keys):
        return None
    return (
        f"the SSH host key of {name} does not match {where}: it offered the {offered}. Someone "
        f"may be intercepting the connection, or the host's key changed; nothing was sent to "
        f"it. If the change is expected, remove the old key with `ssh-keygen -R '{name}'` and "
        f"connect once with `{ssh}`."
    )


def _fingerprint(key: Any) -> str:
    try:
        return str(key.fingerprint)  # "SHA256:..." (paramiko >= 3.2), as OpenSSH shows it
    except AttributeError:  # pragma: no cover - older paramiko
        return str(key.get_fingerprint().hex(":"))
