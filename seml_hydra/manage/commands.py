"""``print-command``: the shell command that runs a stored experiment by hand (SEML's
``print-command``, ``seml.commands.print.print_command``), built from its document alone.

An experiment the launcher staged is one Hydra run of the app: ``seml.executable`` (the
launch's absolute ``argv[0]``) started in ``seml.working_dir`` with the point's task overrides
(``hydra.overrides``), so ``cd <working_dir> && python <executable> <overrides>`` composes the
same config again, here, with the app's default launcher (no Slurm, no document). As in SEML,
the command comes *resolved* (each override of a config value gives the value the experiment
ran with, ``config``: interpolations and resolvers such as ``${oc.env:...}`` already applied)
or ``--unresolved`` (the overrides as they were written). Config-group selections
(``model=small``) and deletions (``~key``) are the same in both. Every word is quoted with
:func:`shlex.quote`, or, when it holds a control or invisible formatting character (a ``\r``
from a document would otherwise split the visible line), in bash's ANSI-C form ``$'...'``
(:func:`shell_word`). Pure but :func:`commands_for`.

Not part of the command: the Slurm resources and environment (``hydra.launcher.setup``), the
code snapshot the job ran (the working tree's current files run; ``restore-sources`` writes
the snapshot), and the seeding the job does with the document's ``seed`` (``random``,
``numpy``, ``torch``; ``job.rank``) when the app has no ``seed`` of its own.
"""

from __future__ import annotations

import math
import re
import shlex
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from seml_hydra.core.overrides import parse_override
from seml_hydra.manage.selection import ManageError
from seml_hydra.track.query import select

#: a string Hydra's override grammar reads back as the same string without quotes
_BARE = re.compile(r"[A-Za-z_/][A-Za-z0-9_./:\-]*")
#: bare words Hydra reads as another type
_KEYWORDS = {"null", "true", "false", "inf", "nan", "+inf", "-inf"}
_MISSING = object()


