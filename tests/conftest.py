"""Fixtures and hooks only. Every test that touches MongoDB uses the real server of the testbed
(``tools/testbed/up.sh``), in a database of its own that is emptied before each test. What test
files share besides fixtures lives in ``tests/support/`` (one module a concern)."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from support.hydra_singletons import SingletonGuard
from support.machine import OTHER_USER, OtherUser, create_other_user, machine_lock
from support.markers import SERVICE_DIR, SERVICE_FIXTURES, SERVICE_MARKERS, UNIT_DIR, start_order
from support.mongo import MONGO_URL, TEST_DB
from support.slurm import FAULT_CLUSTER, FAULT_CONF, HOLD_DIR


def pytest_configure(config):
    """A suite started in the background by a script (`bash .ci/run &`, nohup) inherits SIGINT
    ignored, and so would every app it starts: the Ctrl-C tests need the apps to get SIGINT as
    from a terminal. A handled signal is reset to its default in a child at exec."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the xdist_group markers
def pytest_collection_modifyitems(config, items):
    """Mark every test by the services its fixtures bring (``support.markers.SERVICE_FIXTURES``);
    every test under ``tests/service`` also gets ``service``. A test under ``tests/unit`` that
    needs a service is a usage error naming it: the unit tier runs with no mongod and no Slurm.

    The ``serial`` tests (the fault cluster's, :func:`fault_slurm`) also get
    ``xdist_group("fault-cluster")``: under ``--dist loadgroup`` one worker runs them one after
    another, beside the others. The longest waits come first (a stable sort,
    ``support.markers.start_order``): the fault cluster's tests, then the other Slurm tests, the
    other service tests, the unit tier, so that no long test starts last."""
    misplaced = []
    for item in items:
        path = Path(str(item.path)).resolve()
        used = set(getattr(item, "fixturenames", ()))
        for marker, fixtures in SERVICE_FIXTURES.items():
            if used & fixtures:
                item.add_marker(marker)
        if used & SERVICE_FIXTURES["serial"]:
            item.add_marker(pytest.mark.xdist_group("fault-cluster"))
        if SERVICE_DIR in path.parents:
            item.add_marker("service")
        if UNIT_DIR in path.parents:
            found = sorted({m.name for m in item.iter_markers()} & SERVICE_MARKERS)
            if found:
                misplaced.append(f"{item.nodeid}: {', '.join(found)}")
    if misplaced:
        raise pytest.UsageError(
            "tests/unit must not need services; move these to tests/service:\n  "
            + "\n  ".join(misplaced)
        )
    items.sort(key=start_order)


@pytest.fixture(scope="session")
def _hydra_guard() -> SingletonGuard:
    """One :class:`support.hydra_singletons.SingletonGuard` for the session."""
    return SingletonGuard()


@pytest.fixture(autouse=True)
def _isolated_hydra_singletons(_hydra_guard):
    """Every test starts from the same Hydra singletons (version base, ConfigStore,
    HydraConfig...): a test that composes with ``version_base="1.3"`` must not change what the
    next test's jobs do (``hydra.job.chdir`` defaults on the version base). What Hydra's
    ``hydra_restore_singletons`` does, but only paid for by the tests that change the state."""
    before = _hydra_guard.before()
    yield
    _hydra_guard.after(before)


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
    from seml_hydra.store.db.client import reset_client_cache

    reset_client_cache()
    return url


@pytest.fixture
def test_db(db_url, mongo_client):
    """The (empty) pymongo database the launcher writes to in a test."""
    return mongo_client[TEST_DB]


@pytest.fixture
def slurm(request, _slurm_answers):
    """The testbed's Slurm (``sinfo``'s partitions); fails (never skips) when it does not answer.
    A test asking for it with ``request.getfixturevalue`` must carry the ``slurm`` marker
    (``pytest.param(..., marks=pytest.mark.slurm)``), else ``-m "not slurm"`` would run it."""
    if request.node.get_closest_marker("slurm") is None:
        pytest.fail(f"{request.node.nodeid} uses Slurm: mark it slurm")
    return _slurm_answers


