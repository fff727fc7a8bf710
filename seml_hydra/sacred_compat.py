"""Import Sacred without its setuptools warning.

sacred 0.8.7 imports ``pkg_resources``, which setuptools (pinned below 81, where it still
exists) deprecates with a ``UserWarning`` at import. A filter set at package import does not
last: Hydra imports plugins inside ``warnings.catch_warnings()``, which restores the filters.
"""

from __future__ import annotations

import warnings
from typing import Any


def import_sacred() -> Any:
    """Import and return the ``sacred`` package, silencing only the ``pkg_resources`` warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="pkg_resources is deprecated", category=UserWarning
        )
        import sacred

    return sacred
