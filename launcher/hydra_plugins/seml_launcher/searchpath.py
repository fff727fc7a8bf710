"""Adds seml-hydra's presets (``conf/``: e.g. the ``slurm`` resource group) to Hydra's search
path, so apps can say ``slurm=gpu_2tasks`` without copying anything."""

from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

import seml_hydra


def presets_dir() -> Path | None:
    """``seml_hydra/conf`` in a wheel, ``<repository>/conf`` in an editable install."""
    package = Path(seml_hydra.__file__).resolve().parent
    for candidate in (package / "conf", package.parent / "conf"):
        if (candidate / "slurm").is_dir():
            return candidate
    return None


class SemlSearchPathPlugin(SearchPathPlugin):
    """Appends the presets directory (provider ``seml-hydra``) to the config search path."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        directory = presets_dir()
        if directory is not None:
            search_path.append(provider="seml-hydra", path=f"file://{directory}")
