"""Test app for launches of one sweep staging at the same time (``test_concurrent_launches``).

SEML_TEST_RACE_DIR=/tmp/r SEML_TEST_RACE_N=3 python tests/apps/race_app.py -m \
    hydra/launcher=seml x=0,1,2 runs_dir=/tmp/runs

- With ``SEML_TEST_RACE_DIR`` set, the launcher process holds each staging launch right after
  its first look for duplicates (``Stager._existing``) until ``SEML_TEST_RACE_N`` launches have
  looked (a file per process in that folder, at most 120 s): every launch has found none of the
  points before any inserts them, the widest race window there is.
- With ``SEML_TEST_RACE_WAIT_FOR=<file>`` too, that hold also lasts until the file exists (at
  most 120 s): another launch inserts the points first, after this one looked.
- With ``SEML_TEST_RACE_DIE=<file>``, a launch that inserted new documents creates the file and
  SIGKILLs itself before it submits them: a launch killed between its staging and its sbatch.
- With ``SEML_TEST_RACE_PAUSE=<file>``, the launch stops before it submits, creates
  ``<file>.paused``, goes on once ``<file>`` exists (at most 120 s), and creates
  ``<file>.submitted`` once its submission returned.
- The launcher prints ``RESULT <overrides> <return value>`` per point it returns to Hydra.
- The task leaves a file ``<x>_<job id>`` in ``runs_dir`` (one per run) and returns ``x * 10``.
"""

import os
import signal
import time

import hydra
from omegaconf import DictConfig

RACE_DIR = os.environ.get("SEML_TEST_RACE_DIR")
WAIT_FOR = os.environ.get("SEML_TEST_RACE_WAIT_FOR")
DIE = os.environ.get("SEML_TEST_RACE_DIE")
PAUSE = os.environ.get("SEML_TEST_RACE_PAUSE")


def _held() -> bool:
    wanted = int(os.environ.get("SEML_TEST_RACE_N", "2"))
    return len(os.listdir(RACE_DIR)) < wanted or bool(WAIT_FOR and not os.path.exists(WAIT_FOR))


def _hold_after_first_look() -> None:
    from seml_hydra.launch import pipeline, stage

    look = stage.Stager._existing
    held = []

    def existing(self, hashes):
        found = look(self, hashes)
        if not held:
            held.append(True)
            open(os.path.join(RACE_DIR, str(os.getpid())), "w").close()
            deadline = time.monotonic() + 120
            while _held() and time.monotonic() < deadline:
                time.sleep(0.05)
        return found

    stage.Stager._existing = existing
    launch = pipeline.launch_points

    def launch_points(*args, **kwargs):
        returns = launch(*args, **kwargs)
        for r in returns:
            print(f"RESULT {' '.join(r.overrides)} {r.return_value}", flush=True)
        return returns

    pipeline.launch_points = launch_points
    if DIE:
        stage_launch = pipeline._Launch.stage

        def stage_then_die(self):
            result = stage_launch(self)
            if result.new_ids:
                open(DIE, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        pipeline._Launch.stage = stage_then_die
    if PAUSE:
        submit = pipeline._Launch.submit

        def paused_submit(self):
            open(f"{PAUSE}.paused", "w").close()
            deadline = time.monotonic() + 120
            while not os.path.exists(PAUSE) and time.monotonic() < deadline:
                time.sleep(0.05)
            jobs = submit(self)
            open(f"{PAUSE}.submitted", "w").close()
            return jobs

        pipeline._Launch.submit = paused_submit


if RACE_DIR and __name__ == "__main__":
    _hold_after_first_look()


@hydra.main(version_base="1.3", config_path="conf_race", config_name="config")
def main(cfg: DictConfig) -> int:
    job = os.environ.get("SLURM_JOB_ID", str(os.getpid()))
    open(os.path.join(cfg.runs_dir, f"{cfg.x}_{job}"), "w").close()
    return cfg.x * 10


if __name__ == "__main__":
    main()
