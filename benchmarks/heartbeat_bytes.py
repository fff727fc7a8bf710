"""(h) Heartbeat load: bytes into MongoDB for one experiment that prints
``--heartbeat-kb-per-s`` KB per second (10) for each of ``--heartbeat-seconds`` (60 and 120 s).

    python benchmarks/run.py --only heartbeat

Each length runs against a mongod of its own (a fresh ``--dbpath`` under the work dir, its own
port): its ``serverStatus`` ``network.bytesIn`` before and after a command is every byte that
command's processes sent to MongoDB, nothing else talks to that server. Two commands, one
after the other, in separate databases:

- seml-hydra: ``benchmarks/apps/chatty.py -m hydra/launcher=seml`` on the Slurm testbed, one
  experiment, from the command line until the launcher returned: staging (document, code
  snapshot), the claim, Sacred's saves and heartbeats (every 10 s), the final save and the
  launcher's polls (every 2 s) are all in. ``hydra/launcher=seml_local`` runs the same job code
  (``job.runner`` -> ``job.observed``), only not through Slurm.
- Sacred: ``benchmarks/apps/sacred_chatty.py``, the same task as a plain Sacred run under
  Sacred 0.8's own ``MongoObserver`` (the one SEML 0.5.7 attaches; Sacred from SEML's
  virtualenv), capturing the output as seml-hydra does (``CAPTURE_MODE = "sys"``): it rewrites
  the whole run entry, captured output included, with every heartbeat, which is what seml-hydra
  did before (3.4 MB for 60 s). SEML 0.5.7 itself captures no output unless
  asked (its ``CAPTURE_OUTPUT`` setting): it writes it to the job's file instead.

Rows: bytes into MongoDB per byte printed (target <= 1.5 at every length) and the MB.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
APP = HERE / "apps" / "chatty.py"
SACRED_APP = HERE / "apps" / "sacred_chatty.py"
MONGOD = shutil.which("mongod") or "/usr/local/bin/mongod"
DB = "seml_hydra_bench_heartbeat"
TARGET = 1.5


@contextlib.contextmanager
def private_mongod(base: Path):
    """A standalone mongod on a free port with its data under ``base``; yields its URL and
    stops it (SIGTERM, waited for) afterwards."""
    import pymongo

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (base / "data").mkdir(parents=True)
    pidfile = base / "mongod.pid"
    argv = [MONGOD, "--dbpath", str(base / "data"), "--port", str(port), "--bind_ip", "127.0.0.1"]
    argv += ["--fork", "--logpath", str(base / "mongod.log"), "--pidfilepath", str(pidfile)]
    argv += ["--wiredTigerCacheSizeGB", "0.25"]
    argv += ["--setParameter", "diagnosticDataCollectionEnabled=false"]
    subprocess.run(argv, check=True, capture_output=True, timeout=120)
    pid = int(pidfile.read_text())
    url = f"mongodb://127.0.0.1:{port}"
    client = pymongo.MongoClient(url, serverSelectionTimeoutMS=30_000)
    try:
        client.admin.command("ping")
        yield url, client
    finally:
        client.close()
        os.kill(pid, signal.SIGTERM)
        while Path(f"/proc/{pid}").exists():
            time.sleep(0.1)


def bytes_in(client) -> int:
    """The server's ``network.bytesIn`` (every byte received since it started)."""
    return client.admin.command("serverStatus")["network"]["bytesIn"]


def run_counted(cmd: list[str], *, env: dict, cwd: Path, label: str, client) -> dict:
    """Run ``cmd`` (output to ``cwd/label.{out,err}``); bytes into the server while it ran and
    its wall time (s). Raises RuntimeError when it exits non-zero."""
    before = bytes_in(client)
    start = time.perf_counter()
    with open(cwd / f"{label}.out", "w") as out, open(cwd / f"{label}.err", "w") as err:
        code = subprocess.run(cmd, env=env, cwd=cwd, stdout=out, stderr=err).returncode
    wall = time.perf_counter() - start
    if code != 0:
        tail = (cwd / f"{label}.err").read_text()[-2000:]
        raise RuntimeError(f"{label}: {' '.join(cmd)} exited {code}\n{tail}")
    return {"bytes_in": bytes_in(client) - before, "wall_s": wall}


