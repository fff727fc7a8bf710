"""What every job runs first: judge the job's environment, the submitit folder and the pickle
the job is about to unpickle, then hand over to submitit (``submitit.core.submission.process_job``).

submitit's job command is ``<python> -u -m submitit.core._submit <folder>``; the launcher
sets ``python`` to ``<python> -S -u -c '<GUARD>'`` (:func:`guarded_python`,
``launch.sbatch.executor_arguments``), so a job runs ``<python> -S -u -c '<GUARD>' -u -m
submitit.core._submit <folder>`` in two steps:

1. :data:`GUARD`, in a Python started without ``site`` (``-S``): nothing from a ``PYTHONPATH``
   entry, the working directory or the user site (``PYTHONUSERBASE``) is importable yet. It
   takes those off ``sys.path``, runs ``site`` without the user site (the interpreter's own
   site-packages, where ``seml_hydra`` is installed), and :func:`guard` judges the environment
   (``core.jobenv``). A ``sitecustomize.py``, a ``usercustomize.py`` or a module shadowing the
   standard library (``shlex.py``) another user planted in an entry opened to others since the
   launch is never imported: the job is refused first. Python's documented way to run ``site``
   later (``site.main()`` "can be called manually" after ``-S``).
2. :func:`guard` then replaces the process (``os.execv``, the same pid: Slurm's and submitit's
   signals still reach it) with the same Python, the same interpreter options but ``-S``, and
   ``-u -c '<BOOTSTRAP>'``: a normal start (``site`` with the user site and ``PYTHONPATH``, and
   ``sys.flags.no_site`` off, so the task's own Python children, multiprocessing's workers
   included, start as usual), where :func:`main` judges again and runs the pickle.

Not ``-m``: for ``-m`` Python puts the working directory (the launch directory) first on
``sys.path`` before any of our code runs, so a ``seml_hydra`` or ``submitit`` package another
user planted there (``/tmp`` is writable by all) would run as you. The bootstraps drop that
entry, and :func:`main` puts the working directory back only when no other user can add files
to it (``core.paths.unsafe_import_dir``). Unpickling runs code: a ``*_submitted.pkl`` another
user could write or swap (their file, a link, a folder they own or can write) would run their
code as the job's user, with the user's database credentials. Such a pickle is refused with one
line on stderr and exit code 1; nothing is loaded (``core.paths.unsafe_file``).
hydra-submitit-launcher and SEML load it unchecked.

What runs before any check, and so is not judged: the interpreter's own start (its standard
library, ``PYTHONHOME``, ``LD_PRELOAD``), the site-packages of the job's Python (a ``.pth``
file or ``sitecustomize.py`` in a virtualenv others can write), and ``seml_hydra`` itself when
it is found only on ``PYTHONPATH`` (:data:`GUARD`).
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Sequence

from seml_hydra.core.jobenv import environment_problem, safe_path_problem
from seml_hydra.core.paths import unsafe_file, unsafe_import_dir

__all__ = ["BOOTSTRAP", "GUARD", "SUBMITIT_ARGS", "guard", "guarded_python", "main"]

#: the ``-c`` program every job starts with: no working directory on ``sys.path`` (empty
#: entries) before this module is imported from the installed package
BOOTSTRAP = (
    "import sys; sys.path[:] = [p for p in sys.path if p]; "
    "p, sys.pycache_prefix = sys.pycache_prefix, None; "
    "from seml_hydra.job.entry import main; sys.exit(main(pycache_prefix=p))"
)

#: the ``-c`` program a job's Python started with ``-S`` runs first (step 1 of the module's
#: docstring): no working directory, ``PYTHONPATH`` entry or user site on ``sys.path`` and no
#: ``PYTHONPYCACHEPREFIX`` while ``site`` runs and :func:`guard` judges. A ``seml_hydra``
#: found only on ``PYTHONPATH`` (a checkout put there instead of installed) comes from the
#: first entry holding it, put last on ``sys.path``: after the standard library, so nothing
#: else there shadows what the check imports
GUARD = (
    "import os, sys; sys.pycache_prefix = None; "
    "e = [os.path.abspath(p) for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]; "
    "sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) not in e]; "
    "import site; site.ENABLE_USER_SITE = False; site.main(); "
    "from importlib.util import find_spec; "
    "sys.path += [] if find_spec('seml_hydra') else "
    "[p for p in e if os.path.isdir(os.path.join(p, 'seml_hydra'))][:1]; "
    "from seml_hydra.job.entry import guard; sys.exit(guard())"
)

#: what submitit puts between ``python`` and the folder (``SlurmExecutor._submitit_command_str``)
SUBMITIT_ARGS = ["-u", "-m", "submitit.core._submit"]
#: how long a job waits for its pickle to appear (submitit's own wait, ``process_job``)
PICKLE_WAIT_S = 60


def guarded_python(python: str) -> str:
    """The submitit ``python`` setting that runs this module before submitit: ``python``
    (a shell word or words, e.g. ``exec /opt/venv/bin/python`` or ``singularity exec img
    python``) followed by ``-S -u -c '<GUARD>'`` (:data:`GUARD`, which goes on with
    :data:`BOOTSTRAP`). Pure."""
    return f"{python} -S -u -c {shlex.quote(GUARD)}"


def guard(argv: Sequence[str] | None = None) -> int:
    """Step 1 of a job (the module's docstring), run by :data:`GUARD` in a Python started with
    ``-S``: judge the environment as :func:`main` does, then replace this process with the same
    Python started normally on :data:`BOOTSTRAP` and the same arguments. ``argv``: the
    arguments after the program (default ``sys.argv[1:]``: :data:`SUBMITIT_ARGS` and the
    folder).

    Returns 1 (after one line on stderr and stdout) when the arguments are not submitit's or
    the environment is refused (:func:`_environment_refusal`); otherwise does not return
    (``os.execv``; an ``OSError`` of it propagates)."""
    args = list(sys.argv[1:] if argv is None else argv)
    cwd = os.getcwd()
    refusal = _arguments_refusal(args) or _environment_refusal(cwd, unsafe_import_dir(cwd))
    if refusal is not None:
        return _refuse(refusal)
    os.execv(sys.executable, [sys.executable, *interpreter_options(sys.orig_argv), "-c",
                              BOOTSTRAP, *args])  # fmt: skip
    return 1  # not reached


def interpreter_options(orig_argv: Sequence[str]) -> list[str]:
    """The interpreter options of a job's Python started by :func:`guarded_python` (pure):
    ``orig_argv`` (``sys.orig_argv``: ``[python, *options, "-S", "-u", "-c", GUARD, ...]``)
    between the executable and ``-c``, without the ``-S`` :func:`guarded_python` added (the
    last one), e.g. ``["-X", "importtime", "-u"]``."""
    options = list(orig_argv[1 : orig_argv.index("-c")])
    if "-S" in options:
        del options[len(options) - 1 - options[::-1].index("-S")]
    return options


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
    if (refusal := _arguments_refusal(args)) is not None:
        print(refusal, file=sys.stderr)
        return 1
    folder = args[-1]
    cwd = os.getcwd()
    unsafe_cwd = unsafe_import_dir(cwd)
    if (refusal := _environment_refusal(cwd, unsafe_cwd)) is not None:
        return _refuse(refusal)
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


def _arguments_refusal(args: Sequence[str]) -> str | None:
    """The line refusing job arguments that are not :data:`SUBMITIT_ARGS` and a folder; None
    when they are (pure)."""
    if len(args) != len(SUBMITIT_ARGS) + 1 or list(args[:-1]) != SUBMITIT_ARGS:
        return f"seml-hydra: unexpected job command arguments {list(args)!r}"
    return None


def _environment_refusal(cwd: str, unsafe_cwd: str | None) -> str | None:
    """The one line refusing this job's environment (``os.environ``, working directory
    ``cwd``; ``unsafe_cwd``: ``core.paths.unsafe_import_dir(cwd)``):
    its Python is too old to keep an unsafe working directory off its children's import path
    (``core.jobenv.safe_path_problem``) or a search-path variable has an entry others can add
    files to (``core.jobenv.environment_problem``). None when it may run."""
    problem = safe_path_problem(sys.version_info[:2], unsafe_cwd) or environment_problem(
        os.environ, cwd
    )
    if problem is None:
        return None
    return (
        f"seml-hydra: not starting the job: {problem}; the task was not run (what Python "
        "loads at its start before this check is named in the security model)."
    )


def _refuse(line: str) -> int:
    """Print the one-line refusal ``line`` on stderr and stdout (where ``status`` and
    ``print-fail-trace`` read a killed job's reason); returns the exit code 1."""
    print(line, file=sys.stderr)
    print(line)
    return 1


if __name__ == "__main__":
    sys.exit(main())
