"""seml-hydra: run Hydra sweeps on Slurm with SEML's MongoDB experiment management.

Importing the package is cheap: submodules load on first use.
"""

__version__ = "0.1.0"
