"""What every job runs first: judge the job's environment, the submitit folder and the pickle
the job is about to unpickle, then hand over to submitit (``submitit.core.submission.process_job``).

submitit's job command is ``<python> -u -m submitit.core._submit <folder>``; the launcher
sets ``python`` to ``<python> -I -S -u -c '<program>'`` (:func:`guarded_python`,
``launch.sbatch.executor_arguments``), so a job runs ``<python> -I -S -u -c '<program>' -u -m
submitit.core._submit <folder>`` in two steps:

1. :func:`guard_program`, in an isolated Python (``-I``: no ``PYTHON*`` variable, no working
   directory, no user site) started without ``site`` (``-S``): nothing from a ``PYTHONPATH``
   entry, ``PYTHONPYCACHEPREFIX``, ``PYTHONHOME``, ``PYTHONWARNINGS``, the working directory or
   the user site is imported, not even while the interpreter starts (its ``encodings``). It
   runs ``site`` (the interpreter's own site-packages, where ``seml_hydra`` is installed;
   Python's documented way: ``site.main()`` "can be called manually" after ``-S``), and
   :func:`guard` judges the environment (``core.jobenv``). A ``sitecustomize.py``,
   ``usercustomize.py``, ``.pth`` file or a module shadowing the standard library another user
   planted in an entry opened to others since the launch is never imported: the job is refused
   first.
2. :func:`guard` then replaces the process (``os.execv``, the same pid: Slurm's and submitit's
   signals still reach it) with the same Python, the same interpreter options but ``-I -S``, and
   ``-u -c '<BOOTSTRAP>'``: a normal start (``site`` with the user site and ``PYTHONPATH``,
   ``sys.flags.no_site`` and ``isolated`` off, so the task's own Python children,
   multiprocessing's workers included, start as usual), where :func:`main` judges again and
   runs the pickle.

Not ``-m``: for ``-m`` Python puts the working directory (the launch directory) first on
``sys.path`` before any of our code runs, so a ``seml_hydra`` or ``submitit`` package another
user planted there (``/tmp`` is writable by all) would run as you. The bootstraps drop that
entry, and :func:`main` puts the working directory back only when no other user can add files
to it (``core.paths.unsafe_import_dir``). Unpickling runs code: a ``*_submitted.pkl`` another
user could write or swap (their file, a link, a folder they own or can write) would run their
code as the job's user, with the user's database credentials. Such a pickle is refused with one
line on stderr and exit code 1; nothing is loaded (``core.paths.unsafe_file``).
hydra-submitit-launcher and SEML load it unchecked.

What runs before any check, and so is not judged: the interpreter itself and the libraries it
links (``LD_LIBRARY_PATH``, ``LD_PRELOAD``), its standard library and site-packages (a ``.pth``
file or ``sitecustomize.py`` in a virtualenv others can write), and ``seml_hydra`` itself when
the job's Python has it only from the launch's package directory (:func:`guard_program`).
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Sequence

from seml_hydra.core.jobenv import environment_problem, safe_path_problem
from seml_hydra.core.paths import unsafe_file, unsafe_import_dir

__all__ = ["BOOTSTRAP", "SUBMITIT_ARGS", "guard", "guard_program", "guarded_python", "main"]

#: the ``-c`` program every job starts with: no working directory on ``sys.path`` (empty
#: entries) before this module is imported from the installed package
BOOTSTRAP = (
    "import sys; sys.path[:] = [p for p in sys.path if p]; "
    "p, sys.pycache_prefix = sys.pycache_prefix, None; "
    "from seml_hydra.job.entry import main; sys.exit(main(pycache_prefix=p))"
)


def guard_program(root: str | None = None) -> str:
    """The ``-c`` program a job's Python started with ``-I -S`` runs first (step 1 of the
    module's docstring; pure): no ``PYTHON*`` variable (``PYTHONPATH``, ``PYTHONHOME``,
    ``PYTHONPYCACHEPREFIX``, ``PYTHONWARNINGS``...), working directory or user site counts
    while the interpreter starts, ``site`` runs (the interpreter's own site-packages) and
    :func:`guard` judges. ``root``: the directory holding the ``seml_hydra`` package the
    launch ran (default: this one's), where a job's Python without seml-hydra installed (a
    checkout put on ``PYTHONPATH``) imports it from, put last on ``sys.path``. Not from a
    ``PYTHONPATH`` entry, which is not judged yet: a job whose Python has seml-hydra neither
    installed nor at ``root`` (another machine's path) exits 1 with one line saying so."""
    if root is None:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    missing = (
        "seml-hydra: the job's Python has no seml_hydra installed, nor at "
        f"{root} (where the launch imported it from); the task was not run. Install "
        "seml-hydra into the Python the jobs run (hydra.launcher.python)."
    )
    return (
        "import os, sys; sys.pycache_prefix = None; sys.path[:] = [p for p in sys.path if p]; "
        "import site; site.main(); from importlib.util import find_spec; "
        f"r = {root!r}; "
        "h = os.path.isfile(os.path.join(r, 'seml_hydra', 'job', 'entry.py')); "
        "sys.path += [] if find_spec('seml_hydra') or not h else [r]; "
        f"find_spec('seml_hydra') or sys.exit({missing!r}); "
        "from seml_hydra.job.entry import guard; sys.exit(guard())"
    )


#: what submitit puts between ``python`` and the folder (``SlurmExecutor._submitit_command_str``)
SUBMITIT_ARGS = ["-u", "-m", "submitit.core._submit"]
#: how long a job waits for its pickle to appear (submitit's own wait, ``process_job``)
PICKLE_WAIT_S = 60


def guarded_python(python: str) -> str:
    """The submitit ``python`` setting that runs this module before submitit: ``python``
    (a shell word or words, e.g. ``exec /opt/venv/bin/python`` or ``singularity exec img
    python``) followed by ``-I -S -u -c '<program>'`` (:func:`guard_program`, which goes on
    with :data:`BOOTSTRAP`). Pure."""
    return f"{python} -I -S -u -c {shlex.quote(guard_program())}"


def guard(argv: Sequence[str] | None = None) -> int:
    """Step 1 of a job (the module's docstring), run by :func:`guard_program` in a Python
    started with ``-I -S``: judge the environment as :func:`main` does, then replace this
    process with the same Python started normally on :data:`BOOTSTRAP` and the same
    arguments. ``argv``: the arguments after the program (default ``sys.argv[1:]``:
    :data:`SUBMITIT_ARGS` and the folder).

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
    ``orig_argv`` (``sys.orig_argv``: ``[python, *options, "-I", "-S", "-u", "-c", program,
    ...]``) between the executable and ``-c``, without the ``-I`` and ``-S``
    :func:`guarded_python` added (the last of each), e.g. ``["-X", "importtime", "-u"]``."""
    options = list(orig_argv[1 : orig_argv.index("-c")])
    for added in ("-I", "-S"):
        if added in options:
            del options[len(options) - 1 - options[::-1].index(added)]
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
