"""seml_hydra.store.database and seml_hydra.store.server.embedded against a real mongod (no mocks): connecting,
id counters, embedded mongod processes, ``seml configure`` (the pure parts: tests/unit).

The server at $SEML_TEST_MONGO_URL (default mongodb://127.0.0.1:27017, no access control,
user seml/seml on database seml) must be running: tests that need it fail, they do not skip.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pymongo
import pymongo.errors
import pytest
import yaml
from conftest import SECRET, wait_until, write_config

from seml_hydra.core.processes import process_alive
from seml_hydra.store.db.client import connect, get_collection, reset_client_cache
from seml_hydra.store.db.collections import COUNTERS_COLLECTION, next_ids
from seml_hydra.store.db.job_db import job_db_config
from seml_hydra.store.db.settings import resolve_db_settings
from seml_hydra.store.errors import DatabaseError
from seml_hydra.store.server import embedded as embedded_db
from seml_hydra.store.server.embedded import (
    EmbeddedServer,
    ensure_embedded_mongod,
    stop_embedded_mongod,
)
from seml_hydra.store.server.mongod import free_ports

REPO = Path(__file__).resolve().parents[2]
MONGO_URL = os.environ.get("SEML_TEST_MONGO_URL", "mongodb://127.0.0.1:27017")


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def mongo_url() -> str:
    """The test server's URL; fails (never skips) when nothing answers there."""
    client = pymongo.MongoClient(MONGO_URL, serverSelectionTimeoutMS=5000)
    try:
        client.admin.command("ping")
    except pymongo.errors.PyMongoError as err:
        pytest.fail(f"no mongod answers at {MONGO_URL} (set SEML_TEST_MONGO_URL): {err}")
    finally:
        client.close()
    return MONGO_URL


@pytest.fixture
def db_settings(mongo_url: str):
    """Settings for a fresh, uniquely named database on the test server; dropped afterwards."""
    name = f"seml_hydra_test_{uuid.uuid4().hex[:12]}"
    settings = resolve_db_settings({"url": mongo_url, "database": name}, env={})
    yield settings
    client = pymongo.MongoClient(mongo_url, serverSelectionTimeoutMS=5000)
    client.drop_database(name)
    client.close()
    reset_client_cache()


# --------------------------------------------------------------------------- connecting


def test_connect_and_get_collection(db_settings):
    db = connect(db_settings)
    assert db.name == db_settings.database
    assert connect(db_settings).client is db.client  # cached
    coll = get_collection("runs", db_settings)
    coll.insert_one({"_id": 1})
    assert coll.find_one({"_id": 1}) == {"_id": 1}


def seml_user_config(mongo_url: str, tmp_path: Path, password: str) -> Path:
    """A SEML mongodb.config in ``tmp_path`` for the testbed's user ``seml`` (database
    ``seml``) on the server of ``mongo_url``, with ``password``."""
    server = resolve_db_settings({"url": mongo_url}, env={})
    return write_config(
        tmp_path / "m.config",
        host=server.host,
        port=server.port,
        username="seml",
        password=password,
        database="seml",
    )


def test_connect_wrong_password(mongo_url, tmp_path):
    path = seml_user_config(mongo_url, tmp_path, SECRET)
    s = resolve_db_settings({"config_file": str(path)}, env={})
    with pytest.raises(DatabaseError) as exc:
        connect(s)
    msg = str(exc.value)
    assert "authentication failed for user 'seml' on database 'seml'" in msg
    assert SECRET not in msg


def test_connect_with_seml_user(mongo_url, tmp_path):
    path = seml_user_config(mongo_url, tmp_path, "seml")
    db = connect(resolve_db_settings({"config_file": str(path)}, env={}))
    assert db.command("ping")["ok"] == 1.0
    assert db.name == "seml"


# --------------------------------------------------------------------------- next_ids


def test_next_ids_sequence(db_settings):
    db = connect(db_settings)
    assert next_ids(db, "c", 3) == range(1, 4)
    assert next_ids(db, "c", 2) == range(4, 6)
    assert next_ids(db, "c", 0) == range(6, 6)
    assert next_ids(db, "other", 1) == range(1, 2)
    assert db[COUNTERS_COLLECTION].find_one({"_id": "c"}) == {"_id": "c", "value": 5}
    with pytest.raises(ValueError):
        next_ids(db, "c", -1)