def check_run(doc: dict | None, printed: int, label: str) -> dict:
    """The stored run is COMPLETED with the printed characters' count as result and their
    capped output; returns its ``captured_out`` length."""
    assert doc is not None, f"{label}: no run stored"
    assert doc.get("status") == "COMPLETED", f"{label}: {doc.get('status')}"
    assert doc.get("result") == printed, f"{label}: result {doc.get('result')} != {printed}"
    captured = doc.get("captured_out") or ""
    assert captured.endswith("x\n") and min(printed, 1_000_000) <= len(captured), label
    return {"captured_chars": len(captured)}


def bench(args, envs, work: Path) -> dict:
    """Per length (s): the bytes into MongoDB of our launch and of the Sacred run, and what was
    printed. Returns ``{"<seconds>": {"printed": n, "seml-hydra": {...}, "sacred": {...}}}``."""
    rate = float(args.heartbeat_kb_per_s)
    out: dict = {}
    for seconds in [int(s) for s in str(args.heartbeat_seconds).split(",")]:
        printed = round(rate * 1000 / 100 / 10) * 100 * seconds * 10
        run_dir = work / f"heartbeat-{seconds}"
        run_dir.mkdir()
        with private_mongod(run_dir / "mongod") as (url, client):
            ours_env = {**envs["ours"], "SEML_MONGODB_URI": f"{url}/{DB}"}
            cmd = [str(envs["ours_bin"] / "python"), str(APP), "-m", "hydra/launcher=seml"]
            cmd += ["hydra.launcher.collection=chatty", f"kb_per_s={rate:g}"]
            cmd += [f"seconds={seconds}"]
            ours = run_counted(cmd, env=ours_env, cwd=run_dir, label="ours", client=client)
            ours |= check_run(client[DB]["chatty"].find_one(), printed, "seml-hydra")
            cmd = [str(envs["seml_bin"] / "python"), str(SACRED_APP), url, f"{DB}_sacred"]
            cmd += [f"{rate:g}", str(seconds)]
            theirs = run_counted(cmd, env=envs["seml"], cwd=run_dir, label="sacred", client=client)
            theirs |= check_run(client[f"{DB}_sacred"]["runs"].find_one(), printed, "sacred")
        out[str(seconds)] = {"printed": printed, "seml-hydra": ours, "sacred": theirs}
        print(
            f"  (h) {seconds} s, {printed / 1e6:.2f} MB printed: seml-hydra "
            f"{ours['bytes_in'] / 1e6:.2f} MB into MongoDB, "
            f"Sacred {theirs['bytes_in'] / 1e6:.2f} MB",
            flush=True,
        )
    return out


def rows(results: dict, args) -> list[tuple]:
    """Table rows ``(measure, ours, theirs, ratio, target, met)``: per length, bytes into
    MongoDB per byte printed (target <= :data:`TARGET`) and the MB."""
    table = []
    for seconds, r in results.items():
        printed = r["printed"]
        ours, theirs = r["seml-hydra"]["bytes_in"], r["sacred"]["bytes_in"]
        label = f"(h) {float(args.heartbeat_kb_per_s):g} KB/s x {seconds} s"
        table.append(
            (
                f"{label}: MongoDB bytes in / printed",
                ours / printed,
                theirs / printed,
                ours / theirs,
                f"<= {TARGET}",
                ours / printed <= TARGET,
            )
        )
        table.append(
            (f"{label}: MB into MongoDB", ours / 1e6, theirs / 1e6, ours / theirs, "-", None)
        )
    return table
