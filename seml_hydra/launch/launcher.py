"""The Hydra launcher class: ``hydra/launcher=seml`` and ``seml_local`` (the plugin shim
``hydra_plugins.seml_launcher`` subclasses :class:`SemlLauncher`).

Hydra imports every plugin module when any Hydra app starts, so this module stays small: the
pipeline (compose -> document -> stage -> submit -> wait, ``launch.pipeline``) is imported when a
sweep is launched, not when Hydra scans its plugins.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from omegaconf import OmegaConf

from seml_hydra.core.errors import UserError, print_error
from seml_hydra.core.shell import seml_for
from seml_hydra.launch.containers import to_dict, to_list
from seml_hydra.store.db.retry import is_connection_error, short_reason
from seml_hydra.store.masking import mask_credentials


def connection_lost_message(collection: Any, reason: str, staging_started: bool) -> str:
    """What a launch that lost MongoDB tells the user (pure): ``reason`` (a short, secret-free
    description of the error) and what is left: nothing before staging started; else the
    experiments already stored stay as they are (those submitted run, the rest stay STAGED) and
    how to go on once the database is back: the same launch again, which stages the points not
    stored yet and submits the STAGED ones without duplicates; ``seml <collection> start``
    would submit only the points stored so far, part of the sweep, so it is named as that."""
    head = f"lost the connection to MongoDB ({reason})."
    if not staging_started:
        return f"{head} Nothing was stored or submitted: launch the sweep again later."
    return (
        f"{head} The experiments already stored stay as they are: those submitted keep "
        "running, the others stay STAGED, and the sweep's later points may not be stored. "
        "Once the database is back, launch the same sweep again: it stores the missing points "
        "and submits the STAGED ones, without duplicates (check with "
        f"`{seml_for(collection)} status`; `{seml_for(collection)} start` would submit only the points "
        "stored so far)."
    )


class SemlLauncher(Launcher):
    """Hydra ``Launcher`` storing every sweep point as a SEML experiment and running it through
    submitit. ``executor`` is ``"slurm"`` or ``"local"`` (set by the subclasses).

    Args:
        **params: the ``hydra.launcher`` node (see ``seml_hydra.config.SemlLauncherConf``).
    """

    executor = "slurm"
    #: composes and validates every point before staging any (``launch.sweeper``: the basic
    #: sweeper leaves its validation to it)
    validates_points = True

    def __init__(self, **params: Any) -> None:
        self.params = {
            k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
            for k, v in params.items()
        }
        self.config: Any = None
        self.hydra_context: Any = None
        self.task_function: Any = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        from hydra.core.hydra_config import HydraConfig

        from seml_hydra.launch.sweeper import adopt_driving_basic_sweeper

        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function
        # Hydra's default sweeper would compose every point once more to validate it: the
        # launcher composes and validates them all before staging anything
        adopt_driving_basic_sweeper()
        # The launcher has its db settings (self.params); what Hydra writes and what the jobs
        # get (multirun.yaml, which the sweeper saves from this very object after setup, every
        # point's config, .hydra/*.yaml on the nodes, the payload) holds the URL masked.
        mask_db_credentials(config)
        if HydraConfig.initialized():
            mask_db_credentials(HydraConfig.instance().cfg)
        # before Hydra's sweeper makes the sweep dir and writes multirun.yaml into it
        problem = setup_problem(config)
        if problem is not None:
            print_error(problem)
            raise SystemExit(1)

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        """Stage, submit and (with ``wait=true``) wait for the points; returns one ``JobReturn``
        per point in input order. A user mistake prints one message and exits with status 1."""
        from rich.console import Console

        from seml_hydra.job.main_module import refuse_launch_while_loading

        refuse_launch_while_loading()  # a job's own script relaunching its sweep at import
        console = Console(highlight=False, soft_wrap=True)
        self._staging_started = False  # set by _Launch.stage: from then on documents may exist
        try:
            return self._launch(job_overrides, initial_job_idx, console)
        except UserError as error:
            print_error(str(error))
            raise SystemExit(1) from None
        except Exception as error:
            if not is_connection_error(error):
                raise
            print_error(
                connection_lost_message(
                    self.params.get("collection"), short_reason(error), self._staging_started
                )
            )
            raise SystemExit(1) from None
        except KeyboardInterrupt:
            collection = self.params.get("collection")
            message = (
                "Interrupted. Experiments that were not submitted stay STAGED: submit them with "
                f"`{seml_for(collection)} start`, or launch the sweep again."
                if self._staging_started
                else "Interrupted before anything was staged: nothing was stored or submitted."
            )
            Console(stderr=True, highlight=False, soft_wrap=True).print(message)
            raise SystemExit(130) from None

    def _launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int, console: Any
    ) -> list[JobReturn]:
        # here, not at the top: every Hydra app imports this module at start (plugin scan)
        from seml_hydra.launch.exit import quick_exit_after_launch
        from seml_hydra.launch.pipeline import launch_points
        from seml_hydra.store.db.client import skip_exit_join

        try:
            return launch_points(self, job_overrides, initial_job_idx, console)
        finally:
            # every write of the launch is done: the app exits without joining pymongo's
            # monitor threads (up to ~0.5 s), as the jobs and the `seml` command do, and
            # without Python's shutdown walking every object the launch left (launch.exit)
            skip_exit_join()
            quick_exit_after_launch()


def setup_problem(config: Any) -> str | None:
    """What makes a launch unsafe before anything is written, as one sentence; None when it
    may go on. Judged in ``SemlLauncher.setup``, before Hydra's sweeper makes the sweep dir
    and writes ``multirun.yaml`` into it: the umask is first made private
    (``core.jobenv.tighten_umask``, with a warning when it changes: what the launch, submitit,
    Hydra and the jobs create is then not writable by others), then the sweep dir
    (``core.paths.job_dir_problem``; one that cannot be resolved yet is judged per point) and
    the ``PATH``/``PYTHONPATH``/``LD_LIBRARY_PATH`` the jobs inherit
    (``core.jobenv.environment_problem``)."""
    import logging
    import os

    from seml_hydra.core.jobenv import environment_problem, tighten_umask
    from seml_hydra.core.paths import job_dir_problem

    changed = tighten_umask()
    if changed is not None:
        logging.getLogger(__name__).warning(
            "umask %04o lets other users write what this launch and its jobs create: "
            "launching with umask %04o",
            *changed,
        )
    try:
        sweep_dir = OmegaConf.select(config, "hydra.sweep.dir", throw_on_missing=True)
    except Exception:  # an interpolation only a point can resolve: judged per point
        sweep_dir = None
    problem = None if sweep_dir is None else job_dir_problem("hydra.sweep.dir", str(sweep_dir))
    if problem is None:
        problem = environment_problem(os.environ, os.getcwd())
    return None if problem is None else f"{problem}; nothing was staged"


def mask_db_credentials(config: Any) -> None:
    """Mask, in place, the password of MongoDB URLs in a Hydra config's ``hydra`` node: the
    value of ``hydra.launcher.db.url`` and the strings of ``hydra.overrides.hydra`` (where a
    command-line ``hydra.launcher.db.url=...`` is kept). Interpolations are left as they are
    (their resolved value is not written). Nothing else changes; a config without those keys
    is left alone."""
    from omegaconf import open_dict, read_write

    hydra = config.get("hydra") if OmegaConf.is_dict(config) else None
    if hydra is None:
        return
    with read_write(hydra), open_dict(hydra):
        overrides = OmegaConf.select(hydra, "overrides.hydra", default=None)
        if overrides is not None:
            for i, text in enumerate(to_list(overrides)):
                if isinstance(text, str) and mask_credentials(text) != text:
                    overrides[i] = mask_credentials(text)
        db = OmegaConf.select(hydra, "launcher.db", default=None)
        if OmegaConf.is_dict(db):
            url = to_dict(db).get("url")
            if isinstance(url, str) and mask_credentials(url) != url:
                db.url = mask_credentials(url)
