"""Shared fixtures: every test that touches MongoDB uses the real server of the testbed
(``tools/testbed/up.sh``), in a database of its own that is emptied before each test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MONGO_URL = os.environ.get("SEML_TEST_MONGO_URL", "mongodb://127.0.0.1:27017")
#: one database per pytest process, so two test runs on one machine do not collide
TEST_DB = f"seml_hydra_test_{os.getpid()}"


@pytest.fixture(scope="session")
def mongo_client():
    """A pymongo client of the test server; fails (never skips) when it does not answer."""
    import pymongo

    client = pymongo.MongoClient(MONGO_URL, serverSelectionTimeoutMS=3000)
    try:
        client.admin.command("ping")
    except Exception as error:  # pragma: no cover - the environment is broken
        pytest.fail(f"no MongoDB at {MONGO_URL} ({error}); run tools/testbed/up.sh")
    yield client
    client.drop_database(TEST_DB)
    client.close()


@pytest.fixture
def db_url(mongo_client, monkeypatch):
    """URL of an empty test database, also exported as ``SEML_MONGODB_URI`` so in-process
    Hydra runs and their jobs (sbatch exports the environment) use it."""
    db = mongo_client[TEST_DB]
    for name in db.list_collection_names():
        db.drop_collection(name)
    url = f"{MONGO_URL}/{TEST_DB}"
    monkeypatch.setenv("SEML_MONGODB_URI", url)
    from seml_hydra import database

    database.reset_client_cache()
    return url


@pytest.fixture
def test_db(db_url, mongo_client):
    """The (empty) pymongo database the launcher writes to in a test."""
    return mongo_client[TEST_DB]


@pytest.fixture(scope="session")
def slurm():
    """The testbed's Slurm; fails (never skips) when ``sinfo`` does not answer."""
    if shutil.which("sinfo") is None:
        pytest.fail("Slurm is not installed; run tools/testbed/up.sh")
    out = subprocess.run(["sinfo", "-h", "-o", "%P %a"], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.fail(f"Slurm does not answer: {out.stderr.strip()}; run tools/testbed/up.sh")
    return out.stdout


def run_app(app: str, *args: str, cwd: Path, env: dict | None = None, timeout: float = 300):
    """Run an example app (``examples/<app>``) in a subprocess; returns CompletedProcess."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, str(ROOT / "examples" / app), *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
