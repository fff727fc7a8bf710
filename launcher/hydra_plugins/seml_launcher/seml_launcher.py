"""The Hydra ``Launcher`` classes named by the configs' ``_target_``: thin shells over
``seml_hydra.launch.launcher.SemlLauncher``."""

from seml_hydra.launch.launcher import SemlLauncher

from . import config  # noqa: F401  (registers the configs when Hydra imports this module)


class SemlSlurmLauncher(SemlLauncher):
    """``hydra/launcher=seml``: experiments in MongoDB, jobs on Slurm through submitit."""

    executor = "slurm"


class SemlLocalLauncher(SemlLauncher):
    """``hydra/launcher=seml_local``: the same pipeline with submitit's LocalExecutor."""

    executor = "local"
