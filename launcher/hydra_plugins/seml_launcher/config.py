"""Stores the launcher configs in Hydra's ConfigStore (group ``hydra/launcher``)."""

from hydra.core.config_store import ConfigStore

from seml_hydra.config import SemlLauncherConf, SemlLocalLauncherConf

ConfigStore.instance().store(
    group="hydra/launcher", name="seml", node=SemlLauncherConf(), provider="seml_launcher"
)
ConfigStore.instance().store(
    group="hydra/launcher",
    name="seml_local",
    node=SemlLocalLauncherConf(),
    provider="seml_launcher",
)
