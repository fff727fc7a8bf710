"""(s) the ``seml`` CLI at scale: ``status``, ``queue``, ``cancel``, ``delete`` and ``results`` on
100,000 experiments, beside SEML 0.5.7's ``status`` / ``delete`` on a collection of its own
format of the same size.

    python benchmarks/run.py --only s --scale-points 100000 --cli-reps 3

How the experiments exist without 100,000 jobs (as (a) does): each collection is staged by the
no-op app with ``+hydra.launcher.additional_parameters.hold=true`` and
``experiments_per_job=ceil(N/8)``, so its N PENDING experiments sit in ONE held array of 8 tasks
(the testbed's MaxArraySize is 8). Three such collections are staged (3 N held experiments, for
``seml queue``). Then, in this order:

1. ``seml S status`` (N PENDING, every array task held and alive), ``--cli-reps`` times;
2. ``seml queue`` (3 N held experiments queued), ``--cli-reps`` times;
3. ``seml Q2 cancel -y`` and ``seml Q1 delete -y`` of N each (once: they use the collection up;
   each ``scancel`` s the held tasks and waits until squeue no longer lists them); SEML's
   ``delete -y`` of its N documents runs right after ours (its ``add`` comes first, unmeasured
   against ours), so both see the same load;
4. the arrays of S are ``scancel`` led outside the CLI and, once squeue no longer lists them,
   ``seml S status`` marks the N experiments KILLED (once), with sacct's record in each trace;
5. S's experiments are set COMPLETED with a result (one ``update_many``) and
   ``seml S results -f table`` / ``-f csv`` print 100,000 rows (once each);
6. SEML: ``seml bench_scale add`` of an N-point grid (STAGED: SEML submits nothing), then its
   ``status`` (``--cli-reps`` times). SEML's documents are STAGED, so its ``status`` judges no
   Slurm job: its figure is a lower bound of what it would take on our case;
7. the floor (``floor`` in ``--scale-rows``): a copy of a staged collection (its documents and
   indexes), then a bare pymongo ``update_many`` setting ``status`` and
   ``execution.cancel_time`` on its N documents, and a ``delete_many`` of them: mongod's own
   time to rewrite and to delete N such documents, beside which the rows are read; then the
   same on a fresh copy as 4 commands of a quarter of the ids each, sent at once from threads
   (``delete`` and the KILLED marking send theirs so: ``seml_hydra.core.parallel``).

Every measurement records the load average of its start (``load``). Targets: ``delete -y`` at
most SEML's ``delete -y`` of the same run; ``cancel -y`` and ``status`` marking KILLED at most
twice our own ``status`` of 100,000 PENDING (the median of step 1).

``--scale-rows status,cancel,delete,killed,seml,floor`` measures only those steps (default: all of
``status,queue,cancel,delete,killed,results,seml,floor``), staging only the collections they use
up.

With ``--scale-base COMMIT`` the ``status`` of step 1 and the ``queue`` of step 2 also run (once)
from a virtualenv of that commit (``git archive``, installed like this checkout), side by side.
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import time
from pathlib import Path

#: the collections of our database and SEML's
STATUS, QUEUE_1, QUEUE_2, SEML_COLLECTION = "scale_status", "scale_q1", "scale_q2", "bench_scale"
#: the steps ``--scale-rows`` may name (default: all)
ROWS = ("status", "queue", "cancel", "delete", "killed", "results", "seml", "floor")
#: the collection each step needs staged (SEML's is its own)
NEEDS = {
    "status": STATUS,
    "queue": None,
    "cancel": QUEUE_2,
    "delete": QUEUE_1,
    "killed": STATUS,
    "floor": STATUS,
}
#: the copy of :data:`STATUS` the floor is measured on
FLOOR = "scale_floor"

#: databases of their own (dropped at the end): another benchmark run drops ``run.OURS_DB``
OURS_DB, SEML_DB = "seml_hydra_bench_scale", "seml_hydra_bench_scale_seml"


def grid(points: int) -> tuple[int, int]:
    """``(a, b)`` with ``a * b == points`` and ``a`` the largest divisor <= sqrt(points)."""
    a = int(math.isqrt(points))
    while points % a:
        a -= 1
    return a, points // a


def stage_cmd(python: str, points: int, collection: str) -> list[str]:
    """Our held staging of ``points`` points into ``collection`` (one array of 8 tasks)."""
    a, b = grid(points)
    return [
        python,
        str(Path(__file__).resolve().parent / "apps" / "noop.py"),
        "-m",
        "hydra/launcher=seml",
        "hydra/sweeper=seml",
        "hydra.launcher.wait=false",
        f"hydra.launcher.collection={collection}",
        f"hydra.launcher.experiments_per_job={-(-points // 8)}",
        "+hydra.launcher.additional_parameters.hold=true",
        f"x=range({a})",
        f"y=range({b})",
    ]


def seml_yaml(points: int) -> str:
    a, b = grid(points)
    return (
        "seml:\n  executable: seml_noop.py\n  name: bench\n  output_dir: logs\n"
        "  project_root_dir: .\n"
        "slurm:\n  experiments_per_job: 1\n  sbatch_options:\n    time: 0-00:10\n"
        "grid:\n"
        f"  x:\n    type: range\n    min: 0\n    max: {a}\n    step: 1\n"
        f"  y:\n    type: range\n    min: 0\n    max: {b}\n    step: 1\n"
    )


def arrays_of(collection) -> list[str]:
    return sorted({str(a) for a in collection.distinct("slurm.array_id") if a is not None})


def wait_gone(arrays: list[str], timeout_s: float = 120.0) -> None:
    """Poll squeue until it lists none of ``arrays``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["squeue", "-h", "-o", "%i", "-j", ",".join(arrays)],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        if not out.strip():
            return
        time.sleep(0.5)
    raise RuntimeError(f"squeue still lists {arrays} after {timeout_s} s")