def test_next_ids_floor_initialisation(db_settings):
    db = connect(db_settings)
    coll = db["exps"]
    coll.insert_many([{"_id": i} for i in range(1, 8)])  # e.g. written by `seml add`
    calls = []

    def floor():
        calls.append(1)
        doc = coll.find_one(sort=[("_id", -1)])
        return doc["_id"] if doc else None

    assert next_ids(db, "exps", 3, floor=floor) == range(8, 11)
    assert next_ids(db, "exps", 2, floor=floor) == range(11, 13)
    assert len(calls) == 1  # only while the counter did not exist
    assert next_ids(db, "empty", 2, floor=lambda: None) == range(1, 3)
    with pytest.raises(ValueError, match="floor"):
        next_ids(db, "bad", 1, floor=lambda: "7")


def _check_disjoint(ranges: list[range], low: int) -> None:
    ids = [i for r in ranges for i in r]
    assert len(ids) == len(set(ids)), "two callers got the same id"
    assert min(ids) == low + 1 and max(ids) == low + len(ids)  # no gaps either


def test_next_ids_threads_get_disjoint_ranges(db_settings):
    db = connect(db_settings)
    barrier = threading.Barrier(8)
    results: list[range] = []
    lock = threading.Lock()

    def floor():
        time.sleep(0.05)  # widen the window in which several threads create the counter
        return 100

    def worker(k: int):
        barrier.wait()
        for j in range(25):
            r = next_ids(db, "threads", 1 + (k + j) % 4, floor=floor)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 200
    _check_disjoint(results, low=100)


WORKER = textwrap.dedent(
    """
    import json, sys, time
    from seml_hydra.store.db.client import connect, get_collection
    from seml_hydra.store.db.collections import next_ids
    from seml_hydra.store.db.settings import resolve_db_settings
    url, name, go = sys.argv[1], sys.argv[2], float(sys.argv[3])
    db = connect(resolve_db_settings({"url": url, "database": name}, env={}))
    while time.time() < go:
        time.sleep(0.001)
    out = [next_ids(db, "procs", 3, floor=lambda: 50) for _ in range(30)]
    print(json.dumps([[r.start, r.stop] for r in out]))
    """
)


def test_next_ids_processes_get_disjoint_ranges(db_settings, mongo_url):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), *sys.path]))
    go = time.time() + 3.0  # all processes start hammering at the same moment
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, mongo_url, db_settings.database, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(4)
    ]
    ranges = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        ranges += [range(a, b) for a, b in json.loads(out)]
    assert len(ranges) == 120
    _check_disjoint(ranges, low=50)


# --------------------------------------------------------------------------- embedded server


def test_embedded_server_start_reuse_stop(tmp_path):
    data_dir = tmp_path / "seml-hydra" / "mongodb"
    try:
        first = ensure_embedded_mongod(data_dir)
        assert first.started and first.host == "127.0.0.1"
        assert first.data_dir == data_dir
        assert json.loads((data_dir / "state.json").read_text())["port"] == first.port
        assert "embedded MongoDB at 127.0.0.1:" in first.message()
        assert "hydra.launcher.db.url" in first.message()

        client = pymongo.MongoClient(first.url, serverSelectionTimeoutMS=5000)
        assert client.admin.command("ping")["ok"] == 1.0
        client.close()

        second = ensure_embedded_mongod(data_dir)
        assert second == EmbeddedServer(first.host, first.port, data_dir, started=False)
    finally:
        assert stop_embedded_mongod(data_dir) is True
    assert stop_embedded_mongod(data_dir) is False
    assert embedded_db.find_running_embedded(data_dir) is None


