"""Alias of :mod:`seml_hydra.job.runner` under its name before the sub-package layout
(``seml_hydra.run``), for what names it from outside: payloads pickled into GridFS and
submitit job files (``seml_hydra.run.Payload``, ``seml_hydra.run.JobRunner``), and apps or
their code snapshots that import it. The same module object, not a copy; ``Payload`` (defined
in ``seml_hydra.store.payload``) is reachable here because ``job.runner`` imports it.
``tests/service/test_old_layout.py`` runs data pickled by the old layout through it."""

import sys

from seml_hydra.job import runner as _module

sys.modules[__name__] = _module
