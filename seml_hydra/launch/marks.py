"""The mark of a submission under way (``slurm[0].submitting``): written on the experiments a
process is about to submit (``launch.submit.submit_group``), replaced by the job's ids once
sbatch answered, and read by the recovery of submissions whose process died in between
(``launch.recovery``)."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

from seml_hydra.core.processes import process_alive, process_start

#: a submission mark of a process on another machine (which cannot be checked from here) counts
#: as a dead submission after this many seconds; sbatch answers or fails well within it
SUBMIT_TIMEOUT_S = 600.0


def submission_mark(folder: str | None = None) -> dict[str, Any]:
    """``slurm[0].submitting`` of the experiments this process is about to submit: host, pid,
    process start, time, a random ``token`` unique to this submission, and the submitit
    ``folder`` it writes the job files into (which tells its array in Slurm: the job's
    ``Command``, see ``seml_hydra.launch.recovery.cancel_orphan_arrays``)."""
    import uuid
    from datetime import datetime, timezone

    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "started": process_start(pid),
        "time": datetime.now(timezone.utc),
        # tells this submission's documents from those another one marked meanwhile
        "token": uuid.uuid4().hex,
        "folder": folder,
    }


def submitter_gone(mark: Mapping[str, Any]) -> bool:
    """Whether the process of a ``slurm[0].submitting`` mark no longer runs: on this host, no
    process with its pid and start time; on another host, marked over :data:`SUBMIT_TIMEOUT_S`
    ago."""
    from datetime import datetime, timezone

    if mark.get("host") == socket.gethostname():
        try:
            started = mark.get("started")
            return started is None or not process_alive(int(mark["pid"]), started)
        except (KeyError, TypeError, ValueError):
            return True
    since = mark.get("time")
    if not isinstance(since, datetime):
        return True
    if since.tzinfo is None:  # pymongo returns naive UTC datetimes by default
        since = since.replace(tzinfo=timezone.utc)
    return (datetime.now(timezone.utc) - since).total_seconds() > SUBMIT_TIMEOUT_S