@pytest.fixture(scope="session")
def _slurm_answers():
    """``sinfo``'s answer, once per pytest process."""
    if shutil.which("sinfo") is None:
        pytest.fail("Slurm is not installed; run tools/testbed/up.sh")
    out = subprocess.run(["sinfo", "-h", "-o", "%P %a"], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.fail(f"Slurm does not answer: {out.stderr.strip()}; run tools/testbed/up.sh")
    return out.stdout


@pytest.fixture
def fault_slurm(monkeypatch):
    """The testbed's fault cluster, this test's alone until it ends: every Slurm command of the
    test and of what it starts (``SLURM_CONF``, which sbatch hands on to the jobs) goes to it.

    Held machine-wide: one test at a time of every pytest process of the machine
    (``support.machine.machine_lock``), and ``$HOLD_DIR/semlfault`` names this process, so
    that an ``up.sh`` run by someone else meanwhile neither restarts a slurmd the test crashed
    nor resumes a node it drained; the test's own ``support.slurm.run_up_sh`` acts on it
    (``SEML_TESTBED_HOLDER``). Fails (never skips) when the cluster does not answer."""
    from seml_hydra.slurm import client

    if not FAULT_CONF.exists():
        pytest.fail(f"no fault cluster ({FAULT_CONF}); run tools/testbed/up.sh")
    with machine_lock("fault-cluster").acquire(timeout=1800):
        hold = HOLD_DIR / FAULT_CLUSTER
        HOLD_DIR.mkdir(parents=True, exist_ok=True)
        hold.write_text(f"{os.getpid()}\n")
        try:
            monkeypatch.setenv("SLURM_CONF", str(FAULT_CONF))
            monkeypatch.setenv("SEML_TESTBED_HOLDER", str(os.getpid()))
            monkeypatch.setattr(client, "_cluster_name", None)  # asked again, of this cluster
            out = subprocess.run(["sinfo", "-h", "-o", "%P %a"], capture_output=True, text=True)
            if out.returncode != 0:
                pytest.fail(f"the fault cluster does not answer: {out.stderr.strip()}")
            yield out.stdout
        finally:
            hold.unlink(missing_ok=True)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment with no database configured: empty HOME, private data dir."""
    home = tmp_path / "home"
    home.mkdir()
    return {"HOME": str(home), "SEML_HYDRA_DATA_DIR": str(tmp_path / "data")}


@pytest.fixture
def private_mongod(tmp_path_factory):
    """A standalone mongod of this test (``support.mongo.PrivateMongod``): nothing else talks
    to it, and the test may stop it (SIGSTOP); it is continued and stopped at the end."""
    from support.mongo import PrivateMongod

    base = tmp_path_factory.mktemp("mongod")
    server = PrivateMongod(base)
    server.start()
    try:
        yield server
    finally:
        if server.pid is not None:
            os.kill(server.pid, signal.SIGCONT)
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def private_runtime(tmp_path, monkeypatch):
    """The runtime directory (a node's code snapshots' private base,
    ``SEML_HYDRA_RUNTIME_DIR``) of this test; not created."""
    runtime = tmp_path / "runtime"
    monkeypatch.setenv("SEML_HYDRA_RUNTIME_DIR", str(runtime))
    return runtime


@pytest.fixture
def shared_tmp():
    """A fresh directory path right under /tmp (where other users can reach it; not made),
    removed after the test."""
    path = Path("/tmp") / f"seml-hydra-shared-{secrets.token_hex(4)}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def other_user() -> OtherUser:
    """The second local user (created once, kept: ``useradd`` is idempotent here). Fails when
    the suite does not run as root (it must create the account and act as it)."""
    if os.geteuid() != 0:
        pytest.fail("the shared-cluster tests need root (useradd, runuser)")
    with machine_lock("other-user"):
        create_other_user()
    return OtherUser(OTHER_USER)
