"""seml-hydra: run Hydra sweeps on Slurm with SEML's MongoDB experiment management.

Importing the package is cheap: submodules load on first use.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """Lazy public API: ``seml_hydra.get_results`` and ``seml_hydra.get_metrics`` (from
    ``seml_hydra.results``)."""
    if name in ("get_results", "get_metrics"):
        from . import results

        return getattr(results, name)
    raise AttributeError(f"module 'seml_hydra' has no attribute {name!r}")