def base_venv(cache: Path, commit: str, run) -> Path:
    """A virtualenv with the tree of ``commit`` installed (once per commit); its bin dir."""
    tree = cache / f"tree-{commit}"
    if not tree.exists():
        tree.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "-C", str(run.ROOT), "archive", commit], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return run.ensure_venv(cache, f"venv-base-{commit}", str(tree))


def bench(args, envs, work: Path) -> dict:
    import run

    n, reps = args.scale_points, args.cli_reps
    client = run.mongo_client(args.mongo)
    try:
        return _bench(run, args, envs, work, client, n, reps)
    finally:
        if not args.keep:
            client.drop_database(OURS_DB)
            client.drop_database(SEML_DB)


def _seml_env(envs: dict, work: Path, mongo: str) -> dict:
    """SEML's environment with a HOME whose ``mongodb.config`` names :data:`SEML_DB`."""
    host, _, port = mongo.removeprefix("mongodb://").split("/")[0].partition(":")
    config = work / "seml-home" / ".config" / "seml" / "mongodb.config"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        f"username: null\npassword: null\nhost: {host}\nport: {port or 27017}\n"
        f"database: {SEML_DB}\n"
    )
    return {**envs["seml"], "HOME": str(work / "seml-home")}


def _bench(run, args, envs: dict, work: Path, client, n: int, reps: int) -> dict:
    db, seml_db = client[OURS_DB], client[SEML_DB]
    ours = envs["ours_bin"]
    ours_env = {**envs["ours"], "SEML_MONGODB_URI": f"{args.mongo}/{OURS_DB}"}
    out: dict = {"points": n}
    stage_dir = work / "scale"
    stage_dir.mkdir()

    def seml_ours(label: str, *words: str, bin_dir: Path = ours) -> dict:
        load = os.getloadavg()[0]
        result = run.measure(
            [str(bin_dir / "seml"), *words], env=ours_env, cwd=stage_dir, label=label
        )
        result["load"] = load
        run.say(
            f"  (s) {label:28s}: {result['wall_s']:.2f} s, {result['peak_rss_mib']:.0f} MiB "
            f"(load {load:.1f})"
        )
        return result

    wanted = set((getattr(args, "scale_rows", None) or ",".join(ROWS)).split(","))
    needed = {STATUS, QUEUE_1, QUEUE_2} if wanted & {"queue", "results"} else set()
    needed |= {NEEDS[row] for row in wanted if NEEDS.get(row)}
    for name in [c for c in (STATUS, QUEUE_1, QUEUE_2) if c in needed]:
        db.drop_collection(name)
        staged = run.measure(
            stage_cmd(str(ours / "python"), n, name),
            env=ours_env,
            cwd=stage_dir,
            label=f"stage-{name}",
        )
        pending = db[name].count_documents({"status": "PENDING"})
        assert pending == n, f"{name}: {pending} PENDING of {n}"
        run.say(f"  (s) staged {n} held points into {name} in {staged['wall_s']:.1f} s")
    seml = _seml_side(run, args, envs, work, seml_db, n) if "seml" in wanted else None
    base = getattr(args, "scale_base", None)
    base_bin = base_venv(Path(args.cache), base, run) if base else None
    try:
        if needed:  # unmeasured: creates the job indexes of the staged collections
            seml_ours("queue-for-indexes", "queue")
        if "status" in wanted:
            out["status"] = [seml_ours(f"status-{r}", STATUS, "status") for r in range(reps)]
        if "queue" in wanted:
            out["queue"] = [seml_ours(f"queue-{r}", "queue") for r in range(reps)]
        if "floor" in wanted:
            out.update(_floor(run, db, n))
        if base_bin is not None and {"status", "queue"} <= wanted:
            out["base"] = base
            out["status_base"] = [seml_ours("status-base", STATUS, "status", bin_dir=base_bin)]
            out["queue_base"] = [seml_ours("queue-base", "queue", bin_dir=base_bin)]
            out["status"].append(seml_ours(f"status-{reps}", STATUS, "status"))
        if seml is not None and "status" in wanted:
            out["seml_status"] = [seml(f"status-{r}", "status") for r in range(reps)]
        if "cancel" in wanted:
            out["cancel"] = [seml_ours("cancel", QUEUE_2, "cancel", "-y")]
            assert db[QUEUE_2].count_documents({"status": "INTERRUPTED"}) == n
        if "delete" in wanted:
            out["delete"] = [seml_ours("delete", QUEUE_1, "delete", "-y")]
            assert db[QUEUE_1].count_documents({}) == 0
        if seml is not None:  # right after ours: the same load
            out["seml_delete"] = [seml("delete", "delete", "-y")]
            assert seml_db[SEML_COLLECTION].count_documents({}) == 0
        if not wanted & {"killed", "results"}:
            return out
        arrays = arrays_of(db[STATUS])
        subprocess.run(["scancel", *arrays], check=True)
        wait_gone(arrays)
        out["killed"] = [seml_ours("status-marks-killed", STATUS, "status")]
        killed = db[STATUS].count_documents({"status": "KILLED"})
        assert killed == n, f"{killed} KILLED of {n}"
        if "results" not in wanted:
            return out
        db[STATUS].update_many(
            {},
            [
                {
                    "$set": {
                        "status": "COMPLETED",
                        "result": {"loss": {"$add": ["$config.x", "$config.y"]}},
                    }
                }
            ],
        )
        out["results_table"] = [seml_ours("results-table", STATUS, "results")]
        out["results_csv"] = [seml_ours("results-csv", STATUS, "results", "-f", "csv")]
    finally:
        for name in (STATUS, QUEUE_1, QUEUE_2):
            run.cancel_arrays(db[name])
    return out