def test_resolve_falls_back_to_embedded_server(env):
    data_dir = embedded_db.default_data_dir(env)
    assert data_dir == Path(env["SEML_HYDRA_DATA_DIR"]) / "mongodb"
    try:
        s = resolve_db_settings(None, env)
        assert s.is_embedded and s.database == "seml" and s.username == "seml-hydra"
        assert s.password and s.password not in repr(s) and s.password not in s.describe()
        assert s.source.startswith(f"embedded mongod at 127.0.0.1:{s.port}")
        # jobs resolve the same server from the credentials file whose path they get
        job = resolve_db_settings(job_db_config(s, None), {}, start_embedded=False)
        assert (job.port, job.username, job.password) == (s.port, s.username, s.password)
        db = connect(s)
        db["x"].insert_one({"_id": 1})
        # Already running: usable without starting, and with a database override.
        s2 = resolve_db_settings({"database": "other"}, env, start_embedded=False)
        assert (s2.port, s2.database) == (s.port, "other")
    finally:
        reset_client_cache()
        assert stop_embedded_mongod(data_dir)


def test_concurrent_launchers_start_one_embedded_server(tmp_path):
    data_dir = tmp_path / "mongodb"
    results: list[EmbeddedServer] = []
    barrier = threading.Barrier(4)

    def start():
        barrier.wait()
        results.append(ensure_embedded_mongod(data_dir))

    threads = [threading.Thread(target=start) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 4
        assert sum(r.started for r in results) == 1
        assert len({r.port for r in results}) == 1
    finally:
        stop_embedded_mongod(data_dir)


# --------------------------------------------------------------------------- embedded: other users

MONGOD = "/usr/local/bin/mongod"

#: run as the other user: try every way in (TCP without credentials, each socket path given)
#: and print one line per attempt: "LISTED <target> <names>" or "refused <target> <error>"
ATTACK = """
import sys
from urllib.parse import quote
import pymongo
targets = [("127.0.0.1", int(sys.argv[1]))]
targets += [("mongodb://" + quote(path, safe=""),) for path in sys.argv[2:]]
for target in targets:
    try:
        client = pymongo.MongoClient(*target, serverSelectionTimeoutMS=2000, directConnection=True)
        print("LISTED", target, client.list_database_names(), client["seml"].list_collection_names())
    except Exception as err:
        print("refused", target, type(err).__name__)
"""


@pytest.fixture
def shared_data_dir():
    """``<dir>/mongodb`` where ``<dir>`` is world-traversable, as ``~/.local/share`` usually is
    (pytest's tmp_path is root's 0700 and would keep the other user out by itself)."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="seml-hydra-test-"))
    base.chmod(0o755)
    try:
        yield base / "mongodb"
    finally:
        try:
            stop_embedded_mongod(base / "mongodb")
        finally:
            reset_client_cache()
            shutil.rmtree(base, ignore_errors=True)


def _unix_sockets_of(pid: int) -> list[str]:
    """Paths of the Unix sockets process ``pid`` holds (``/proc/net/unix`` by inode)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    with open("/proc/net/unix") as fh:
        rows = [line.split() for line in fh.readlines()[1:]]
    return [row[7] for row in rows if len(row) > 7 and row[6] in inodes]


def _gone(pid: int) -> bool:
    return not process_alive(pid)


def _private_modes(data_dir: Path) -> dict[str, str]:
    names = ["", "db", "mongod.log", "mongod.pid", "state.json", "mongodb.config"]
    return {name: oct((data_dir / name).stat().st_mode & 0o777) for name in names}


PRIVATE = {
    "": "0o700",
    "db": "0o700",
    "mongod.log": "0o600",
    "mongod.pid": "0o600",
    "state.json": "0o600",
    "mongodb.config": "0o600",
}


def test_other_users_cannot_reach_the_embedded_server_nor_read_its_files(
    shared_data_dir, other_user
):
    data_dir = shared_data_dir
    server = ensure_embedded_mongod(data_dir)
    user, password = embedded_db.credentials(data_dir)
    mine = pymongo.MongoClient(
        server.host, server.port, username=user, password=password, authSource="seml"
    )
    mine["seml"]["exp"].insert_one({"_id": 1, "payload": "secret"})
    assert mine["seml"].list_collection_names() == ["exp"]
    mine.close()

    pid = json.loads((data_dir / "state.json").read_text())["pid"]
    sockets = _unix_sockets_of(pid)
    assert sockets == []  # no Unix socket, in particular not mongod's /tmp/mongodb-PORT.sock
    attack = other_user.python(ATTACK, str(server.port), f"/tmp/mongodb-{server.port}.sock")
    lines = attack.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("refused") for line in lines), (
        attack.stdout + attack.stderr
    )
    assert "OperationFailure" in lines[0]  # TCP reaches the server, which wants credentials

    assert _private_modes(data_dir) == PRIVATE
    for name in ("", "mongod.log", "mongodb.config", "state.json", "db"):
        read = other_user.run("cat" if name not in ("", "db") else "ls", str(data_dir / name))
        assert read.returncode != 0 and "Permission denied" in read.stderr, (name, read)

    # the password is in no command line and not in mongod's log
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            assert password.encode() not in cmdline.read_bytes(), cmdline
        except OSError:
            pass
    assert password not in (data_dir / "mongod.log").read_text()


