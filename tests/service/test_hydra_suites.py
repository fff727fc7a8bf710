"""Hydra's own launcher test suites (``hydra.test_utils.launcher_common_tests``) run against
``hydra/launcher=seml_local`` (submitit's LocalExecutor) and ``hydra/launcher=seml`` (the Slurm
testbed), parametrized as hydra-submitit-launcher 1.2.0 parametrizes its own.

Every test starts from an empty test database (autouse fixture over ``db_url``, which also
exports ``SEML_MONGODB_URI``: the integration suite's apps run in subprocesses and the Slurm jobs
inherit the environment through sbatch).

The suites mutate their ``overrides`` parameter in place (``overrides.extend(...)``), so every
class below gets its own fresh lists from a function rather than shared module constants.

Deviation from Hydra's contract, kept visible here:

- A point whose config is already COMPLETED in the collection is not run again (SEML's duplicate
  rule, by design): ``test_to_absolute_path_multirun`` runs the same app twice with an identical
  config and a different task body, so its second run passes ``hydra.launcher.force=true``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hydra.test_utils.launcher_common_tests import (
    BatchedSweeperTestSuite,
    IntegrationTestSuite,
    LauncherTestSuite,
)

LOCAL_TARGET = "hydra_plugins.seml_launcher.seml_launcher.SemlLocalLauncher"
SLURM_TARGET = "hydra_plugins.seml_launcher.seml_launcher.SemlSlurmLauncher"
FAST = ["hydra.launcher.poll_interval_s=0.2"]
SLURM_RESOURCES = ["hydra.launcher.timeout_min=5"]


@pytest.fixture(autouse=True)
def _empty_database(db_url: str) -> str:
    """Each test gets the empty test database (and ``SEML_MONGODB_URI`` pointing at it)."""
    return db_url


class _SemlIntegrationSuite(IntegrationTestSuite):
    """Hydra's ``IntegrationTestSuite``; the test running one app twice forces the second run."""

    def test_to_absolute_path_multirun(
        self, tmpdir: Path, task_launcher_cfg: dict[str, Any], extra_flags: list[str]
    ) -> None:
        # both runs stage the same config: without force the second returns the first's result
        super().test_to_absolute_path_multirun(
            tmpdir, task_launcher_cfg, [*extra_flags, "hydra.launcher.force=true"]
        )


def _launcher_params(name: str, extra: list[str] | None = None) -> list[tuple[str, list[str]]]:
    overrides = [*FAST, *(extra or [])]
    if name == "seml":
        overrides += SLURM_RESOURCES
    return [(name, overrides)]


def _integration_params(name: str, target: str) -> list[tuple[dict[str, Any], list[str]]]:
    flags = ["-m", f"hydra/launcher={name}", *FAST]
    if name == "seml":
        flags += SLURM_RESOURCES
    return [({"hydra": {"launcher": {"_target_": target}}}, flags)]


# -- seml_local: submitit's LocalExecutor -------------------------------------------------------


@pytest.mark.parametrize("launcher_name, overrides", _launcher_params("seml_local"))
class TestSemlLocalLauncher(LauncherTestSuite):
    pass


@pytest.mark.parametrize(
    "launcher_name, overrides",
    _launcher_params("seml_local", ["hydra.sweeper.max_batch_size=2"]),
)
class TestSemlLocalBatchedSweeper(BatchedSweeperTestSuite):
    pass


@pytest.mark.parametrize(
    "task_launcher_cfg, extra_flags", _integration_params("seml_local", LOCAL_TARGET)
)
class TestSemlLocalIntegration(_SemlIntegrationSuite):
    pass


# -- seml: the Slurm testbed ------------------------------------------------------------------


@pytest.mark.slurm
@pytest.mark.usefixtures("slurm")
@pytest.mark.parametrize("launcher_name, overrides", _launcher_params("seml"))
class TestSemlSlurmLauncher(LauncherTestSuite):
    pass


@pytest.mark.slurm
@pytest.mark.usefixtures("slurm")
@pytest.mark.parametrize(
    "launcher_name, overrides", _launcher_params("seml", ["hydra.sweeper.max_batch_size=2"])
)
class TestSemlSlurmBatchedSweeper(BatchedSweeperTestSuite):
    pass


@pytest.mark.slurm
@pytest.mark.usefixtures("slurm")
@pytest.mark.parametrize(
    "task_launcher_cfg, extra_flags", _integration_params("seml", SLURM_TARGET)
)
class TestSemlSlurmIntegration(_SemlIntegrationSuite):
    pass
