"""Hydra finds ``hydra/launcher=seml`` and ``seml_local`` after a real install into a FRESH venv.

Hydra discovers plugins only through the ``hydra_plugins`` namespace package, and how a package
is installed decides whether that namespace is visible (a setuptools >= 64 editable install, for
one, hides it). The development venv cannot prove anything here: it may hold leftovers. So each
case builds a brand-new venv and installs the project as a user does:

- ``wheel``: ``pip install <project>`` (a non-editable install of the built wheel);
- ``editable``: a plain ``pip install -e <project>``.

Honesty over speed, and no speed was lost: the venvs are created without
``--system-site-packages`` (which would leak the development venv's or the base interpreter's
packages) and pip installs WITH dependencies and build isolation, exactly the user's command.
Measured on this machine: about 3 s to create a venv and 9 s for the install on an idle machine
(pip resolves from its cache and the machine's configured wheel sources), 20 s a case under load,
so a shared pre-built venv with ``--no-deps`` installs on top would save little while proving
less.

In each venv an isolated interpreter (``python -I``: no ``PYTHONPATH``, no user site, not the
project's directory on ``sys.path``) asks Hydra's config loader for the ``hydra/launcher`` (and
``slurm`` preset) group options, composes ``hydra/launcher=seml`` and ``seml_local``, lists the
``Launcher`` and ``SearchPathPlugin`` plugins Hydra discovers, and reports where the modules and
presets were loaded from, so a test also fails if they came from the wrong place (the work tree
for a wheel install, a copy in site-packages for an editable one).

Select these tests alone with ``pytest -m discovery``; they run by default.
"""

from __future__ import annotations

import json
import os
import subprocess
import venv
from pathlib import Path

import pytest
from support.paths import ROOT

pytestmark = pytest.mark.discovery

TARGETS = {
    "seml": "hydra_plugins.seml_launcher.seml_launcher.SemlSlurmLauncher",
    "seml_local": "hydra_plugins.seml_launcher.seml_launcher.SemlLocalLauncher",
}
SEARCH_PATH_PLUGIN = "hydra_plugins.seml_launcher.searchpath.SemlSearchPathPlugin"

PROBE = r"""
import json

import hydra_plugins
import hydra_plugins.seml_launcher as plugin
import seml_hydra
from hydra import compose, initialize
from hydra.core.global_hydra import GlobalHydra
from hydra.core.plugins import Plugins
from hydra.plugins.launcher import Launcher
from hydra.plugins.search_path_plugin import SearchPathPlugin
from hydra.utils import get_class

with initialize(version_base="1.3"):
    loader = GlobalHydra.instance().config_loader()
    groups = {g: loader.get_group_options(g) for g in ("hydra/launcher", "slurm")}
    sources = {s.provider: s.path for s in loader.get_sources()}
    targets = {
        name: compose(overrides=[f"hydra/launcher={name}"], return_hydra_config=True)
        .hydra.launcher._target_
        for name in ("seml", "seml_local")
    }
    preset = compose(overrides=["hydra/launcher=seml", "+slurm=cpu"], return_hydra_config=True)
    preset_cpus = preset.hydra.launcher.cpus_per_task


def names(kind):
    return sorted(f"{c.__module__}.{c.__qualname__}" for c in Plugins.instance().discover(kind))


print(json.dumps({
    "groups": groups,
    "targets": targets,
    "launcher_classes": {n: issubclass(get_class(t), Launcher) for n, t in targets.items()},
    "launchers": names(Launcher),
    "search_path_plugins": names(SearchPathPlugin),
    "presets_source": sources.get("seml-hydra"),
    "preset_cpus": preset_cpus,
    "hydra_plugins_file": getattr(hydra_plugins, "__file__", None),
    "plugin_paths": list(plugin.__path__),
    "seml_hydra_file": seml_hydra.__file__,
}))
"""


def _clean_env() -> dict[str, str]:
    """This process' environment without what would point Python at the development venv."""
    drop = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP", "PYTHONUSERBASE"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def _run(cmd: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        cmd, cwd=cwd, env=_clean_env(), capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
        f"\n--- stderr\n{proc.stderr[-4000:]}"
    )
    return proc