def _old_style_mongod(data_dir: Path, port: int) -> int:
    """Start mongod as seml-hydra's older versions did (no access control, default umask,
    state.json 0644); returns its pid."""
    (data_dir / "db").mkdir(parents=True)
    for path in (data_dir, data_dir / "db"):
        path.chmod(0o755)
    old_umask = os.umask(0o022)
    try:
        subprocess.run(
            [MONGOD, "--dbpath", str(data_dir / "db"), "--bind_ip", "127.0.0.1", "--port",
             str(port), "--wiredTigerCacheSizeGB", "0.5", "--nounixsocket", "--fork",
             "--logpath", str(data_dir / "mongod.log"), "--logappend", "--pidfilepath",
             str(data_dir / "mongod.pid")],
            check=True, capture_output=True, start_new_session=True,
        )  # fmt: skip
        pid = int((data_dir / "mongod.pid").read_text())
        state = {"host": "127.0.0.1", "port": port, "pid": pid, "dbpath": str(data_dir / "db")}
        (data_dir / "state.json").write_text(json.dumps(state))
    finally:
        os.umask(old_umask)
    return pid


def test_an_older_versions_data_dir_is_migrated_with_its_documents(shared_data_dir, other_user):
    data_dir = shared_data_dir
    port = next(free_ports())
    old_pid = _old_style_mongod(data_dir, port)
    old = pymongo.MongoClient("127.0.0.1", port, serverSelectionTimeoutMS=5000)
    old["seml"]["sweep"].insert_many([{"_id": 1, "config": {"x": 1}}, {"_id": 2}])
    old.close()
    # an older version's files: the directories and state.json are open to the other user
    # (mongod itself makes its log 0600)
    assert other_user.run("cat", str(data_dir / "state.json")).returncode == 0
    assert other_user.run("ls", str(data_dir / "db")).returncode == 0

    server = ensure_embedded_mongod(data_dir)
    assert server.started  # the old server (ours, on our db/) was stopped, not reused
    assert _gone(old_pid)
    settings = resolve_db_settings(None, {"SEML_HYDRA_DATA_DIR": str(data_dir.parent)})
    assert settings.port == server.port and settings.username == "seml-hydra"
    assert sorted(d["_id"] for d in connect(settings)["sweep"].find()) == [1, 2]
    anonymous = pymongo.MongoClient("127.0.0.1", server.port, serverSelectionTimeoutMS=5000)
    with pytest.raises(pymongo.errors.OperationFailure, match="requires authentication"):
        anonymous["seml"].list_collection_names()
    anonymous.close()
    assert _private_modes(data_dir) == PRIVATE
    for path in ("state.json", "mongod.log", "mongodb.config"):
        assert other_user.run("cat", str(data_dir / path)).returncode != 0
    assert other_user.run("ls", str(data_dir / "db")).returncode != 0


