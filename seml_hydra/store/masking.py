"""Keeping passwords out of text: where a MongoDB URI's password is, masking it in any text
(launch commands, Hydra configs, messages), and scrubbing known secrets from messages.

Pure: our own small URI splitter (pymongo's parser resolves ``mongodb+srv`` names over DNS and
is slow to import); pymongo validates the URI again when connecting. Imports nothing of the
package, so the tunnel process (:mod:`seml_hydra.store.server.tunnel_worker`) can use it too.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "SSH_SECRET_KEYS",
    "host_port",
    "mask_credentials",
    "mask_uri",
    "scrub",
    "split_uri",
    "url_has_password",
]

#: keys of an ``ssh_config`` block (and of the tunnel's options) that hold secrets: never
#: shown, never on a command line.
SSH_SECRET_KEYS = ("ssh_password", "ssh_private_key_password")


def split_uri(uri: str) -> dict[str, str]:
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


def mask_uri(uri: str, replacement: str | None) -> str:
    """Return ``uri`` with its password replaced (or removed when ``replacement`` is None)."""
    try:
        parts = split_uri(uri)
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


def host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def url_has_password(url: Any) -> bool:
    """A MongoDB URL with a password part (also ``***``, a masked one)."""
    try:
        return isinstance(url, str) and ":" in split_uri(url)["userinfo"]
    except ValueError:
        return False


#: a password given as a key and its value in a message: ``password=VALUE``, ``password: VALUE``
#: (YAML), ``'ssh_password': 'VALUE'`` (a dict's repr), ``('ssh_password', 'VALUE')`` (a pair's
#: repr), ``tlsCertificateKeyFilePassword=VALUE`` (a URI option): any key ending in
#: ``password``, ``passwd``, ``passphrase`` or exactly ``pwd``; the value is quoted (to its
#: closing quote, or the end of the line when it has none) or runs to a space or one of ``,;&)}]``
_KEY_PASSWORD = re.compile(
    r"""(?P<head>(?<![\w./-])(?P<q>['"]?)(?:[\w.-]*(?:password|passwd|passphrase)|pwd)(?P=q)"""
    r"""\s*(?:[=:]|(?<=['"]),)\s*)"""
    r"""(?P<value>'[^'\n]*'?|"[^"\n]*"?|[^\s,;&)}\]'"]+)""",
    re.IGNORECASE,
)


def _mask_value(match: re.Match[str]) -> str:
    value = match["value"]
    if value[0] not in "'\"":
        return f"{match['head']}***"
    closed = len(value) > 1 and value[-1] == value[0]
    return f"{match['head']}{value[0]}***{value[0] if closed else ''}"


def scrub(text: str) -> str:
    """``text`` with every password *field* in it masked: the password of each MongoDB URL
    (:func:`mask_credentials`) and the value of each password key (``password=...``,
    ``password: ...``, ``'ssh_password': '...'``, ``('ssh_private_key_password', '...')``,
    ``...Password=...`` URI options), each replaced by ``***``.

    Only these fields are touched, never other occurrences of a password's text: a short or
    common password (``a``, ``seml``) or one that is also a host name must not turn the rest of
    a message into a riddle that spells it out (``C***nnot re***ch``,
    ``~/.config/***/mongodb.config``). Pure; for the messages of errors from pymongo, the SSH
    library and the tunnel process.

    Args:
        text: a message, e.g. ``"bad option password='x' for mongodb://a:x@h/db"``.

    Returns:
        The masked text, e.g. ``"bad option password='***' for mongodb://a:***@h/db"``.
    """
    return _KEY_PASSWORD.sub(_mask_value, mask_credentials(text))
