"""seml-hydra: run Hydra sweeps on Slurm with SEML's MongoDB experiment management.

Importing the package is cheap: submodules load on first use.
"""

__version__ = "0.1.0"

import warnings as _warnings

# sacred 0.8.7 imports pkg_resources; setuptools < 81 (our pin) warns about it on every import
_warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)


def __getattr__(name: str):
    """Lazy public API: ``seml_hydra.get_results`` (``seml_hydra.results.get_results``)."""
    if name == "get_results":
        from .results import get_results

        return get_results
    raise AttributeError(f"module 'seml_hydra' has no attribute {name!r}")