def test_a_server_of_another_user_on_the_recorded_port_is_not_trusted(shared_data_dir, other_user):
    data_dir = shared_data_dir
    first = ensure_embedded_mongod(data_dir)
    ours = json.loads((data_dir / "state.json").read_text())["pid"]
    os.kill(ours, signal.SIGTERM)  # ours ends (a crash, a reboot): state.json still names the port
    wait_until("our mongod exits", lambda: _gone(ours), 60, 0.1)

    # the other user's mongod on that port, with a dbPath that resolves to ours: it starts on
    # a directory of its own, which it then swaps for a symlink to our db/
    home = other_user.home / f"h2-attack-{uuid.uuid4().hex[:8]}"
    other_user.run("mkdir", "-p", str(home / "db"), check=True)
    other_user.run(
        MONGOD, "--dbpath", str(home / "db"), "--bind_ip", "127.0.0.1", "--port",
        str(first.port), "--wiredTigerCacheSizeGB", "0.25", "--nounixsocket", "--fork",
        "--logpath", str(home / "log"), "--pidfilepath", str(home / "pid"), check=True,
    )  # fmt: skip
    theirs = int((home / "pid").read_text())
    try:
        other_user.run("mv", str(home / "db"), str(home / "db.real"), check=True)
        other_user.run("ln", "-s", str(data_dir / "db"), str(home / "db"), check=True)

        assert embedded_db.find_running_embedded(data_dir) is None
        assert stop_embedded_mongod(data_dir) is False and not _gone(theirs)  # left alone
        second = ensure_embedded_mongod(data_dir)
        assert second.started and second.port != first.port  # a fresh server of ours
        assert embedded_db.find_running_embedded(data_dir) == EmbeddedServer(
            "127.0.0.1", second.port, data_dir, started=False
        )
        assert yaml.safe_load((data_dir / "mongodb.config").read_text())["port"] == second.port
    finally:
        os.kill(theirs, signal.SIGKILL)
        wait_until("the other user's mongod exits", lambda: _gone(theirs), 60, 0.1)
        other_user.run("rm", "-rf", str(home))


def test_a_lost_credentials_file_gets_a_new_password_and_keeps_the_documents(shared_data_dir):
    data_dir = shared_data_dir
    first = ensure_embedded_mongod(data_dir)
    user, old_password = embedded_db.credentials(data_dir)
    client = pymongo.MongoClient(
        first.host, first.port, username=user, password=old_password, authSource="seml"
    )
    client["seml"]["sweep"].insert_one({"_id": 7})
    client.close()
    (data_dir / "mongodb.config").unlink()  # the running server is ours but now unusable

    second = ensure_embedded_mongod(data_dir)
    assert second.started
    user, password = embedded_db.credentials(data_dir)
    assert password != old_password
    client = pymongo.MongoClient(
        second.host, second.port, username=user, password=password, authSource="seml"
    )
    assert [d["_id"] for d in client["seml"]["sweep"].find()] == [7]
    client.close()
    stale = pymongo.MongoClient(
        second.host,
        second.port,
        username=user,
        password=old_password,
        authSource="seml",
        serverSelectionTimeoutMS=5000,
    )
    with pytest.raises(pymongo.errors.OperationFailure, match="Authentication failed"):
        stale["seml"].list_collection_names()
    stale.close()


# --------------------------------------------------------------------------- seml configure


def _seml_in_pty(args: list[str], env: dict[str, str], answers: list[tuple[str, str]]) -> str:
    """Run ``seml ARGS`` on a pseudo-terminal (its controlling tty, so the password prompt
    reads there with echo off); answer each ``(prompt, text)`` when the prompt shows up.
    Returns everything the terminal showed, echo included."""
    import pty
    import select
    import termios

    pid, fd = pty.fork()
    if pid == 0:  # child
        try:
            os.execve(
                sys.executable,
                [sys.executable, "-c", "from seml_hydra.cli import main; main()", *args],
                env,
            )
        finally:
            os._exit(127)
    seen = b""
    pending = list(answers)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        if pending and pending[0][0].encode() in seen.split(b"\n")[-1] + seen[-200:]:
            prompt, text = pending.pop(0)
            if prompt in ("Password", "Passphrase"):
                # answer once the terminal's echo is off (getpass flushes earlier input)
                echo_off = time.monotonic() + 10
                while termios.tcgetattr(fd)[3] & termios.ECHO:
                    assert time.monotonic() < echo_off, f"echo stays on at {prompt!r}"
                    time.sleep(0.02)
            seen += b"<<answered %s>>" % prompt.encode()
            os.write(fd, text.encode() + b"\n")
    for _ in range(100):  # wait for the child before closing the terminal (SIGHUP)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert not pending, f"prompts not seen: {pending}; output: {seen!r}"
    assert os.waitstatus_to_exitcode(status) == 0, seen.decode(errors="replace")
    return seen.decode(errors="replace")


