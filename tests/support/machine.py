"""What the machine shares between test processes: machine-wide locks and the second local
user the shared-cluster tests act as."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

#: the unprivileged local account the shared-cluster tests act as (another user of the cluster)
OTHER_USER = "semlother"
#: a world-readable virtualenv (Debian's python3 + pymongo) the other user runs Python from
OTHER_VENV = Path("/opt/seml-hydra-other-venv")


def machine_lock(name: str):
    """A lock file ``/tmp/seml-hydra-test-<name>.lock`` (``filelock.FileLock``, a context
    manager): a set-up step shared by every pytest process of the machine (xdist workers, other
    test runs: creating a user, installing a cached venv) runs in one of them at a time."""
    import filelock

    return filelock.FileLock(f"/tmp/seml-hydra-test-{name}.lock")


class OtherUser:
    """A second, unprivileged local user of this machine (``useradd``), to attack as.

    Attributes: ``name``, ``uid``, ``gid``, ``home`` (a ``Path``). :meth:`run` runs a command as
    that user through ``runuser -u`` (the test suite runs as root, so no password is asked);
    :meth:`python` runs Python code as that user with :data:`OTHER_VENV`'s interpreter (the
    suite's own interpreter lives under root's 0700 home; that venv has pymongo).
    """

    def __init__(self, name: str) -> None:
        import pwd

        entry = pwd.getpwnam(name)
        self.name, self.uid, self.gid = name, entry.pw_uid, entry.pw_gid
        self.home = Path(entry.pw_dir)

    def run(self, *args: str, check: bool = False, timeout: float = 60, **kwargs):
        """``runuser -u <name> -- *args``; returns CompletedProcess (text output)."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home)}
        env.update(kwargs.pop("env", {}))
        return subprocess.run(
            ["runuser", "-u", self.name, "--", *args],
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
            env=env,
            cwd=kwargs.pop("cwd", "/"),
            **kwargs,
        )

    def python(self, code: str, *args: str, **kwargs):
        """Run ``code`` as that user with :data:`OTHER_VENV`'s Python (it has pymongo)."""
        return self.run(str(OTHER_VENV / "bin" / "python"), "-c", code, *args, **kwargs)


def create_other_user() -> None:
    """``useradd`` :data:`OTHER_USER` and make :data:`OTHER_VENV` unless they exist (the caller
    holds ``machine_lock("other-user")``)."""
    import pwd

    try:
        pwd.getpwnam(OTHER_USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", OTHER_USER], check=True)
    if not (OTHER_VENV / "bin" / "python").exists():
        python = shutil.which("python3", path="/usr/bin:/bin") or "python3"
        subprocess.run([python, "-m", "venv", str(OTHER_VENV)], check=True)
        subprocess.run(
            [
                str(OTHER_VENV / "bin" / "pip"),
                "install",
                "-q",
                "--disable-pip-version-check",
                "pymongo>=4",
            ],
            check=True,
        )
