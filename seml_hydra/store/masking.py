"""Keeping passwords out of text: where a MongoDB URI's password is, masking it in any text
(launch commands, Hydra configs, messages), and scrubbing known secrets from messages.

Pure: our own small URI splitter (pymongo's parser resolves ``mongodb+srv`` names over DNS and
is slow to import); pymongo validates the URI again when connecting. Imports nothing of the
package, so the tunnel process (:mod:`seml_hydra.store.tunnel_worker`) can use it too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

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


def scrub(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every MongoDB URL password masked (:func:`mask_credentials`) and every
    one of ``secrets`` (also percent-encoded, as in a URI) replaced by ``***``.

    Args:
        text: a message, e.g. an error of pymongo or of the SSH library.
        secrets: the passwords to hide; None or empty ones are skipped.

    Returns:
        The scrubbed text. Pure.
    """
    text = mask_credentials(text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***").replace(quote(secret, safe=""), "***")
    return text