@pytest.fixture
def configure_env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SEML_MONGODB", "XDG_CONFIG"))}
    env.update(
        XDG_CONFIG_HOME=str(tmp_path / "xdg"),
        SEML_HYDRA_RUNTIME_DIR=str(tmp_path / "run"),
        COLUMNS="200",
        TERM="dumb",
    )
    return env


def test_configure_asks_password_without_echo_and_writes_0600(configure_env, tmp_path):
    out = _seml_in_pty(
        ["configure", "--no-check"],
        configure_env,
        [
            ("MongoDB host", "db.example.org"),
            ("Port", "27018"),
            ("Database name", "alice_db"),
            ("User name", "alice"),
            ("Password", SECRET),
        ],
    )
    path = tmp_path / "xdg" / "seml" / "mongodb.config"
    assert SECRET not in out  # neither echoed nor printed
    assert f"Wrote {path} (mode 0600)" in out
    assert path.stat().st_mode & 0o777 == 0o600
    s = resolve_db_settings(None, {"XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    assert (s.host, s.port, s.database, s.username, s.password) == (
        "db.example.org",
        27018,
        "alice_db",
        "alice",
        SECRET,
    )
    assert s.ssh is None


def test_configure_ssh_block_and_overwrite_prompt(configure_env, tmp_path):
    path = write_config(tmp_path / "xdg" / "seml" / "mongodb.config", username="old")
    passphrase = "key-" + SECRET
    out = _seml_in_pty(
        [
            "configure",
            "--host",
            "10.0.0.5",
            "--port",
            "27017",
            "--db",
            "d",
            "--username",
            "bob",
            "--ssh",
            "--no-check",
        ],
        configure_env,
        [
            ("overwritten", "y"),
            ("Password", SECRET),
            ("SSH host", "jump.example.org"),
            ("SSH port", ""),  # default 22
            ("SSH user name", "bob"),
            ("SSH private key file", "~/.ssh/id_ed25519"),
            ("Passphrase", passphrase),
        ],
    )
    assert SECRET not in out and passphrase not in out
    assert path.stat().st_mode & 0o777 == 0o600
    data = yaml.safe_load(path.read_text())
    assert data["password"] == SECRET and data["username"] == "bob"
    assert data["ssh_config"] == {
        "ssh_address_or_host": "jump.example.org",
        "ssh_port": 22,
        "ssh_username": "bob",
        "ssh_pkey": "~/.ssh/id_ed25519",
        "ssh_private_key_password": passphrase,
    }
    assert "via SSH bob@jump.example.org:22" in out
    assert "connect once with `ssh bob@jump.example.org`" in out  # its host key is checked


def test_configure_refusing_overwrite_keeps_the_file(configure_env, tmp_path):
    path = write_config(tmp_path / "xdg" / "seml" / "mongodb.config")
    before = path.read_text()
    proc = subprocess.run(
        [sys.executable, "-c", "from seml_hydra.cli import main; main()", "configure"],
        input="n\n",
        capture_output=True,
        text=True,
        env=configure_env,
    )
    assert proc.returncode != 0 and path.read_text() == before


def test_configure_password_from_stdin_and_connection_check(configure_env, tmp_path, mongo_url):
    server = resolve_db_settings({"url": mongo_url}, env={})
    cmd = [
        sys.executable,
        "-c",
        "from seml_hydra.cli import main; main()",
        "configure",
        "--host",
        server.host,
        "--port",
        str(server.port),
        "--db",
        "seml",
        "--username",
        "seml",
        "--password-stdin",
        "--yes",
    ]
    proc = subprocess.run(cmd, input="seml\n", capture_output=True, text=True, env=configure_env)
    assert proc.returncode == 0, proc.stderr
    assert "Connected: database 'seml' answers." in proc.stdout
    path = tmp_path / "xdg" / "seml" / "mongodb.config"
    assert path.stat().st_mode & 0o777 == 0o600

    # a wrong password: the file is written, the check fails without showing it
    proc = subprocess.run(
        cmd, input=SECRET + "\n", capture_output=True, text=True, env=configure_env
    )
    assert proc.returncode == 1
    assert "authentication failed for user 'seml'" in proc.stdout + proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    assert yaml.safe_load(path.read_text())["password"] == SECRET
