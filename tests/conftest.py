"""Shared fixtures: every test that touches MongoDB uses the real server of the testbed
(``tools/testbed/up.sh``), in a database of its own that is emptied before each test."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

# A suite started in the background by a script (`bash .ci/run &`, nohup) inherits SIGINT
# ignored, and so would every app it starts: the Ctrl-C tests need the apps to get SIGINT as
# from a terminal. A handled signal is reset to its default in a child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

ROOT = Path(__file__).resolve().parents[1]
MONGO_URL = os.environ.get("SEML_TEST_MONGO_URL", "mongodb://127.0.0.1:27017")
#: one database per pytest process, so two test runs on one machine do not collide
TEST_DB = f"seml_hydra_test_{os.getpid()}"


#: marker -> the fixtures that bring it: a test that uses one of them (directly, through another
#: fixture or autouse) gets the marker at collection, so ``-m "not slurm"`` selects what it says
SERVICE_FIXTURES = {
    "mongo": {
        "mongo_client",
        "mongo_url",
        "mongo_user",
        "private_mongod",
        "replica_set",
        "auth_mongod",
    },
    "slurm": {"slurm", "fault_slurm"},
    "serial": {"fault_slurm"},
    "sshd": {"sshd"},
    "other_user": {"other_user"},
}
#: markers that mean "needs a service or the machine's state": never in ``tests/unit``
SERVICE_MARKERS = {*SERVICE_FIXTURES, "service", "serial", "outage", "discovery"}
UNIT_DIR = Path(__file__).resolve().parent / "unit"
SERVICE_DIR = Path(__file__).resolve().parent / "service"


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the xdist_group markers
def pytest_collection_modifyitems(config, items):
    """Mark every test by the services its fixtures bring (:data:`SERVICE_FIXTURES`); every test
    under ``tests/service`` also gets ``service``. A test under ``tests/unit`` that needs a
    service is a usage error naming it: the unit tier runs with no mongod and no Slurm.

    The ``serial`` tests (the fault cluster's, :func:`fault_slurm`) also get
    ``xdist_group("fault-cluster")``: under ``--dist loadgroup`` one worker runs them one after
    another, beside the others. The longest waits come first (a stable sort): the fault cluster's
    tests, then the other Slurm tests, the other service tests, the unit tier, so that no long
    test starts last."""
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
    items.sort(key=_start_order)


def _start_order(item) -> int:
    """0 for the fault cluster's tests, 1 for the other Slurm tests, 2 for the other service
    tests, 3 for the unit tier."""
    for rank, marker in enumerate(("serial", "slurm", "service")):
        if item.get_closest_marker(marker) is not None:
            return rank
    return 3


def machine_lock(name: str):
    """A lock file ``/tmp/seml-hydra-test-<name>.lock`` (``filelock.FileLock``, a context
    manager): a set-up step shared by every pytest process of the machine (xdist workers, other
    test runs: creating a user, installing a cached venv) runs in one of them at a time."""
    import filelock

    return filelock.FileLock(f"/tmp/seml-hydra-test-{name}.lock")


@pytest.fixture(autouse=True)
def _isolated_hydra_singletons(hydra_restore_singletons):
    """Every test starts from the same Hydra singletons (version base, ConfigStore,
    HydraConfig...): a test that composes with ``version_base="1.3"`` must not change what the
    next test's jobs do (``hydra.job.chdir`` defaults on the version base)."""
    yield


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


#: the testbed's fault cluster (tools/testbed/up.sh): a Slurm cluster of its own, for the tests
#: that crash a slurmd, drain a node or stop slurmctld, beside every other test
FAULT_CLUSTER = "semlfault"
FAULT_CONF = Path("/etc/slurm-fault/slurm.conf")
#: its nodes: a job runs on LOST_NODE when OTHER_NODE is drained or excluded
OTHER_NODE, LOST_NODE = FAULT_NODES = ("node3", "node4")
#: where a test that holds a cluster says so (up.sh then leaves that cluster alone)
HOLD_DIR = Path("/run/seml-testbed-hold")


@pytest.fixture
def fault_slurm(monkeypatch):
    """The testbed's fault cluster, this test's alone until it ends: every Slurm command of the
    test and of what it starts (``SLURM_CONF``, which sbatch hands on to the jobs) goes to it.

    Held machine-wide: one test at a time of every pytest process of the machine
    (:func:`machine_lock`), and ``$HOLD_DIR/semlfault`` names this process, so that an
    ``up.sh`` run by someone else meanwhile neither restarts a slurmd the test crashed nor
    resumes a node it drained; the test's own :func:`run_up_sh` acts on it
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


def run_up_sh() -> None:
    """Bring the fault cluster back (:func:`fault_slurm`): run tools/testbed/up.sh, which
    starts what is not running (a slurmd or slurmctld a test killed) and waits for its nodes,
    for the fault cluster only (``MAIN_CLUSTER=0 WITH_MONGO=0``: the shared cluster's nodes,
    busy with the other tests' jobs, are neither touched nor waited for) and without its srun
    smoke test. Fails the test with up.sh's last 40 lines of output (its ``ERROR:`` line and,
    for nodes that did not come back, ``sinfo -N -l``) when it fails."""
    done = subprocess.run(
        ["bash", str(ROOT / "tools/testbed/up.sh")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "SMOKE_TEST": "0", "MAIN_CLUSTER": "0", "WITH_MONGO": "0"},
    )
    if done.returncode != 0:
        tail = "\n".join(done.stdout.splitlines()[-40:])
        pytest.fail(f"tools/testbed/up.sh exited with {done.returncode}:\n{tail}")


#: the password of the MongoDB configurations the tests write (must never show up in output)
SECRET = "s3cr3t-P@ss/word"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment with no database configured: empty HOME, private data dir."""
    home = tmp_path / "home"
    home.mkdir()
    return {"HOME": str(home), "SEML_HYDRA_DATA_DIR": str(tmp_path / "data")}


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


def run_app(
    app: str | Path,
    *args: str,
    cwd: Path,
    env: dict | None = None,
    timeout: float = 300,
    check: bool = False,
):
    """Run an app in a subprocess (:func:`run_python`): ``app`` is a path relative to
    ``examples/`` (an example app, ``"../tests/apps/gate.py"``) or an absolute one."""
    app_path = str(ROOT / "examples" / app)
    return run_python(app_path, *args, cwd=cwd, env=env, timeout=timeout, check=check)


def run_points(n: int, *args: str, cwd: Path, env: dict | None = None):
    """``examples/fail.py`` swept over ``x=0..n-1`` on Slurm (``hydra/launcher=seml``), no point
    failing (``fail_on=-1``), ``args`` added (:func:`run_app`): more points than the testbed's
    MaxArraySize (8) make several arrays."""
    values = ",".join(str(i) for i in range(n))
    return run_app(
        "fail.py", "-m", "hydra/launcher=seml", "fail_on=-1", f"x={values}", *args, cwd=cwd, env=env
    )


def run_python(
    *argv: str, cwd: Path, env: dict | None = None, timeout: float = 300, check: bool = False
):
    """``python *argv`` (this interpreter) in ``cwd``, ``env`` added to the environment; with
    ``check`` the test fails when it does not exit 0 (showing its output). Returns the
    CompletedProcess (text output)."""
    proc = subprocess.run(
        [sys.executable, *argv],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


#: the app that keeps an experiment RUNNING until its gate file exists (``tests/apps/gate.py``)
GATE_APP = "../tests/apps/gate.py"


def launch_gate(tmp_path: Path, *overrides: str, check: bool = True):
    """Launch a sweep of :data:`GATE_APP` on the Slurm testbed without waiting for it
    (``hydra.launcher.wait=false``) in ``tmp_path``, with Hydra ``overrides`` (``x=...``, the
    ``gate=`` file, launcher fields); see :func:`run_app` for ``check``."""
    return run_app(
        GATE_APP,
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.wait=false",
        *overrides,
        cwd=tmp_path,
        check=check,
    )


def seml_ok(*args: str) -> str:
    """The output of the ``seml`` command ``args`` run in-process (typer's ``CliRunner``); the
    test fails when it does not exit 0."""
    from typer.testing import CliRunner

    from seml_hydra.cli import app

    result = CliRunner().invoke(app, list(args), prog_name="seml")
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def sacct(job, fields: str, *flags: str, check: bool = True) -> str:
    """Slurm accounting of ``job`` (an array or job id): ``sacct -n -P -X *flags -j job -o
    fields`` (no header, ``|``-separated, allocations only), its stdout; ``check``: fail when
    sacct does."""
    return subprocess.run(
        ["sacct", "-n", "-P", "-X", *flags, "-j", str(job), "-o", fields],
        capture_output=True,
        text=True,
        check=check,
    ).stdout


def wait_until(what: str, predicate, timeout: float = 180.0, interval: float = 0.5):
    """Poll ``predicate`` until it returns something truthy (returned); fail after ``timeout``
    seconds saying what was awaited. No fixed sleeps in the tests: they wait for a state."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting until {what}")
        time.sleep(interval)


def snapshot_files(db, doc) -> list[list]:
    """``[[relative path, GridFS id], ...]`` of a document's code snapshot: its launch's
    manifest, or the list an older document carries (``store.snapshot.node.load_snapshot``)."""
    from seml_hydra.store.snapshot.node import load_snapshot

    found = load_snapshot(db, doc.get("seml") or {})
    return found.files if found is not None else []


def statuses(collection) -> dict[int, str]:
    """``{_id: status}`` of a collection's experiments."""
    return {d["_id"]: d["status"] for d in collection.find({}, {"status": 1})}


#: squeue states of a task that is still there
ALIVE = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED")


def squeue_tasks(array_id, alive_only: bool = True) -> dict[str, tuple[str, str]]:
    """``{"<array>_<task>": (state, reason)}`` of an array's tasks as squeue lists them."""
    out = subprocess.run(
        ["squeue", "-h", "-r", "-j", str(array_id), "-o", "%i|%T|%r"],
        capture_output=True,
        text=True,
    ).stdout
    rows = {}
    for line in out.split():
        job, state, reason = line.split("|")
        if state in ALIVE or not alive_only:
            rows[job] = (state, reason)
    return rows


def start_app(path: str, *args: str, cwd: Path) -> subprocess.Popen:
    """Start an app (a path relative to the repository) with ``args`` in the background, its
    output piped as text; the caller kills it if it is still running at the end."""
    return subprocess.Popen(
        [sys.executable, str(ROOT / path), *args],
        cwd=cwd,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_running(collection, proc: subprocess.Popen, count: int = 1, timeout: float = 60):
    """Wait until ``count`` experiments of ``collection`` are RUNNING (the launcher ``proc`` must
    still be alive meanwhile)."""

    def running() -> bool:
        assert proc.poll() is None, proc.communicate()
        return collection.count_documents({"status": "RUNNING"}) >= count

    wait_until(f"{count} RUNNING experiment(s)", running, timeout, 0.2)


#: the unprivileged local account the shared-cluster tests act as (another user of the cluster)
OTHER_USER = "semlother"
#: a world-readable virtualenv (Debian's python3 + pymongo) the other user runs Python from
OTHER_VENV = Path("/opt/seml-hydra-other-venv")


class OtherUser:
    """A second, unprivileged local user of this machine (``useradd``), to attack as.

    Attributes: ``name``, ``uid``, ``gid``, ``home`` (a ``Path``). :meth:`run` runs a command as
    that user through ``runuser -u`` (the test suite runs as root, so no password is asked);
    :meth:`python` runs Python code as that user with :data:`OTHER_VENV`'s interpreter (the
    suite's own interpreter lives under root's 0700 home; that venv has pymongo).
    """

    def __init__(self, name: str) -> None:
        import pwd

        entry = pwd.getpwnam(name)
        self.name, self.uid, self.gid = name, entry.pw_uid, entry.pw_gid
        self.home = Path(entry.pw_dir)

    def run(self, *args: str, check: bool = False, timeout: float = 60, **kwargs):
        """``runuser -u <name> -- *args``; returns CompletedProcess (text output)."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home)}
        env.update(kwargs.pop("env", {}))
        return subprocess.run(
            ["runuser", "-u", self.name, "--", *args],
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
            env=env,
            cwd=kwargs.pop("cwd", "/"),
            **kwargs,
        )

    def python(self, code: str, *args: str, **kwargs):
        """Run ``code`` as that user with :data:`OTHER_VENV`'s Python (it has pymongo)."""
        return self.run(str(OTHER_VENV / "bin" / "python"), "-c", code, *args, **kwargs)


@pytest.fixture(scope="session")
def other_user() -> OtherUser:
    """The second local user (created once, kept: ``useradd`` is idempotent here). Fails when
    the suite does not run as root (it must create the account and act as it)."""
    if os.geteuid() != 0:
        pytest.fail("the shared-cluster tests need root (useradd, runuser)")
    with machine_lock("other-user"):
        _create_other_user()
    return OtherUser(OTHER_USER)


def _create_other_user() -> None:
    """``useradd`` :data:`OTHER_USER` and make :data:`OTHER_VENV` unless they exist."""
    import pwd

    try:
        pwd.getpwnam(OTHER_USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", OTHER_USER], check=True)
    if not (OTHER_VENV / "bin" / "python").exists():
        python = shutil.which("python3", path="/usr/bin:/bin") or "python3"
        subprocess.run([python, "-m", "venv", str(OTHER_VENV)], check=True)
        subprocess.run(
            [
                str(OTHER_VENV / "bin" / "pip"),
                "install",
                "-q",
                "--disable-pip-version-check",
                "pymongo>=4",
            ],
            check=True,
        )


def launcher(**changes) -> dict:
    """A ``hydra.launcher`` node as Hydra passes it (``SemlLauncherConf`` as a dict) with
    ``changes`` applied; for the pure tests of the sbatch mapping, fields and dependencies."""
    import dataclasses

    from seml_hydra.config import SemlLauncherConf

    node = dataclasses.asdict(SemlLauncherConf())
    node.update(changes)
    return node


def refusal(**changes) -> str:
    """The message of the ``ValueError`` with which ``launch.sbatch.validate_launcher`` refuses
    :func:`launcher` ``(**changes)``; the test fails when the node is accepted."""
    from seml_hydra.launch.sbatch import validate_launcher

    with pytest.raises(ValueError) as error:
        validate_launcher(launcher(**changes))
    return str(error.value)


#: a module of :func:`module_project`: ``VALUE`` and ``where()``, the file its code names
MODULE_SOURCE = (
    "VALUE = 41\n\n\ndef where():\n    import inspect\n    return inspect.getsourcefile(where)\n"
)


def import_fresh(directory: Path, name: str) -> tuple[str, list[str]]:
    """Import ``name`` with ``directory`` first on ``sys.path`` in a fresh interpreter that
    writes bytecode; ``(its VALUE and where(), the files it compiled)``."""
    code = textwrap.dedent(
        f"""
        import builtins, sys
        compiled = []
        real = builtins.compile
        def recording(source, filename, *args, **kwargs):
            compiled.append(str(filename))
            return real(source, filename, *args, **kwargs)
        builtins.compile = recording
        sys.path.insert(0, {str(directory)!r})
        import {name} as module
        print(module.VALUE, module.where())
        print(*[f for f in compiled if f.startswith({str(directory)!r})])
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout.split("\n")
    return out[0], out[1].split()


def module_project(root: Path, source: str = MODULE_SOURCE) -> Path:
    """A project under ``root`` with the package ``pkg`` and its module ``pkg/mod.py``
    (``source``); returns ``root``."""
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "mod.py").write_text(source)
    return root