def _fresh_install(tmp_path: Path, *pip_args: str) -> tuple[Path, Path]:
    """A new venv at ``tmp_path/venv`` with the project installed by ``pip install *pip_args``.
    Returns ``(venv python, its site-packages)``."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "-q", *pip_args], cwd=tmp_path, timeout=600)
    purelib = _run(
        [str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        cwd=tmp_path,
        timeout=60,
    ).stdout.strip()
    return python, Path(purelib)


def _probe(python: Path, tmp_path: Path) -> dict:
    script = tmp_path / "probe_launchers.py"
    script.write_text(PROBE, encoding="utf-8")
    out = _run([str(python), "-I", str(script)], cwd=tmp_path, timeout=120).stdout
    return json.loads(out.strip().splitlines()[-1])


def _assert_launchers_found(found: dict) -> None:
    assert {"seml", "seml_local"} <= set(found["groups"]["hydra/launcher"]), found["groups"]
    assert found["targets"] == TARGETS
    assert found["launcher_classes"] == {"seml": True, "seml_local": True}
    assert set(TARGETS.values()) <= set(found["launchers"]), found["launchers"]
    # the resource presets (conf/slurm) come in through our search-path plugin
    assert SEARCH_PATH_PLUGIN in found["search_path_plugins"], found["search_path_plugins"]
    assert "cpu" in found["groups"]["slurm"], found["groups"]
    assert found["preset_cpus"] == 2
    # a namespace package: Hydra's own plugins and ours must share it
    assert found["hydra_plugins_file"] is None, "hydra_plugins/__init__.py was shipped"


def _is_under(path: str, parent: Path) -> bool:
    return Path(path).resolve().is_relative_to(parent.resolve())


def test_non_editable_install_exposes_both_launchers(tmp_path: Path) -> None:
    python, site_packages = _fresh_install(tmp_path, str(ROOT))
    found = _probe(python, tmp_path)
    _assert_launchers_found(found)
    assert _is_under(found["seml_hydra_file"], site_packages), found["seml_hydra_file"]
    assert [_is_under(p, site_packages) for p in found["plugin_paths"]] == [True]
    assert not (site_packages / "hydra_plugins" / "__init__.py").exists()
    assert _is_under(found["presets_source"], site_packages / "seml_hydra" / "conf")


def test_plain_editable_install_exposes_both_launchers(tmp_path: Path) -> None:
    python, site_packages = _fresh_install(tmp_path, "-e", str(ROOT))
    found = _probe(python, tmp_path)
    _assert_launchers_found(found)
    assert _is_under(found["seml_hydra_file"], ROOT / "seml_hydra"), found["seml_hydra_file"]
    plugin_dir = ROOT / "launcher" / "hydra_plugins" / "seml_launcher"
    assert [_is_under(p, plugin_dir) for p in found["plugin_paths"]] == [True]
    # hatchling's editable wheel still copies the force-included conf/ to
    # site-packages/seml_hydra/conf (no __init__.py: the work tree's regular package wins);
    # the code must not be copied, and the presets must be the live ones of the work tree
    assert not (site_packages / "seml_hydra" / "__init__.py").exists(), "code was copied"
    assert _is_under(found["presets_source"], ROOT / "conf"), found["presets_source"]


def test_fresh_venv_starts_without_our_code(tmp_path: Path) -> None:
    """Control for the tests above: a new venv, before any install, cannot import our modules
    (so what they find came from their own install, not from this process' paths)."""
    env_dir = tmp_path / "empty"
    venv.EnvBuilder(with_pip=False, system_site_packages=False).create(env_dir)
    proc = subprocess.run(
        [str(env_dir / "bin" / "python"), "-I", "-c", "import hydra_plugins.seml_launcher"],
        cwd=ROOT,
        env={**_clean_env(), "PYTHONPATH": str(ROOT / "launcher")},  # ignored under -I
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr, proc.stderr
