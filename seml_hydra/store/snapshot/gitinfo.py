"""The ``git`` block of a document (SEML 0.5's ``GitDoc``): where the app's code came from."""

from __future__ import annotations

import subprocess
from pathlib import Path

from seml_hydra.core.documents import GitDoc
from seml_hydra.core.processes import run_captured


def _git(directory: Path, *args: str) -> str | None:
    try:
        out = run_captured(["git", "-C", str(directory), *args], timeout_s=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_toplevel(directory: str | Path) -> str | None:
    """The top-level directory of the git repository holding ``directory``, or ``None``."""
    return _git(Path(directory), "rev-parse", "--show-toplevel")


def git_info(directory: str | Path) -> GitDoc | None:
    """``{path, commit, dirty}`` of the git repository holding ``directory``, or ``None`` when it
    is not in one (or git is missing). ``path`` is the ``origin`` remote URL when there is one,
    else the repository's top-level directory; a repository without commits has commit ``""``.
    """
    directory = Path(directory)
    top = git_toplevel(directory)
    if top is None:
        return None
    remote = _git(directory, "config", "--get", "remote.origin.url")
    commit = _git(directory, "rev-parse", "HEAD") or ""
    status = _git(directory, "status", "--porcelain", "--untracked-files=no")
    return {"path": remote or top, "commit": commit, "dirty": bool(status)}
