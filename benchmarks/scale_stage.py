"""Staging at scale (the staging streams): 100,000 points, command line to every
document PENDING in held arrays, wall time and peak memory, beside SEML 0.5.7's ``seml add`` of
the same grid.

    python benchmarks/run.py --only stage100k --reps 3 --cache /tmp/my-bench-cache

The model is (a) of ``run.py`` (``bench_staging``), at 100,000 points: ``benchmarks/apps/noop.py
-m hydra/launcher=seml hydra/sweeper=seml hydra.launcher.wait=false x=range(400) y=range(250)``
with ``experiments_per_job=12500`` and ``+hydra.launcher.additional_parameters.hold=true`` (one
array of 8 held tasks: the testbed's MaxArraySize is 8), cancelled after each measurement. Our
points are really submitted; SEML's ``add`` stages its documents (STAGED) and submits nothing.
Each tool gets its own database (``seml_hydra_bench_stage100k``, ``..._seml``), dropped at the
end, so a concurrent ``run.py`` of (a) is not disturbed. Peak memory: ``wait4``'s ``ru_maxrss``.
Target: <= 8 s and <= 150 MiB for ours.
"""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path

#: the grid: x=range(400) y=range(250), 100,000 points
SIDES = (400, 250)
POINTS = SIDES[0] * SIDES[1]
#: 8 array tasks (the testbed's MaxArraySize)
TASKS = 8
OURS_DB = "seml_hydra_bench_stage100k"
SEML_DB = "seml_hydra_bench_stage100k_seml"
COLLECTION = "bench_stage100k"
TARGET_WALL_S = 8.0
TARGET_PEAK_MIB = 150.0


def ours_cmd(python: str, app: Path) -> list[str]:
    """Our launch of the grid, as (a) of ``run.py`` launches its own."""
    return [
        python,
        str(app),
        "-m",
        "hydra/launcher=seml",
        "hydra/sweeper=seml",
        "hydra.launcher.wait=false",
        f"hydra.launcher.collection={COLLECTION}",
        f"hydra.launcher.experiments_per_job={-(-POINTS // TASKS)}",
        "+hydra.launcher.additional_parameters.hold=true",
        f"x=range({SIDES[0]})",
        f"y=range({SIDES[1]})",
    ]


def seml_env(base: dict, work: Path, mongo: str) -> dict:
    """SEML's environment: a HOME whose ``mongodb.config`` names :data:`SEML_DB`."""
    import run

    return {**base, "HOME": str(run.seml_home(work / "seml-home-stage100k", mongo, SEML_DB))}


def bench(args, envs, work: Path) -> dict:
    """``{"seml-hydra": [run...], "seml": [run...]}``, one run per ``--reps``: ``wall_s``,
    ``peak_rss_mib`` (``run.measure``). Alternated: ours, then SEML's, in each repetition."""
    import run

    client = run.mongo_client(args.mongo)
    ours_db, seml_db = client[OURS_DB], client[SEML_DB]
    ours_env = {**envs["ours"], "SEML_MONGODB_URI": f"{args.mongo}/{OURS_DB}"}
    seml_dir = work / "seml-add-stage100k"
    seml_dir.mkdir(exist_ok=True)
    shutil.copy(run.SEML_APP, seml_dir / run.SEML_APP.name)
    (seml_dir / "grid.yaml").write_text(run.seml_experiment_yaml(run.SEML_APP.name, *SIDES))
    environment = seml_env(envs["seml"], work, args.mongo) if envs.get("seml_bin") else None
    runs: dict[str, list] = {"seml-hydra": [], "seml": []}
    try:
        for rep in range(args.reps):
            ours_db.drop_collection(COLLECTION)
            ours_db.drop_collection("fs.files")
            ours_db.drop_collection("fs.chunks")
            run_dir = work / f"stage100k-ours-{rep}"
            run_dir.mkdir()
            try:
                result = run.measure(
                    ours_cmd(str(envs["ours_bin"] / "python"), run.APP),
                    env=ours_env,
                    cwd=run_dir,
                    label="stage",
                )
                pending = ours_db[COLLECTION].count_documents({"status": "PENDING"})
            finally:
                run.cancel_arrays(ours_db[COLLECTION])
            assert pending == POINTS, f"seml-hydra: {pending} PENDING of {POINTS}"
            runs["seml-hydra"].append(result)
            run.say(
                f"  (stage100k) seml-hydra rep {rep}: {result['wall_s']:.2f} s, "
                f"{result['peak_rss_mib']:.0f} MiB"
            )
            if environment is None:
                continue
            seml_db.drop_collection("bench_seml")
            result = run.measure(
                [str(envs["seml_bin"] / "seml"), "bench_seml", "add", "grid.yaml"],
                env=environment,
                cwd=seml_dir,
                label=f"add-{rep}",
            )
            staged = seml_db["bench_seml"].count_documents({"status": "STAGED"})
            assert staged == POINTS, f"seml add: {staged} STAGED of {POINTS}"
            runs["seml"].append(result)
            run.say(
                f"  (stage100k) seml add   rep {rep}: {result['wall_s']:.2f} s, "
                f"{result['peak_rss_mib']:.0f} MiB"
            )
    finally:
        if not args.keep:
            client.drop_database(OURS_DB)
            client.drop_database(SEML_DB)
    return runs


def rows(results: dict, args) -> list[tuple]:
    """Table rows ``(measure, ours, theirs, ratio, target, met)`` (``run.table``'s shape): wall
    time and peak memory, medians; the target is an absolute one, SEML's ``add`` is
    beside it (nan when it was not run)."""

    def med(name: str, key: str) -> float:
        values = [r[key] for r in results.get(name, [])]
        return statistics.median(values) if values else float("nan")

    ow, sw = med("seml-hydra", "wall_s"), med("seml", "wall_s")
    om, sm = med("seml-hydra", "peak_rss_mib"), med("seml", "peak_rss_mib")
    return [
        (
            f"stage {POINTS} pts (held), wall s",
            ow,
            sw,
            ow / sw,
            f"<= {TARGET_WALL_S:g} s",
            ow <= TARGET_WALL_S,
        ),
        (
            f"stage {POINTS} pts (held), peak MiB",
            om,
            sm,
            om / sm,
            f"<= {TARGET_PEAK_MIB:g}",
            om <= TARGET_PEAK_MIB,
        ),
    ]
