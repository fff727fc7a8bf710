"""Rewrite the store's old flat module paths to its sub-packages, in the files given.

    python tools/lead/store_paths.py FILE... [--everywhere]

``seml_hydra.store`` was split by concern: ``server/`` (mongod, embedded, tunnel, tunnel_worker,
known_hosts), ``db/`` (settings, client, collections, retry, job_db) and ``snapshot/`` (gitinfo,
sources, bytecode, sacred_sources; the old ``snapshot`` module is ``snapshot/node``). errors,
masking, payload, metrics and results stay where they were.

Rewritten: ``from seml_hydra.store.<mod> import ...``, ``import seml_hydra.store.<mod>`` and
``from seml_hydra.store import <mod>[ as name], ...`` (one line per new parent package, the
bound names unchanged: ``from seml_hydra.store import snapshot`` becomes
``from seml_hydra.store.snapshot import node as snapshot``). With ``--everywhere``, every
dotted ``seml_hydra.store.<mod>`` (or ``store.<mod>``, as docstrings shorten it) and every
``seml_hydra/store/<mod>.py`` in the files too
(mock targets, ``python -m``, docs; a bare ``seml_hydra.store.snapshot`` there is taken for
the old module). Running it twice changes nothing the second time. Prints
the files it changed; exits 2 on a file it cannot read.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

#: old module name under seml_hydra.store -> its new path under seml_hydra.store
MOVED = {
    **{m: f"server.{m}" for m in ("mongod", "embedded", "tunnel", "tunnel_worker", "known_hosts")},
    **{m: f"db.{m}" for m in ("settings", "client", "collections", "retry", "job_db")},
    **{m: f"snapshot.{m}" for m in ("gitinfo", "sources", "bytecode", "sacred_sources")},
    "snapshot": "snapshot.node",
}
#: the snapshot package's modules: ``seml_hydra.store.snapshot.<one of them>`` is already new
_SNAPSHOT_MODULES = "|".join(
    sorted(m.split(".")[1] for m in MOVED.values() if m.startswith("snapshot."))
)
_OLD = "|".join(sorted(MOVED, key=len, reverse=True))


def _dotted(prefix: str) -> str:
    """A pattern of ``<prefix>.<old module>`` (pure). Not when it names the new modules already:
    ``seml_hydra.store.snapshot.node`` and ``from seml_hydra.store.snapshot import node`` name
    the snapshot package's modules."""
    return (
        rf"{prefix}\.(?P<mod>{_OLD})\b(?!\.(?:{_SNAPSHOT_MODULES})\b)"
        rf"(?!\s+import\s+\(?\s*(?:{_SNAPSHOT_MODULES})\b)"
    )


_OLD_DOTTED = _dotted(r"seml_hydra\.store")

_FROM_MODULE = re.compile(rf"(?m)^(?P<head>\s*(?:from|import)\s+){_OLD_DOTTED}")
_FROM_PACKAGE = re.compile(
    r"(?m)^(?P<indent>[ \t]*)from\s+seml_hydra\.store\s+import\s+"
    r"(?:\((?P<group>[^)]*)\)|(?P<line>[^\n#]*[^\s#]))(?P<comment>[ \t]*#[^\n]*)?"
)
_EVERYWHERE = re.compile(_OLD_DOTTED)
#: the short form docstrings use, ``store.<mod>`` (not after a name or a dot)
_SHORT = re.compile(r"(?<![\w./])" + _dotted("store"))
_PATHS = re.compile(rf"seml_hydra/store/(?P<mod>{_OLD})\.py\b")


def _new(mod: str) -> str:
    return f"seml_hydra.store.{MOVED[mod]}"


def _split_names(match: re.Match[str]) -> str:
    """``from seml_hydra.store import a, b as c`` as one import line per new parent (pure)."""
    text = match["group"] if match["group"] is not None else match["line"]
    names = [n.strip() for n in text.replace("\n", " ").split(",") if n.strip()]
    by_parent: dict[str, list[str]] = {}
    for item in names:
        name, _, alias = (part.strip() for part in item.partition(" as "))
        parent, _, leaf = f"seml_hydra.store.{MOVED.get(name, name)}".rpartition(".")
        bound = alias or name
        by_parent.setdefault(parent, []).append(leaf if leaf == bound else f"{leaf} as {bound}")
    comment = match["comment"] or ""
    lines = [
        f"{match['indent']}from {parent} import {', '.join(items)}"
        for parent, items in by_parent.items()
    ]
    return "\n".join(lines) + comment


def rewrite(text: str, everywhere: bool = False) -> str:
    """``text`` with the store's old module paths made new (pure; see the module docstring)."""
    text = _FROM_PACKAGE.sub(_split_names, text)
    text = _FROM_MODULE.sub(lambda m: m["head"] + _new(m["mod"]), text)
    if everywhere:
        text = _EVERYWHERE.sub(lambda m: _new(m["mod"]), text)
        text = _SHORT.sub(lambda m: _new(m["mod"]).removeprefix("seml_hydra."), text)
        text = _PATHS.sub(
            lambda m: "seml_hydra/store/" + MOVED[m["mod"]].replace(".", "/") + ".py", text
        )
    return text


def main(argv: list[str]) -> int:
    everywhere = "--everywhere" in argv
    for name in (a for a in argv if a != "--everywhere"):
        path = Path(name)
        try:
            old = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            print(f"store_paths: cannot read {name}: {exc}", file=sys.stderr)
            return 2
        new = rewrite(old, everywhere)
        if new != old:
            path.write_text(new)
            print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
