"""Command lines the messages tell the user to run: values shell-quoted, ready to copy."""

from __future__ import annotations

import shlex


def seml_for(collection: object) -> str:
    """``seml <collection>``, the collection shell-quoted (``shlex.quote``; pure): what a hint
    such as "follow them with `seml my runs status`" starts with, so a collection name with a
    space or a ``;`` copied from the message manages that collection and runs nothing else.
    ``seml_for("my runs")`` -> ``"seml 'my runs'"``; ``seml_for("train")`` -> ``"seml train"``."""
    return f"seml {shlex.quote(str(collection))}"