def override_value(value: Any) -> str:
    """``value`` (a resolved config value: JSON-like) written in Hydra's override grammar, so
    that ``key=<text>`` sets exactly ``value`` (pure). Strings are quoted (``'...'``, with
    ``\\`` and ``'`` escaped and ``$`` escaped so nothing is interpolated again) unless bare
    text reads back as the same string; lists and mappings are written element by element.

    Examples: ``0.1`` -> ``0.1``, ``"small"`` -> ``small``, ``"a b"`` -> ``'a b'``, ``"1"`` ->
    ``'1'``, ``None`` -> ``null``, ``[1, "x"]`` -> ``[1,x]``, ``{"a": 1}`` -> ``{a:1}``.
    Raises ``ValueError`` for a mapping key the grammar cannot write (``"a b"``).
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(override_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        items = (f"{_key(k)}:{override_value(v)}" for k, v in value.items())
        return "{" + ",".join(items) + "}"
    text = str(value)
    if _BARE.fullmatch(text) and text.lower() not in _KEYWORDS:
        return text
    # Hydra's quoted strings: a backslash is literal unless it precedes a quote or ends the
    # string; OmegaConf reads ``\${`` as a literal ``${``
    escaped = re.sub(r"(\\*)('|$)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), text)
    escaped = re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", escaped)
    return f"'{escaped}'"


def _key(key: Any) -> str:
    text = str(key)
    if not _BARE.fullmatch(text):
        raise ValueError(f"{text!r} cannot be a key in Hydra's override grammar")
    return text


def _lookup(config: Mapping[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def resolved_override(text: str, config: Mapping[str, Any], choices: Mapping[str, Any]) -> str:
    """Override ``text`` with the value ``config`` holds for its key (pure): ``lr=${base}``
    -> ``lr=0.01``. Kept as written: a config-group selection (its key in ``choices``, i.e.
    ``hydra.runtime.choices``), a deletion (``~key``), a key the config does not have, and a
    mapping value (a group's or a whole node's: the override already says it). The ``+``/``++``
    prefix and a ``@package`` stay. Raises Hydra's ``OverrideParseException`` on a malformed
    override."""
    override = parse_override(text)
    key = override.key_or_group
    if override.is_delete() or key in choices or override.package is not None:
        return text
    value = _lookup(config, key)
    if value is _MISSING or isinstance(value, Mapping):
        return text
    try:
        written = override_value(value)
    except ValueError:  # a mapping key the grammar cannot write: the override says it
        return text
    prefix = "++" if override.is_force_add() else "+" if override.is_add() else ""
    return f"{prefix}{key}={written}"


def _resolved(exp_id: Any, text: str, config: Mapping[str, Any], choices: Mapping[str, Any]) -> str:
    """:func:`resolved_override` of experiment ``exp_id``'s override ``text``; a malformed one
    (Hydra's ``OverrideParseException``: a document Hydra did not write) is a
    :class:`ManageError` naming the experiment and the override (``repr``: no control
    characters reach the terminal)."""
    from hydra.errors import OverrideParseException

    try:
        return resolved_override(text, config, choices)
    except OverrideParseException:
        raise ManageError(
            f"Experiment {exp_id} has a malformed override {text!r} in hydra.overrides "
            "(not written by Hydra); --unresolved prints the overrides as stored."
        ) from None


#: escapes of bash's ANSI-C quoting (``$'...'``) for the characters that have a short one
_ANSI_C = {"\\": "\\\\", "'": "\\'", "\a": "\\a", "\b": "\\b", "\x1b": "\\e"}
_ANSI_C.update({"\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"})
#: Unicode categories that change or hide what a terminal shows: controls (``\r``, ``\x1b``,
#: C1), formatting (bidirectional overrides, zero-width characters), line/paragraph separators
_HIDDEN = {"Cc", "Cf", "Zl", "Zp"}


def shell_word(word: str) -> str:
    r"""``word`` quoted for a POSIX shell so that the printed command both shows every
    character and gives back exactly ``word`` when pasted (pure): :func:`shlex.quote`
    unless ``word`` holds a control or invisible formatting character (Unicode categories
    Cc, Cf, Zl, Zp: ``\r``, ``\n``, ``\x1b``, a bidirectional override), which bash's
    ANSI-C quoting ``$'...'`` writes as an escape: ``\r``, ``\e``, ``\x01`` for other ASCII
    ones, ``\u202e`` beyond ASCII (bash >= 4.2 and zsh read ``\u`` in a UTF-8 locale).

    Example: ``shell_word("a\rb")`` is ``$'a\rb'`` (6 characters); ``shell_word("a b")`` is
    ``'a b'``.
    """
    if not any(unicodedata.category(ch) in _HIDDEN for ch in word):
        return shlex.quote(word)
    out = []
    for ch in word:
        if ch in _ANSI_C:
            out.append(_ANSI_C[ch])
        elif unicodedata.category(ch) not in _HIDDEN:
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return "$'" + "".join(out) + "'"


@dataclass(frozen=True)
class RunCommand:
    """One experiment's command: its ``exp_id``, ``status``, the ``working_dir`` it runs in and
    ``argv`` (``["python", executable, *overrides]``); :attr:`shell` is the command line."""

    exp_id: Any
    status: Any
    working_dir: str | None
    argv: list[str]
    from_python: bool = False

    @property
    def shell(self) -> str:
        """``cd <working_dir> && python <executable> <overrides>``, each word quoted with
        :func:`shell_word` (no ``cd`` when the document names no working dir). An experiment
        launched from Python (``seml.launched_from_python``: hydra-zen's ``launch(...)``) has
        no such command (the script would run its whole sweep again): a ``#`` line saying so,
        with the point's overrides to give to ``launch(..., overrides=[...])``."""
        if self.from_python:
            return (
                "# launched from Python (e.g. hydra-zen's launch()), not from a command line: "
                "running the script would run its whole sweep again; this point's overrides, "
                f"for launch(..., overrides=[...]): {self.argv[2:]!r}"
            )
        line = " ".join(map(shell_word, self.argv))
        return f"cd {shell_word(self.working_dir)} && {line}" if self.working_dir else line


def run_command(doc: Mapping[str, Any], *, unresolved: bool = False) -> RunCommand:
    """The command that runs experiment ``doc`` by hand (pure; see the module docstring).

    Args:
        doc: the experiment document (``_id``, ``status``, ``seml.executable``,
            ``seml.working_dir``, ``hydra.overrides``, ``hydra.choices``, ``config``).
        unresolved: the overrides as written instead of the values the experiment ran with.

    Raises :class:`ManageError` when the document was not staged by a Hydra app (SEML's own,
    with no ``hydra`` block), names no executable, or (resolved) holds a malformed override.
    """
    seml = doc.get("seml") if isinstance(doc.get("seml"), Mapping) else {}
    hydra = doc.get("hydra")
    executable = seml.get("executable")  # type: ignore[union-attr]
    if not isinstance(hydra, Mapping) or not isinstance(hydra.get("overrides"), list):
        raise ManageError(
            f"Experiment {doc.get('_id')} was not staged by a Hydra app (no hydra.overrides); "
            "SEML's own `seml <collection> print-command` prints the command of SEML's "
            "experiments."
        )
    if not isinstance(executable, str) or not executable:
        raise ManageError(f"Experiment {doc.get('_id')} names no executable (seml.executable).")
    overrides = [str(o) for o in hydra["overrides"]]
    if not unresolved:
        config = doc.get("config") if isinstance(doc.get("config"), Mapping) else {}
        choices = hydra.get("choices") if isinstance(hydra.get("choices"), Mapping) else {}
        overrides = [_resolved(doc.get("_id"), o, config, choices) for o in overrides]  # type: ignore[arg-type]
    workdir = seml.get("working_dir")  # type: ignore[union-attr]
    return RunCommand(
        exp_id=doc.get("_id"),
        status=doc.get("status"),
        working_dir=workdir if isinstance(workdir, str) and workdir else None,
        argv=["python", executable, *overrides],
        from_python=seml.get("launched_from_python") is True,  # type: ignore[union-attr]
    )


#: the fields :func:`run_command` reads
COMMAND_FIELDS = {
    "_id": 1,
    "status": 1,
    "config": 1,
    "hydra.overrides": 1,
    "hydra.choices": 1,
    "seml.executable": 1,
    "seml.working_dir": 1,
    "seml.launched_from_python": 1,
}


def commands_for(
    collection: Any, query: Mapping[str, Any], *, unresolved: bool = False, limit: int = 0
) -> list[RunCommand]:
    """:func:`run_command` of the experiments matching ``query`` (by ``_id``; at most
    ``limit``, 0 = all). Raises :class:`ManageError` when none match."""
    docs: Sequence[Mapping[str, Any]] = select(collection, query, COMMAND_FIELDS)
    if not docs:
        raise ManageError("No experiments match the filters.")
    return [run_command(doc, unresolved=unresolved) for doc in docs[: limit or None]]
