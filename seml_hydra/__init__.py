"""seml-hydra: run Hydra sweeps on Slurm with SEML's MongoDB experiment management.

Where the code runs, one sub-package each (arrows point down: a package imports only those
below it):

- ``cli/``     the ``seml`` command (typer): parses options, prints; calls ``manage``.
- ``manage/``  what the ``seml`` command does to stored experiments (login node).
- ``launch/``  inside Hydra's process on the login node: compose -> document -> stage ->
  submit -> wait (the ``hydra/launcher=seml`` plugin's code).
- ``job/``     on the compute node, in every rank of every Slurm job: claim, rank plan,
  seeding, the Sacred run, requeue, metrics.
- ``store/``   MongoDB and files on both sides: ``server/`` (embedded mongod, SSH tunnel),
  ``db/`` (settings, client, collections), ``snapshot/`` (code snapshots), the payload,
  reading results back.
- ``slurm/``   Slurm's command-line tools: pure parsers and the client that runs them.
- ``core/``    pure vocabulary shared by all: experiment states, documents (their types:
  ``core.schema``), errors, id ranges.
- ``config``   the launcher's config dataclasses (what ``hydra.launcher.<field>`` accepts).

Importing the package is cheap: submodules load on first use. The public API for apps:
``current_plan`` (rank facts), ``local_device`` (the GPU a rank uses), ``log_scalar``
(metrics), ``report`` (a metric, and whether to stop early: ``hydra.launcher.pruner``), ``on_requeue``/``requeues`` (checkpointing), ``get_results``/``get_metrics``/
``results_table`` (reading results back; ``CollectionNotFound`` when the collection does
not exist).
"""

import importlib

from seml_hydra import _compat

__version__ = "0.1.0"
_compat.install()  # the flat layout's module names, deprecated (seml_hydra._compat)

#: public name -> the module that defines it
_PUBLIC = {
    "get_results": "seml_hydra.store.results",
    "get_metrics": "seml_hydra.store.results",
    "CollectionNotFound": "seml_hydra.store.errors",
    "results_table": "seml_hydra.manage.results_table",
    "current_plan": "seml_hydra.job.rank",
    "local_device": "seml_hydra.job.devices",
    "log_scalar": "seml_hydra.job.metrics",
    "report": "seml_hydra.job.pruning",
    "on_requeue": "seml_hydra.job.requeue",
    "requeues": "seml_hydra.job.requeue",
}


def __getattr__(name: str):
    """Lazy public API (see the module docstring): the module is imported on first use."""
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'seml_hydra' has no attribute {name!r}")
