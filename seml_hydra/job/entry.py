"""What every job runs first: check the submitit folder and the pickle the job is about to
unpickle, then hand over to submitit (``submitit.core.submission.process_job``).

submitit's job command is ``<python> -u -m submitit.core._submit <folder>``; the launcher
sets ``python`` to ``<python> -u -c '<BOOTSTRAP>'`` (:func:`guarded_python`,
``launch.sbatch.executor_arguments``), so a job runs ``<python> -u -c '<BOOTSTRAP>' -u -m
submitit.core._submit <folder>``. Not ``-m``: for ``-m`` Python puts the working directory (the
launch directory) first on ``sys.path`` before any of our code runs, so a ``seml_hydra`` or
``submitit`` package another user planted there (``/tmp`` is writable by all) would run as you.
The bootstrap drops that entry, and :func:`main` puts the working directory back only when no
other user can add files to it (``core.paths.unsafe_import_dir``). Unpickling runs code: a ``*_submitted.pkl`` another user could write or swap (their file, a
link, a folder they own or can write) would run their code as the job's user, with the
user's database credentials. Such a pickle is refused with one line on stderr and exit code 1;
nothing is loaded (``core.paths.unsafe_file``). hydra-submitit-launcher and SEML load it
unchecked.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Sequence

from seml_hydra.core.jobenv import environment_problem, safe_path_problem
from seml_hydra.core.paths import unsafe_file, unsafe_import_dir

__all__ = ["BOOTSTRAP", "SUBMITIT_ARGS", "guarded_python", "main"]

#: the ``-c`` program every job starts with: no working directory on ``sys.path`` (empty
#: entries) before this module is imported from the installed package
BOOTSTRAP = (
    "import sys; sys.path[:] = [p for p in sys.path if p]; "
    "p, sys.pycache_prefix = sys.pycache_prefix, None; "
    "from seml_hydra.job.entry import main; sys.exit(main(pycache_prefix=p))"
)

#: what submitit puts between ``python`` and the folder (``SlurmExecutor._submitit_command_str``)
SUBMITIT_ARGS = ["-u", "-m", "submitit.core._submit"]
#: how long a job waits for its pickle to appear (submitit's own wait, ``process_job``)
PICKLE_WAIT_S = 60


def guarded_python(python: str) -> str:
    """The submitit ``python`` setting that runs this module before submitit: ``python``
    (a shell word or words, e.g. ``exec /opt/venv/bin/python`` or ``singularity exec img
    python``) followed by ``-u -c '<BOOTSTRAP>'`` (:data:`BOOTSTRAP`). Pure."""
    return f"{python} -u -c {shlex.quote(BOOTSTRAP)}"


def main(argv: Sequence[str] | None = None, *, pycache_prefix: str | None = None) -> int:
    """Check the job's pickle, then run it as submitit does. ``argv``: the arguments after the
    module (default ``sys.argv[1:]``): :data:`SUBMITIT_ARGS` and the folder. ``pycache_prefix``:
    the job's ``sys.pycache_prefix`` (``PYTHONPYCACHEPREFIX``), which :data:`BOOTSTRAP` turns
    off until the environment is judged, so no compiled module under a prefix others could
    write is loaded before; it is put back once the checks pass.

    Returns 1 (after one line on stderr) when the arguments are not submitit's, the job's
    ``PATH``, ``PYTHONPATH`` or ``LD_LIBRARY_PATH`` has an entry others can add files to
    (``core.jobenv.environment_problem``), its working directory is unsafe and its Python
    too old to keep it off its children's import path (``core.jobenv.safe_path_problem``),
    or the pickle is missing (its folder deleted or replaced since the launch) or fails
    :func:`seml_hydra.core.paths.unsafe_file`; otherwise what submitit's
    ``process_job`` does (it raises the task's error, which exits non-zero)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != len(SUBMITIT_ARGS) + 1 or args[:-1] != SUBMITIT_ARGS:
        print(f"seml-hydra: unexpected job command arguments {args!r}", file=sys.stderr)
        return 1
    folder = args[-1]
    cwd = os.getcwd()
    unsafe_cwd = unsafe_import_dir(cwd)
    problem = safe_path_problem(sys.version_info[:2], unsafe_cwd) or environment_problem(
        os.environ, cwd
    )
    if problem is not None:
        return _refuse(
            f"seml-hydra: not starting the job: {problem}; the task was not run (code Python "
            "itself loads at its start, such as a sitecustomize.py in such an entry, is "
            "loaded before this check: see the security model)."
        )
    sys.pycache_prefix = pycache_prefix
    if unsafe_cwd is None:  # where -m would have put it: the launch directory's modules
        sys.path.insert(0, cwd)
    else:  # nor on that of the Python processes the task starts (multiprocessing's workers)
        os.environ["PYTHONSAFEPATH"] = "1"
        print(
            f"seml-hydra: the job's working directory is not on the import path: {unsafe_cwd}",
            file=sys.stderr,
        )
    os.environ["SUBMITIT_FOLDER"] = folder
    from submitit.core.job_environment import JobEnvironment

    pickle = JobEnvironment().paths.submitted_pickle
    deadline = time.monotonic() + PICKLE_WAIT_S
    while not pickle.exists() and time.monotonic() < deadline:
        time.sleep(1)  # submitit waits as long for a pickle written after the job started
    if not os.path.lexists(pickle):
        return _refuse(
            f"seml-hydra: the job's pickle {pickle} is not there after {PICKLE_WAIT_S} s: its "
            "submitit folder was deleted or replaced after the launch; nothing was run. "
            "Launch the sweep again (or reset and start its experiments)."
        )
    problem = unsafe_file(pickle)
    if problem is not None:
        return _refuse(
            f"seml-hydra: not loading the job's pickle {pickle}: {problem}, so another user "
            "could have put their code there; nothing was run. Launch again with a sweep dir "
            "and submitit folder of yours."
        )
    from submitit.core.submission import process_job

    process_job(folder)
    return 0


def _refuse(line: str) -> int:
    """Print the one-line refusal ``line`` on stderr and stdout (where ``status`` and
    ``print-fail-trace`` read a killed job's reason); returns the exit code 1."""
    print(line, file=sys.stderr)
    print(line)
    return 1


if __name__ == "__main__":
    sys.exit(main())
