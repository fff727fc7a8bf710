"""(r) ``reset`` of many finished experiments, as ``seml <col> reset -y`` does it
(``seml_hydra.manage.lifecycle.reset``): time of the call alone, on the real mongod.

    python benchmarks/reset_history.py --url mongodb://127.0.0.1:27017 --points 100000

It fills a collection of its own (dropped at the end) with ``--points`` FAILED documents
shaped like the launcher's after a run (``execution``, ``slurm[0]`` with its job, Sacred's
``host``, ``info.metrics``, a 40-line ``fail_trace``, ``captured_out``, times) and one metric
document per experiment, then times ``reset`` (``--reps`` times, each on a fresh fill) and
prints one JSON line ``{"points", "reset_s": [...], "median_s"}``. The seml_hydra imported is
the one on ``sys.path``: ``PYTHONPATH=<another checkout>`` measures that one with this same
script (what the attempt-history change was measured against).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import time

from bson import ObjectId


def fill(db, name: str, points: int) -> None:
    """``points`` FAILED documents and one metric document each in collection ``name``."""
    from seml_hydra.store.db.collections import metrics_collection_name

    db.drop_collection(name)
    db.drop_collection(metrics_collection_name(name))
    now = dt.datetime.now(dt.timezone.utc)
    trace = [f"  File 'train.py', line {i}, in step\n" for i in range(39)] + ["ValueError: x\n"]
    docs, metrics = [], []
    for i in range(1, points + 1):
        metric_id = ObjectId()
        metrics.append(
            {"_id": metric_id, "run_id": i, "name": "loss", "steps": [0, 1], "values": [1.0, 0.5]}
        )
        docs.append(
            {
                "_id": i,
                "batch_id": 1,
                "status": "FAILED",
                "config": {"x": i, "lr": 0.1},
                "config_hash": f"{i:032x}",
                "seml": {"executable": "train.py", "working_dir": "/tmp"},
                "slurm": [
                    {
                        "array_id": 1000 + i // 1000,
                        "task_id": i % 1000,
                        "experiments_per_job": 1,
                        "sbatch_options": {"job-name": "train_1", "comment": name, "mem": "1G"},
                        "output_files_template": "/tmp/sweep/.submitit/%A_%a_log.out",
                    }
                ],
                "execution": {
                    "cluster": "slurm",
                    "array_id": 1000 + i // 1000,
                    "task_id": i % 1000,
                    "restart": 0,
                    "claim_time": now,
                    "slurm_output_file": f"/tmp/sweep/.submitit/{1000 + i // 1000}_{i}_0_log.out",
                },
                "host": {"hostname": "node1", "os": ["Linux", "x"], "python_version": "3.11"},
                "start_time": now,
                "stop_time": now,
                "heartbeat": now,
                "captured_out": "epoch 1\n" * 20,
                "fail_trace": trace,
                "info": {"metrics": [{"name": "loss", "id": str(metric_id)}]},
            }
        )
        if len(docs) == 10_000:
            db[name].insert_many(docs)
            db[metrics_collection_name(name)].insert_many(metrics)
            docs, metrics = [], []
    if docs:
        db[name].insert_many(docs)
        db[metrics_collection_name(name)].insert_many(metrics)


def main() -> None:
    import pymongo

    from seml_hydra.manage.lifecycle import reset
    from seml_hydra.store.db.collections import metrics_collection_name

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="mongodb://127.0.0.1:27017")
    parser.add_argument("--db", default="seml_hydra_bench_reset")
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    db = pymongo.MongoClient(args.url)[args.db]
    name = "bench_reset"
    times = []
    try:
        for _ in range(args.reps):
            fill(db, name, args.points)
            start = time.perf_counter()
            out = reset(db[name], {})
            times.append(round(time.perf_counter() - start, 3))
            assert db[name].count_documents({"status": "STAGED"}) == args.points, out
    finally:
        db.drop_collection(name)
        db.drop_collection(metrics_collection_name(name))
    print(
        json.dumps({"points": args.points, "reset_s": times, "median_s": statistics.median(times)})
    )


if __name__ == "__main__":
    main()
