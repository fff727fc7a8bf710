"""``start --debug`` and ``start --local`` / ``launch-worker``: the checks before experiments run
in this process (``seml_hydra.job.worker`` runs them), each refusal one line (ManageError)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from seml_hydra.core import states
from seml_hydra.job.worker import runnable_query
from seml_hydra.manage.selection import ManageError
from seml_hydra.manage.start import no_payload_message


def check_options(
    *, debug: bool, local: bool, post_mortem: bool, worker_gpus: str | None, sacred_id: Any
) -> None:
    """Refuse option combinations ``start`` cannot honour (pure; SEML's ``start_experiments``
    refuses the same): ``--debug`` with ``--local``, ``--debug`` without ``-id``,
    ``--post-mortem`` without ``--debug``/``--local``, ``--worker-gpus`` without ``--local``.
    Raises ManageError."""
    if debug and local:
        raise ManageError("--debug runs one experiment, --local a worker: use one of them.")
    if debug and sacred_id is None:
        raise ManageError("--debug runs one experiment: name it with -id N.")
    if post_mortem and not (debug or local):
        raise ManageError(
            "--post-mortem only works with --debug or --local (a Slurm job has no terminal)."
        )
    if worker_gpus is not None and not local:
        raise ManageError("--worker-gpus only works with --local (or launch-worker).")


def debug_document(collection: Any, query: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The one experiment ``start --debug`` runs: the only document matching ``query`` (the
    ``-id`` selection). Raises ManageError when none matches, it is not STAGED (SEML's old
    ``QUEUED`` counts as STAGED), or it was not staged by seml-hydra (no payload)."""
    docs = list(collection.find(query).sort("_id", 1).limit(2))
    if not docs:
        raise ManageError(f"No experiment in {name} matches the selection: nothing to debug.")
    if len(docs) > 1:
        raise ManageError("--debug runs one experiment: select exactly one with -id N.")
    doc = docs[0]
    status = states.ALIASES.get(doc.get("status"), doc.get("status"))
    if status != states.STAGED:
        raise ManageError(
            f"Experiment {doc['_id']} is {doc.get('status')}, not STAGED: --debug runs a STAGED "
            f"experiment (put it back with `seml {name} reset -id {doc['_id']}`)."
        )
    if not (doc.get("seml") or {}).get("payload_file"):
        raise ManageError(no_payload_message(doc))
    return doc


def check_runnable(collection: Any, query: Mapping[str, Any], name: str) -> int:
    """How many experiments a worker could run from ``query`` (STAGED, with a payload); raises
    ManageError when there is none."""
    count = collection.count_documents(runnable_query(query))
    if not count:
        raise ManageError(f"No STAGED experiments in {name} match: nothing to run.")
    return count
