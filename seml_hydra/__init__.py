"""seml-hydra: run Hydra sweeps on Slurm with SEML's MongoDB experiment management.

Importing the package is cheap: submodules load on first use.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """Lazy public API: ``seml_hydra.get_results`` (``seml_hydra.results.get_results``)."""
    if name == "get_results":
        from .results import get_results

        return get_results
    raise AttributeError(f"module 'seml_hydra' has no attribute {name!r}")
