"""The apps' API on the top-level package, and the old module names that stay importable for
payloads pickled, job files written and apps written before the sub-package layout."""

import importlib
import subprocess
import sys

import pytest

import seml_hydra
from seml_hydra.job import metrics, pruning, rank, requeue, runner
from seml_hydra.store import errors, results


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("current_plan", rank),
        ("log_scalar", metrics),
        ("report", pruning),
        ("on_requeue", requeue),
        ("requeues", requeue),
        ("get_results", results),
        ("get_metrics", results),
        ("CollectionNotFound", errors),
    ],
)
def test_the_apps_api_is_on_the_top_level_package(name, module):
    assert getattr(seml_hydra, name) is getattr(module, name)


def test_an_unknown_top_level_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        seml_hydra.nope  # noqa: B018


@pytest.mark.parametrize(
    ("old", "new"),
    [("run", runner), ("rank", rank), ("metrics", metrics), ("requeue", requeue)],
)
def test_the_old_module_names_are_the_same_module_objects_with_a_deprecation(old, new):
    sys.modules.pop(f"seml_hydra.{old}", None)
    with pytest.warns(DeprecationWarning, match=rf"seml_hydra\.{old} is deprecated .* 0\.3\.0"):
        assert importlib.import_module(f"seml_hydra.{old}") is new


def test_importing_the_package_loads_no_sub_package():
    code = "import sys, seml_hydra; print(sorted(m for m in sys.modules if m.startswith('seml_hydra.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['seml_hydra._compat']"  # the old names' finder alone


def test_the_old_rank_module_still_names_the_error_it_raised():
    """Apps written before the layout catch ``seml_hydra.rank.RankEnvironmentError``."""
    from seml_hydra.job.slurm_env import RankEnvironmentError

    with pytest.warns(DeprecationWarning):
        sys.modules.pop("seml_hydra.rank", None)
        old = importlib.import_module("seml_hydra.rank")
    assert old.RankEnvironmentError is RankEnvironmentError
