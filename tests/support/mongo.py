"""MongoDB in the tests: the testbed's server, this process's test database, a private
``mongod`` a test starts and stops itself, SEML configuration files, what a collection holds."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

from support.wait import wait_until

#: the testbed's mongod (``tools/testbed/up.sh``); ``SEML_TEST_MONGO_URL`` names another
MONGO_URL = os.environ.get("SEML_TEST_MONGO_URL", "mongodb://127.0.0.1:27017")
#: one database per pytest process, so two test runs on one machine do not collide
TEST_DB = f"seml_hydra_test_{os.getpid()}"
#: the mongod binary the testbed installs (a private server of a test runs it too)
MONGOD = "/usr/local/bin/mongod"
#: the password of the MongoDB configurations the tests write (must never show up in output)
SECRET = "s3cr3t-P@ss/word"


def write_config(path: Path, **values) -> Path:
    """Write a SEML mongodb.config at ``path`` (user alice, password :data:`SECRET`, host
    db.example.org) with ``values`` replacing keys (None values are left out); returns ``path``."""
    import yaml

    base = {
        "username": "alice",
        "password": SECRET,
        "host": "db.example.org",
        "port": 27017,
        "database": "alice_db",
    }
    base.update(values)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({k: v for k, v in base.items() if v is not None}))
    return path


def statuses(collection) -> dict[int, str]:
    """``{_id: status}`` of a collection's experiments."""
    return {d["_id"]: d["status"] for d in collection.find({}, {"status": 1})}


def snapshot_files(db, doc) -> list[list]:
    """``[[relative path, GridFS id], ...]`` of a document's code snapshot: its launch's
    manifest, or the list an older document carries (``store.snapshot.node.load_snapshot``)."""
    from seml_hydra.store.snapshot.node import load_snapshot

    found = load_snapshot(db, doc.get("seml") or {})
    return found.files if found is not None else []


def free_port() -> int:
    """A TCP port of 127.0.0.1 free at the time of the call (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (a forked mongod is reparented away from us)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


class PrivateMongod:
    """One mongod of a test: its own port, dbpath and log under ``base``; started and stopped
    (SIGTERM, waited for) by the test, restarted on the same port and dbpath. ``repl_set``: the
    replica set it is a member of (None: standalone)."""

    def __init__(self, base: Path, repl_set: str | None = None) -> None:
        self.port = free_port()
        self.dir = base / f"mongod-{self.port}"
        self.dir.mkdir(parents=True)
        self.repl_set = repl_set
        self.pid: int | None = None

    def start(self) -> None:
        """Fork the server and wait (60 s at most) until it answers a ping."""
        argv = [MONGOD, "--dbpath", str(self.dir / "data"), "--port", str(self.port)]
        argv += ["--bind_ip", "127.0.0.1", "--fork", "--logpath", str(self.dir / "mongod.log")]
        argv += ["--logappend", "--pidfilepath", str(self.dir / "mongod.pid")]
        argv += ["--wiredTigerCacheSizeGB", "0.25"]
        argv += ["--setParameter", "diagnosticDataCollectionEnabled=false"]
        if self.repl_set:
            argv += ["--replSet", self.repl_set]
        (self.dir / "data").mkdir(exist_ok=True)
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        self.pid = int((self.dir / "mongod.pid").read_text())
        wait_until(f"mongod on {self.port} answers", self._answers, 60, 0.2)

    def _answers(self) -> bool:
        try:
            self.direct().admin.command("ping")
        except Exception:
            return False
        return True

    def direct(self):
        """A pymongo client of this member alone (``directConnection``, 2 s to select it)."""
        import pymongo

        return pymongo.MongoClient(
            "127.0.0.1", self.port, directConnection=True, serverSelectionTimeoutMS=2000
        )

    def stop(self) -> None:
        """SIGTERM the server and wait (120 s at most) until it is gone; no-op when it is."""
        if self.pid is not None and alive(self.pid):
            os.kill(self.pid, signal.SIGTERM)
            wait_until(f"mongod {self.pid} is gone", lambda: not alive(self.pid), 120, 0.2)
        self.pid = None