def _floor(run, db, n: int) -> dict:
    """mongod's own time (pymongo, no ``seml``) to rewrite and to delete the ``n`` documents of
    a copy of :data:`STATUS` with its indexes: ``{"floor_update": [...], "floor_delete":
    [...]}``, each ``[{"wall_s", "load"}]``, one command each; then, on a fresh copy, the same
    as :data:`FLOOR_PARTS` commands of a quarter of the ids each sent at once from threads
    (``floor_update_parts``, ``floor_delete_parts``: what ``delete`` and the KILLED marking
    now do, ``seml_hydra.core.parallel``)."""
    from concurrent.futures import ThreadPoolExecutor
    from datetime import datetime, timezone

    mark = {"status": "INTERRUPTED", "execution.cancel_time": datetime.now(timezone.utc)}

    def parts() -> list[dict]:
        ids = sorted(d["_id"] for d in db[FLOOR].find({}, {"_id": 1}))
        cuts = [ids[len(ids) * k // FLOOR_PARTS] for k in range(FLOOR_PARTS)] + [ids[-1] + 1]
        return [{"_id": {"$gte": a, "$lt": b}} for a, b in zip(cuts, cuts[1:])]

    def at_once(write, queries) -> None:
        with ThreadPoolExecutor(len(queries)) as pool:
            for done in [pool.submit(write, q) for q in queries]:
                done.result()

    out = {}
    for suffix in ("", "_parts"):
        _copy_for_floor(db)
        queries = parts() if suffix else [{}]
        writes = (
            ("floor_update", lambda q: db[FLOOR].update_many(q, {"$set": mark})),
            ("floor_delete", db[FLOOR].delete_many),
        )
        for key, write in writes:
            key += suffix
            load = os.getloadavg()[0]
            start = time.perf_counter()
            at_once(write, queries)
            out[key] = [{"wall_s": time.perf_counter() - start, "load": load}]
            run.say(f"  (s) {key:28s}: {out[key][0]['wall_s']:.2f} s (load {load:.1f})")
    db.drop_collection(FLOOR)
    return out


#: how many commands the floor's ``_parts`` rows send at once
FLOOR_PARTS = 4


def _copy_for_floor(db) -> None:
    """:data:`FLOOR`: a copy of :data:`STATUS`'s documents and indexes."""
    db.drop_collection(FLOOR)
    db[STATUS].aggregate([{"$match": {}}, {"$out": FLOOR}])
    for name, spec in db[STATUS].index_information().items():
        if name != "_id_":
            options = {k: v for k, v in spec.items() if k not in ("key", "v", "ns")}
            db[FLOOR].create_index(spec["key"], name=name, **options)


def _seml_side(run, args, envs, work, seml_db, n: int):
    """SEML 0.5.7 on a collection of its own format: ``add`` of an ``n``-point grid (not
    compared with ours), then a function ``(label, *words) -> measurement`` running
    ``seml bench_scale <words>``."""
    seml_dir = work / "scale-seml"
    seml_dir.mkdir()
    (seml_dir / "seml_noop.py").write_text(run.SEML_APP.read_text())
    (seml_dir / "grid.yaml").write_text(seml_yaml(n))
    seml_db.drop_collection(SEML_COLLECTION)
    seml = envs["seml_bin"] / "seml"
    seml_env = _seml_env(envs, work, args.mongo)

    def seml_theirs(label: str, *words: str) -> dict:
        load = os.getloadavg()[0]
        result = run.measure(
            [str(seml), SEML_COLLECTION, *words], env=seml_env, cwd=seml_dir, label=label
        )
        result["load"] = load
        run.say(
            f"  (s) SEML {label:23s}: {result['wall_s']:.2f} s, "
            f"{result['peak_rss_mib']:.0f} MiB (load {load:.1f})"
        )
        return result

    seml_theirs("add", "add", "grid.yaml")
    assert seml_db[SEML_COLLECTION].count_documents({"status": "STAGED"}) == n
    return seml_theirs


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def rows(results: dict, args) -> list[tuple]:
    """``(measure, seml-hydra, theirs, ratio, target, met)`` rows of :func:`bench`'s results;
    theirs is SEML 0.5.7 where it applies, our own ``status`` of 100,000 PENDING for ``cancel``
    and the KILLED marking (whose targets are relative to it), else NaN. The CPU time (user +
    system of the command, not of mongod) says what the machine's load does not; the load
    average at each start is in the raw numbers (``load``)."""
    r = results["scale_cli"]
    n = r["points"]
    nan = float("nan")
    out = []

    def row(
        label: str,
        key: str,
        theirs_key: str | None,
        wall: float | None,
        mib: float | None,
        relative: tuple[float, str] | None = None,
    ):
        """``relative=(factor, whom)``: the wall target is ``ratio <= factor`` (``wall`` unused)."""
        if key not in r:  # not measured (--scale-rows)
            return
        metrics = (
            ("wall_s", wall, "wall s"),
            ("cpu_s", None, "CPU s"),
            ("peak_rss_mib", mib, "peak MiB"),
        )
        for metric, target, unit in metrics:
            if metric not in r[key][0]:
                continue
            ours = _median(r[key], metric)
            theirs = _median(r[theirs_key], metric) if theirs_key in r else nan
            ratio = ours / theirs if theirs == theirs else nan
            if relative is not None and metric == "wall_s":
                factor, whom = relative
                text, met = f"<= {factor:g}x {whom}", (ratio <= factor if ratio == ratio else None)
            else:
                text = "-" if target is None else f"<= {target:g}"
                met = None if target is None else ours <= target
            out.append((f"(s) {label}, {unit}", ours, theirs, ratio, text, met))

    status = (2.0, "status")
    row(f"status, {n} PENDING (SEML: STAGED)", "status", "seml_status", 0.5, 100)
    row(f"status marking {n} KILLED (theirs: our status)", "killed", "status", None, 150, status)
    row(f"delete -y of {n}", "delete", "seml_delete", None, 150, (1.0, "SEML"))
    row(f"cancel -y of {n} (theirs: our status)", "cancel", "status", None, 150, status)
    row(f"floor: pymongo update_many of {n}", "floor_update", None, None, None)
    row(f"floor: pymongo delete_many of {n}", "floor_delete", None, None, None)
    row(f"floor: {FLOOR_PARTS} update_many of {n} at once", "floor_update_parts", None, None, None)
    row(f"floor: {FLOOR_PARTS} delete_many of {n} at once", "floor_delete_parts", None, None, None)
    row(f"queue, {3 * n} held queued", "queue", None, 0.5, None)
    row(f"results -f table, {n} rows", "results_table", None, None, None)
    row(f"results -f csv, {n} rows", "results_csv", None, None, None)
    if "status_base" in r:
        row(f"status, {n} PENDING [base {r['base']}]", "status_base", None, None, None)
        row(f"queue, {3 * n} held [base {r['base']}]", "queue_base", None, None, None)
    return out
