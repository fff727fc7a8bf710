"""Text from documents, Slurm or a job's output made safe to print on a terminal (pure).

Here in ``core`` (not beside the output readers of ``track.outputs``, which re-exports it) so
that the ``seml`` command's modules use it without importing anything else at start-up."""

from __future__ import annotations

import re

# ANSI/ECMA-48 sequences: CSI (ESC [ ... final), OSC/DCS/SOS/PM/APC strings (ESC ] P X ^ _ up to
# BEL or ST, or the line's end), other ESC sequences, and their 8-bit C1 forms
_ESCAPE_SEQUENCES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b[\]PX^_][^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
    r"|\x9b[0-?]*[ -/]*[@-~]?"
    r"|[\x90\x98\x9d\x9e\x9f][^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
)

_CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """``text`` without terminal escape sequences (colours, cursor moves, title or clipboard
    changes: ``\\x1b[...``, ``\\x1b]...``) and control characters, except newline and tab; a
    carriage return becomes a newline (so a progress bar's updates stay visible instead of
    overwriting each other). For printing what a document or a job's output holds. Pure."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL_CHARACTERS.sub("", _ESCAPE_SEQUENCES.sub("", text))
