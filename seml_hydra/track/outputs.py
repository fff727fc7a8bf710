"""Reading the output files a document (or a submitit job) names, safely, and the one builder
of a KILLED experiment's ``fail_trace`` (:func:`killed_trace`), used by both the launcher's wait
(``seml_hydra.track.killed.mark_dead_jobs``) and ``detect_killed``.

:func:`read_output_tail` never reads a file a forged document could point at (another user's,
a symlink, outside the experiment's output folder, not its own job's output);
:func:`terminal_safe` (``core.terminal``, re-exported here) strips escape sequences before
anything read is printed.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seml_hydra.core.terminal import terminal_safe as terminal_safe  # re-exported

#: lines of the job's output kept as ``fail_trace`` of a KILLED experiment
TRACE_LINES = 40

#: bytes read at most from the end of a job's output file for a ``fail_trace``
TRACE_TAIL_BYTES = 64 * 1024

#: bytes read at most from the end of an output file by ``print-output``
OUTPUT_TAIL_BYTES = 1024 * 1024

#: names of the job output files that may be read: submitit's ``<job>_<task>_log.out`` /
#: ``.err``, SEML 0.5's ``<name>_<job>.out``
OUTPUT_SUFFIXES = (".out", ".err")


@dataclass(frozen=True)
class FileTail:
    """What :func:`read_output_tail` read: ``data`` (the file's last bytes, ``None`` when
    nothing was read), ``skipped`` (bytes before them left out) and ``problem`` (why nothing was
    read: the reason a path was refused, or the system's error text)."""

    data: bytes | None
    skipped: int = 0
    problem: str | None = None


def output_folder(doc: Mapping[str, Any]) -> str | None:
    """The experiment's own output folder: ``seml.output_dir`` (our submitit folder, recorded at
    staging; SEML 0.5's output directory) cut before its first component holding a submitit
    placeholder such as ``%j``, ``~`` expanded and made absolute against ``seml.working_dir``
    (as SEML does). ``None`` when the document names none, or only ``/``."""
    seml = doc.get("seml")
    folder = seml.get("output_dir") if isinstance(seml, Mapping) else None
    if not isinstance(folder, str) or not folder:
        return None
    folder = os.path.expanduser(folder)  # SEML expands it as well
    if not os.path.isabs(folder):
        workdir = seml.get("working_dir")  # type: ignore[union-attr]
        if not isinstance(workdir, str) or not os.path.isabs(workdir):
            return None
        folder = os.path.join(workdir, folder)
    parts = []
    for part in Path(folder).parts:
        if "%" in part:
            break
        parts.append(part)
    fixed = os.path.normpath(os.path.join(*parts)) if parts else "/"
    return None if fixed == "/" else fixed


def recorded_jobs(doc: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(array id, task id)`` of every Slurm task the document records for the experiment:
    ``execution.array_id/task_id`` (written by the job) and ``slurm[0].array_id/task_id`` (the
    submission), as digit strings; ids that are not whole numbers are left out. Pure."""
    slurm = doc.get("slurm")
    first = slurm[0] if isinstance(slurm, list) and slurm else slurm
    execution = doc.get("execution")
    out: list[tuple[str, str]] = []
    for where in (execution, first):
        if not isinstance(where, Mapping) or where.get("array_id") is None:
            continue
        array, task = str(where.get("array_id")), str(where.get("task_id", 0))
        if array.isdigit() and task.isdigit() and (array, task) not in out:
            out.append((array, task))
    return out


def own_output_names(doc: Mapping[str, Any], *, seml_output_file: bool = False) -> re.Pattern[str]:
    """The names (basenames) the job output files of the experiment's own recorded jobs
    (:func:`recorded_jobs`) may have, as a pattern to ``fullmatch``. Pure.

    - submitit's ``<job id>_<rank>_log.out`` / ``.err``, the job id being
      ``<array>_<task>`` (an array task) or ``<array>`` (a single job, task 0): submitit's
      ``%j_%t_log.out`` (``submitit.core.utils.JobPaths``);
    - SEML 0.5's Slurm output ``<name>_<array>_<task>.out`` (``--output <dir>/<name>_%A_%a.out``);
    - with ``seml_output_file``, also SEML 0.5's own ``seml.output_file``,
      ``<name>_<experiment _id>.out``.

    A document without a recorded job (and no ``seml_output_file``) matches nothing.
    """
    alternatives = []
    for array, task in recorded_jobs(doc):
        for job in (f"{array}_{task}", array) if task == "0" else (f"{array}_{task}",):
            alternatives.append(re.escape(job) + r"_\d+_log\.(?:out|err)")
        alternatives.append(r".+_" + re.escape(f"{array}_{task}") + r"\.out")
    exp_id = doc.get("_id")
    if seml_output_file and isinstance(exp_id, int) and not isinstance(exp_id, bool):
        alternatives.append(rf".+_{exp_id}\.out")
    return re.compile("|".join(f"(?:{a})" for a in alternatives) or r"(?!)")


def read_output_tail(
    path: str | os.PathLike[str] | None,
    folder: str | os.PathLike[str] | None,
    *,
    names: re.Pattern[str] | None = None,
    max_bytes: int = TRACE_TAIL_BYTES,
    head: bool = False,
) -> FileTail:
    """The last ``max_bytes`` bytes (with ``head``: the first ones) of a job output file a document (or a job) names, read only
    when it is safe to: an absolute path named ``*.out`` / ``*.err`` (:data:`OUTPUT_SUFFIXES`),
    not a symlink, inside ``folder`` (the experiment's output folder, :func:`output_folder`;
    compared after resolving both, so no symlink or ``..`` leads out of it), whose basename
    ``fullmatch`` es ``names`` (for a document: :func:`own_output_names`, the output names of
    its own recorded job, since the folder comes from the same document), and, opened without
    following a symlink nor blocking on a FIFO, a regular file owned by this user with no other
    hard link (another user can hard-link a private file of yours, such as
    ``~/.config/seml/mongodb.config``, into a folder of theirs where ``fs.protected_hardlinks``
    is off) and still inside the folder once open (``/proc/self/fd``). So a forged
    document cannot make ``status`` or ``print-output`` copy ``~/.ssh/id_ed25519``, another
    user's file, or any file of this user that is not its own job's output into the database or
    onto the screen.

    Returns a :class:`FileTail`: the bytes, or ``problem`` saying why nothing was read (never
    raises for a bad or missing file).
    """

    if not path:
        return FileTail(None, problem="no output file")
    path = os.fspath(path)
    if not folder:
        return FileTail(None, problem="not read: the experiment names no output folder")
    folder = os.fspath(folder)
    if not os.path.isabs(path) or not os.path.isabs(folder):
        return FileTail(None, problem="not read: not an absolute path")
    if not path.endswith(OUTPUT_SUFFIXES):
        return FileTail(None, problem="not read: not a job output file (*.out, *.err)")
    try:
        if os.path.islink(path):
            return FileTail(None, problem="not read: a symbolic link")
        real, root = os.path.realpath(path), os.path.realpath(folder)
        if os.path.commonpath([real, root]) != root or real == root:
            return FileTail(
                None, problem=f"not read: outside the experiment's output folder {folder}"
            )
        if names is not None and not names.fullmatch(os.path.basename(path)):
            return FileTail(None, problem="not read: not an output file of the experiment's job")
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(real, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        return FileTail(None, problem=error.strerror or str(error))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return FileTail(None, problem="not read: not a regular file")
        if st.st_uid != os.getuid():
            return FileTail(None, problem=f"not read: it belongs to uid {st.st_uid}, not to you")
        if st.st_nlink != 1:  # a job writes its output once; another user may link yours
            return FileTail(None, problem="not read: it has another hard link")
        if not opened_inside(fd, root):
            return FileTail(
                None, problem=f"not read: outside the experiment's output folder {folder}"
            )
        if head:
            return FileTail(f.read(max_bytes))
        start = max(0, st.st_size - max_bytes)
        f.seek(start)
        return FileTail(f.read(max_bytes), skipped=start)


def opened_inside(fd: int, root: str) -> bool:
    """Whether the file open as ``fd`` is inside directory ``root`` (a resolved path) after all
    (Linux: ``/proc/self/fd``; True where that cannot tell): a directory of the path swapped
    for a symbolic link between the check and the open leads elsewhere."""
    try:
        opened = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return True
    return os.path.isabs(opened) and os.path.commonpath([opened, root]) == root != opened


#: at most this many bytes of a job's sbatch script are read to find its ``--comment``
SUBMISSION_SCRIPT_BYTES = 64 * 1024


def submission_problem(doc: Mapping[str, Any], path: str, collection_name: str) -> str | None:
    """Why the submitit output file ``path`` a document names may not be read as this
    collection's, or None when it may.

    The document's own job ids and folder could be forged (a document naming one of your jobs
    of another collection, whose ids ``squeue`` shows everyone), so a submitit output
    (``*_log.out|err``) is read only when submitit's copy of that job's sbatch script,
    ``<folder with %j = array id>/<array id>_submission.sh`` (``submitit.slurm``'s
    ``paths.submission_file``), is a regular file of this user, not a symbolic link, whose
    ``#SBATCH --comment=`` is ``collection_name`` (what the launcher sets, as ``seml queue``
    finds our jobs). SEML 0.5's output names (``<name>_<array>_<task>.out``) have no such
    script (SEML keeps none): they are read on the other checks of :func:`read_output_tail`
    alone. Jobs of the local executor write no sbatch script either (``cluster == "local"``)."""

    name = os.path.basename(path)
    if not re.fullmatch(r".+_\d+_log\.(?:out|err)", name):
        return None  # not submitit's name: SEML's output files
    execution = doc.get("execution") if isinstance(doc.get("execution"), Mapping) else {}
    if execution.get("cluster") == "local":  # type: ignore[union-attr]
        return None
    seml = doc.get("seml") if isinstance(doc.get("seml"), Mapping) else {}
    template = seml.get("output_dir")  # type: ignore[union-attr]
    jobs = recorded_jobs(doc)
    if not isinstance(template, str) or not jobs:
        return "not read: the experiment records no submitit folder or job"
    expected = f"#SBATCH --comment={collection_name}"
    found = False  # a script of the document's jobs is there at all
    folders = []
    for array, _ in jobs:
        folder = os.path.expanduser(template.replace("%j", array))
        folders.append(folder)
        script = os.path.join(folder, f"{array}_submission.sh")
        try:
            fd = os.open(script, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue
        found = True
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
                continue
            lines = f.read(SUBMISSION_SCRIPT_BYTES).decode("utf-8", "replace").splitlines()
        if expected in (line.strip() for line in lines):
            return None
    if not found:
        return gone_folder_problem(folders, jobs[0][0])
    return (
        f"not read: no sbatch script of job {jobs[0][0]} with --comment={collection_name} in "
        "its submitit folder (the document may name a job of another collection)"
    )


def gone_folder_problem(folders: Sequence[str], array: str) -> str:
    """Why a job's output cannot be read when its sbatch script is missing from every folder
    of ``folders`` (the document's submitit folders, ``%j`` replaced; ``array``: its first
    job's array id): the folder is gone, or it is there without the script (deleted and
    made again, or replaced, after the launch: the job found neither its pickle nor, when
    the folder was gone, a place for its output, so Slurm failed it)."""
    missing = [f for f in folders if not os.path.isdir(f)]
    if missing:
        return (
            f"not read: the job's submitit folder {missing[0]} is gone (deleted or replaced "
            "after the launch: the job found neither its pickle nor its sbatch script there)"
        )
    return (
        f"not read: the submitit folder {folders[0]} holds no sbatch script of job {array} "
        "(deleted and made again, or replaced, after the launch; the job's pickle went with it)"
    )


def read_document_output(
    doc: Mapping[str, Any],
    path: str,
    collection_name: str,
    *,
    seml_output_file: bool = False,
    max_bytes: int = TRACE_TAIL_BYTES,
    head: bool = False,
) -> FileTail:
    """:func:`read_output_tail` of a file a document names, for collection
    ``collection_name``: inside its :func:`output_folder`, named as its own job's output
    (:func:`own_output_names`), and of a job of this collection (:func:`submission_problem`).
    Never raises for a bad file."""
    problem = submission_problem(doc, path, collection_name)
    if problem is not None:
        return FileTail(None, problem=problem)
    names = own_output_names(doc, seml_output_file=seml_output_file)
    return read_output_tail(path, output_folder(doc), names=names, max_bytes=max_bytes, head=head)


def output_file(doc: Mapping[str, Any]) -> str | None:
    """The job output file a document names: ``execution.slurm_output_file`` (written by the
    job), else the submission's ``slurm[0].output_files_template``; None when it names none.
    Pure; the path still has to pass :func:`read_document_output`."""
    execution = doc.get("execution") or {}
    path = execution.get("slurm_output_file") if isinstance(execution, Mapping) else None
    if path:
        return str(path)
    slurm = doc.get("slurm")
    first = slurm[0] if isinstance(slurm, list) and slurm else slurm
    if isinstance(first, Mapping) and first.get("output_files_template"):
        return str(first["output_files_template"])
    return None


def tail_text(data: bytes, lines: int = TRACE_LINES) -> str:
    """The last ``lines`` lines of ``data`` decoded as UTF-8, invalid bytes as U+FFFD."""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def killed_trace(head: str, tails: Iterable[tuple[str, FileTail]]) -> list[str]:
    """The ``fail_trace`` of a KILLED experiment, as a list of lines each ending in ``"\\n"``:
    ``head`` (one line saying how its job ended), then for each ``(path, tail)`` (a job output
    file and what :func:`read_output_tail` / :func:`read_document_output` read of it) either
    ``Last lines of <path>:`` and its last :data:`TRACE_LINES` lines (:func:`tail_text`), or
    ``(could not read <path>: <why>)``. Pure; the one builder of the traces of
    ``track.killed.detect_killed`` (Slurm jobs) and ``track.killed.mark_dead_jobs`` (the
    launcher's local jobs)."""
    lines = [head + "\n"]
    for path, tail in tails:
        if tail.data is None:
            lines.append(f"(could not read {path}: {tail.problem})\n")
        else:
            lines.append(f"Last lines of {path}:\n")
            lines.extend(line + "\n" for line in tail_text(tail.data).splitlines())
    return lines
