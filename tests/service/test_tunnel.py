"""SSH tunnels to MongoDB on real services: a throwaway sshd on 127.0.0.1
(``tools/sshd_test.sh``, started here when not running) forwarding to the testbed mongod.

Each test gets its own MongoDB user whose random password must never show up in a command line
(``/proc/*/cmdline``), a log or a document; the SSH key is encrypted with a random passphrase
that must not show up either.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pymongo
import pytest
import yaml
from support.machine import machine_lock
from support.mongo import MONGO_URL, MONGOD
from support.paths import ROOT
from support.run import run_app
from support.wait import wait_until

from seml_hydra.store.db.client import connect, reset_client_cache
from seml_hydra.store.db.settings import resolve_db_settings
from seml_hydra.store.errors import DatabaseError
from seml_hydra.store.server import tunnel

SSHD_PORT = int(os.environ.get("SEML_TEST_SSHD_PORT", "22022"))
SSHD_DIR = Path(os.environ.get("SEML_TEST_SSHD_DIR", "/tmp/seml-hydra-sshd"))
FAST = ["hydra.launcher.poll_interval_s=0.3"]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def sshd() -> dict:
    """The test sshd (started by tools/sshd_test.sh, idempotent); fails when it cannot run."""
    with machine_lock("sshd"):  # idempotent, but two starting it at once would race
        proc = subprocess.run(
            ["bash", str(ROOT / "tools" / "sshd_test.sh")], capture_output=True, text=True
        )
    if proc.returncode != 0:
        pytest.fail(f"tools/sshd_test.sh failed: {proc.stdout}{proc.stderr}")
    return {
        "port": SSHD_PORT,
        "pid": int((SSHD_DIR / "sshd.pid").read_text()),
        "key": str(SSHD_DIR / "client_key"),
        "key_enc": str(SSHD_DIR / "client_key_enc"),
        "passphrase": (SSHD_DIR / "client_key_enc.passphrase").read_text().strip(),
        "host_key": (SSHD_DIR / "host_key.pub").read_text().split()[:2],
    }


def test_a_stale_pid_file_naming_another_process_does_not_pass_for_the_test_sshd(tmp_path):
    """tools/sshd_test.sh: a pid file left by an sshd that is gone, naming a pid another process
    now has (CI: every tunnel test refused), starts sshd instead of reporting it running."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "SEML_TEST_SSHD_DIR": str(tmp_path / "sshd"),
        "SEML_TEST_SSHD_PORT": str(port),
    }
    script = ["bash", str(ROOT / "tools" / "sshd_test.sh")]
    (tmp_path / "sshd").mkdir(mode=0o700)
    other = subprocess.Popen(["sleep", "300"])  # alive, and not sshd
    (tmp_path / "sshd" / "sshd.pid").write_text(f"{other.pid}\n")
    try:
        proc = subprocess.run(script, env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            assert conn.recv(64).startswith(b"SSH-2.0-")
    finally:
        subprocess.run([*script, "stop"], env=env, capture_output=True, timeout=60)
        other.kill()
        other.wait()


def test_stop_never_kills_a_process_that_only_names_the_sshd_config(tmp_path):
    """tools/sshd_test.sh: a stale pid file naming a live process that is not sshd but whose
    command line names our sshd_config (``tail -f .../sshd_config``, an editor) is not our sshd:
    ``stop`` leaves it alone and a start starts sshd instead of reporting that process."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    folder = tmp_path / "sshd"
    env = {**os.environ, "SEML_TEST_SSHD_DIR": str(folder), "SEML_TEST_SSHD_PORT": str(port)}
    script = ["bash", str(ROOT / "tools" / "sshd_test.sh")]
    folder.mkdir(mode=0o700)
    (folder / "sshd_config").write_text("# not yet written by the script\n")
    tail = ["tail", "-f", str(folder / "sshd_config")]
    other = subprocess.Popen(tail, stdout=subprocess.DEVNULL)
    try:
        cmdline = Path(f"/proc/{other.pid}/cmdline")
        wait_until("tail to exec", lambda: "sshd_config" in cmdline.read_text(), timeout=10)
        (folder / "sshd.pid").write_text(f"{other.pid}\n")
        subprocess.run([*script, "stop"], env=env, capture_output=True, timeout=60, check=True)
        assert other.poll() is None, "tools/sshd_test.sh stop killed a process that is not sshd"
        (folder / "sshd.pid").write_text(f"{other.pid}\n")
        proc = subprocess.run(script, env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert int((folder / "sshd.pid").read_text()) != other.pid
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            assert conn.recv(64).startswith(b"SSH-2.0-")
    finally:
        subprocess.run([*script, "stop"], env=env, capture_output=True, timeout=60)
        alive = other.poll() is None
        other.kill()
        other.wait()
    assert alive, "tools/sshd_test.sh stop killed a process that is not sshd"


def known_hosts_line(host: str, port: int, key: list[str]) -> str:
    """A ``known_hosts`` line for ``host:port`` and a public key ``[type, base64]``."""
    return f"[{host}]:{port} {key[0]} {key[1]}\n"


@pytest.fixture
def mongo_user():
    """A fresh database with its own user and a random password on the test mongod."""
    name = f"seml_hydra_tunnel_{uuid.uuid4().hex[:10]}"
    user, password = f"u_{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    client = pymongo.MongoClient(MONGO_URL, serverSelectionTimeoutMS=5000)
    try:
        client[name].command("createUser", user, pwd=password, roles=["readWrite"])
    except pymongo.errors.PyMongoError as err:
        pytest.fail(f"cannot create a user on the test mongod {MONGO_URL}: {err}")
    yield {"database": name, "username": user, "password": password, "client": client}
    client[name].command("dropUser", user)
    client.drop_database(name)
    client.close()


@pytest.fixture
def tunnel_env(tmp_path, monkeypatch, sshd, mongo_user):
    """XDG_CONFIG_HOME with a mongodb.config that has an ssh_config block (encrypted key), a
    private HOME whose ~/.ssh/known_hosts has the test sshd's host key, a private runtime dir
    right under /tmp (so another user can reach it: only its own mode keeps them out); also
    applied to this process. Returns the env for subprocesses."""
    import shutil
    import tempfile

    server = resolve_db_settings({"url": MONGO_URL}, env={})
    xdg = tmp_path / "xdg"
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "known_hosts").write_text(
        known_hosts_line("127.0.0.1", sshd["port"], sshd["host_key"])
    )
    runtime = Path(tempfile.mkdtemp(prefix="seml-hydra-test-run-", dir="/tmp"))
    config = {
        "host": server.host,  # as seen from the SSH host
        "port": server.port,
        "database": mongo_user["database"],
        "username": mongo_user["username"],
        "password": mongo_user["password"],
        "ssh_config": {
            "ssh_address_or_host": "127.0.0.1",
            "ssh_port": sshd["port"],
            "ssh_username": "root",
            "ssh_pkey": sshd["key_enc"],
            "ssh_private_key_password": sshd["passphrase"],
            "allow_agent": False,
            "health_check_interval": 1,
        },
    }
    path = xdg / "seml" / "mongodb.config"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    env = {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(xdg),
        "SEML_HYDRA_RUNTIME_DIR": str(runtime),
        "SEML_MONGODB_URI": "",
        "SEML_MONGODB_CONFIG": "",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    reset_client_cache()
    yield {"env": env, "config": config, "path": path, "runtime": runtime, "home": home}
    reset_client_cache()
    tunnel.close_tunnels()
    shutil.rmtree(runtime, ignore_errors=True)


def secrets_of(tunnel_env: dict) -> list[str]:
    cfg = tunnel_env["config"]
    return [cfg["password"], cfg["ssh_config"]["ssh_private_key_password"]]


def worker_pids(runtime: Path) -> list[int]:
    """Tunnel processes whose files are in ``runtime``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"seml_hydra.store.server.tunnel_worker" in cmd and any(
            str(runtime).encode() in c for c in cmd
        ):
            pids.append(int(proc.name))
    return pids


class CmdlineScanner(threading.Thread):
    """Scans every process's command line for the secrets until stopped (except the processes
    ``ignore(pid)`` names: a launcher the user gave the secret on its own command line)."""

    def __init__(self, secrets: list[str], ignore=lambda pid: False) -> None:
        super().__init__(daemon=True)
        self.secrets = [s.encode() for s in secrets]
        self.ignore = ignore
        self.found: list[str] = []
        self.scans = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for proc in Path("/proc").iterdir():
                if not proc.name.isdigit() or self.ignore(int(proc.name)):
                    continue
                try:
                    cmd = (proc / "cmdline").read_bytes()
                except OSError:
                    continue
                for s in self.secrets:
                    if s in cmd:
                        self.found.append(cmd.replace(b"\0", b" ").decode(errors="replace"))
            self.scans += 1
            self.stop.wait(0.05)


def launcher_or_its_fork(launcher_pid: int):
    """``ignore(pid)`` for :class:`CmdlineScanner`: true for the launcher and for a child of it
    that still shows the launcher's own command line, i.e. is between ``fork`` and ``exec``
    (``subprocess`` starting sbatch, squeue...: a loaded machine makes that window long enough
    to be scanned); such a child is the launcher's memory, not another command line."""
    own = Path(f"/proc/{launcher_pid}/cmdline").read_bytes()  # Popen returned: exec is done

    def ignore(pid: int) -> bool:
        if pid == launcher_pid:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            return parent == launcher_pid and Path(f"/proc/{pid}/cmdline").read_bytes() == own
        except (OSError, ValueError, IndexError):
            return False

    return ignore


def assert_no_secret_in_files(root: Path, secrets: list[str]) -> int:
    """Every file under ``root`` is free of the secrets; returns how many were read."""
    count = 0
    for path in root.rglob("*"):
        if path.is_file() and "mongodb.config" not in path.name:
            data = path.read_bytes()
            count += 1
            for s in secrets:
                assert s.encode() not in data, f"a secret is in {path}"
    return count


def assert_no_secret_in_database(db, secrets: list[str]) -> None:
    from bson import json_util

    for name in db.list_collection_names():
        for doc in db[name].find():
            text = json_util.dumps(doc)
            for s in secrets:
                assert s not in text, f"a secret is in a document of {name}"
    for chunk in db["fs.chunks"].find():
        for s in secrets:
            assert s.encode() not in bytes(chunk["data"]), "a secret is in a GridFS file"


# --------------------------------------------------------------------------- resolution


def test_ssh_config_is_resolved_and_connect_goes_through_the_tunnel(tunnel_env, mongo_user):
    settings = resolve_db_settings(None)
    assert settings.ssh is not None and settings.config_file == str(tunnel_env["path"])
    text = repr(settings) + settings.describe()
    for secret in secrets_of(tunnel_env):
        assert secret not in text
    assert "via SSH root@127.0.0.1:" in settings.describe()

    db = connect(settings)
    db["probe"].insert_one({"_id": 1})
    host, _ = db.client.address
    state = json.loads(next(tunnel_env["runtime"].glob("tunnel-*.json")).read_text())
    assert host == state["socket"] and Path(host).parent == tunnel_env["runtime"]  # the tunnel
    assert worker_pids(tunnel_env["runtime"]) == [state["pid"]]
    assert mongo_user["client"][mongo_user["database"]]["probe"].find_one() == {"_id": 1}
    # the worker runs our module, never the caller's script
    cmd = Path(f"/proc/{state['pid']}/cmdline").read_bytes().split(b"\0")
    assert cmd[1:3] == [b"-m", b"seml_hydra.store.server.tunnel_worker"]
    assert os.readlink(f"/proc/{state['pid']}/cwd") == str(tunnel_env["runtime"])


def test_runtime_dir_is_private(tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o777)
    open_dir.chmod(0o777)
    with pytest.raises(tunnel.TunnelError, match="not a private directory"):
        tunnel.runtime_dir({"SEML_HYDRA_RUNTIME_DIR": str(open_dir)})
    if os.getuid() == 0:  # a directory planted by another user is refused as well
        foreign = tmp_path / "foreign"
        foreign.mkdir(mode=0o700)
        os.chown(foreign, 65534, 65534)
        with pytest.raises(tunnel.TunnelError, match="not a private directory"):
            tunnel.runtime_dir({"SEML_HYDRA_RUNTIME_DIR": str(foreign)})
    made = tunnel.runtime_dir({"SEML_HYDRA_RUNTIME_DIR": str(tmp_path / "new")})
    assert made.stat().st_mode & 0o777 == 0o700
    default = tunnel.runtime_dir({"XDG_RUNTIME_DIR": str(tmp_path / "absent")})
    assert default.name == f"seml-hydra-{os.getuid()}"


def test_a_runtime_dir_another_user_took_is_passed_over_and_the_tunnel_opens(
    tunnel_env, mongo_user, other_user, monkeypatch, caplog
):
    """Another user made ``<tmp>/seml-hydra-<uid>`` (mode 0777) first: the tunnel does not
    fail but opens in ``~/.cache/seml-hydra/run/<host>`` (mode 0700; the socket path short
    enough for a Unix socket), with one warning naming the taken directory. A private TMPDIR
    and HOME keep the real /tmp/seml-hydra-<uid> out of it."""
    import logging
    import shutil
    import socket
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="seml-hydra-test-shared-", dir="/tmp"))
    shared.chmod(0o1777)
    home = Path(tempfile.mkdtemp(prefix="f3h", dir="/tmp"))  # short, as a real home
    try:
        shutil.copytree(tunnel_env["home"] / ".ssh", home / ".ssh")
        monkeypatch.setattr(tempfile, "tempdir", str(shared))
        monkeypatch.delenv("SEML_HYDRA_RUNTIME_DIR")
        monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
        monkeypatch.setenv("HOME", str(home))
        taken = shared / f"seml-hydra-{os.getuid()}"
        other_user.run("mkdir", "-m", "777", str(taken), check=True)
        with caplog.at_level(logging.WARNING, logger="seml_hydra.store.server.tunnel"):
            db = connect(resolve_db_settings(None))
            assert db.command("ping")["ok"] == 1
        fallback = home / ".cache" / "seml-hydra" / "run" / socket.gethostname()
        sock, _ = db.client.address
        assert Path(sock).parent == fallback and len(os.fsencode(sock)) <= tunnel.MAX_SOCKET_PATH
        assert tunnel.private_dir_problem(fallback) is None
        assert list(taken.iterdir()) == []  # nothing of ours went into their directory
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and f"{taken} belongs to uid {other_user.uid}" in warnings[0]
    finally:
        reset_client_cache()
        tunnel.close_tunnels()
        shutil.rmtree(shared, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def test_a_home_too_long_for_a_socket_path_falls_back_to_a_directory_of_the_process(
    tmp_path, other_user, monkeypatch, caplog
):
    """``<tmp>/seml-hydra-<uid>`` taken by another user and a home so long that no socket path
    fits under ``~/.cache/seml-hydra/run/<host>``: the tunnel's files go to a fresh private
    directory of this process (the same one on every call), with a warning saying so."""
    import logging
    import shutil
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="seml-hydra-test-shared-", dir="/tmp"))
    shared.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    taken = shared / f"seml-hydra-{os.getuid()}"
    other_user.run("mkdir", "-m", "777", str(taken), check=True)
    home = tmp_path / ("h" * 100)
    env = {"HOME": str(home)}
    try:
        with caplog.at_level(logging.WARNING, logger="seml_hydra.store.server.tunnel"):
            paths = tunnel.tunnel_paths("0123456789abcdef", env)
            again = tunnel.tunnel_paths("0123456789abcdef", env)
        where = paths["socket"].parent
        assert tunnel.private_dir_problem(where) is None
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    assert paths == again and len(os.fsencode(paths["socket"])) <= tunnel.MAX_SOCKET_PATH
    assert where.parent == shared and where.name.startswith(f"seml-hydra-{os.getuid()}-")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(taken) in warnings[0]
    assert "not shared with other processes" in warnings[0] and "too long" in warnings[0]


def test_bad_ssh_host_or_unreachable_mongodb_fail_clearly(tunnel_env, tmp_path):
    cfg = json.loads(json.dumps(tunnel_env["config"]))
    cfg["ssh_config"].update(ssh_port=1, retries_max=1, retries_delay=0.1)
    path = tmp_path / "bad_ssh.config"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(DatabaseError) as exc:
        connect(resolve_db_settings({"config_file": str(path)}))
    msg = str(exc.value)
    assert "cannot open an SSH connection to root@127.0.0.1:1" in msg and str(path) in msg
    assert all(s not in msg for s in secrets_of(tunnel_env))

    cfg = json.loads(json.dumps(tunnel_env["config"]))
    cfg["port"] = 1  # nothing listens there on the SSH host
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(DatabaseError, match="cannot reach MongoDB at 127.0.0.1:1"):
        connect(resolve_db_settings({"config_file": str(path)}))


# --------------------------------------------------------------------------- sharing, parent death

HOLDER = """
import sys, time
from seml_hydra.store.db.client import connect
from seml_hydra.store.db.settings import resolve_db_settings
db = connect(resolve_db_settings(None))
print(db.client.address[0], flush=True)
for line in sys.stdin:          # 'ping' -> one round trip through the tunnel
    db.command("ping")
    print("ok", flush=True)
"""


def _holder(env: dict) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    return proc


def _ping(proc: subprocess.Popen) -> str:
    proc.stdin.write("ping\n")
    proc.stdin.flush()
    return proc.stdout.readline().strip()


def test_one_tunnel_per_user_ends_with_its_parent_and_is_taken_over_on_the_same_socket(
    tunnel_env,
):
    runtime = tunnel_env["runtime"]
    first = _holder(tunnel_env["env"])
    second = None
    try:
        sock = first.stdout.readline().strip()  # the tunnel's socket
        (worker,) = wait_until("the tunnel process", lambda: worker_pids(runtime), 10, 0.1)
        second = _holder(tunnel_env["env"])
        assert second.stdout.readline().strip() == sock  # shared: same tunnel
        assert worker_pids(runtime) == [worker]
        assert _ping(second) == "ok"

        first.kill()  # the tunnel's parent dies: the tunnel ends with it ...
        first.wait()
        # (bounds are generous: stopping sshtunnel joins its threads, slow on a loaded machine)
        wait_until("the tunnel to end", lambda: worker not in worker_pids(runtime), 30, 0.1)
        # ... and the other user of the tunnel starts a new one on the same socket
        (new_worker,) = wait_until("a new tunnel process", lambda: worker_pids(runtime), 30, 0.1)
        assert new_worker != worker
        state = wait_until(
            "the new state file",
            lambda: tunnel._read_state(next(runtime.glob("tunnel-*.json"), Path("/nonexistent"))),
            10,
            0.1,
        )
        assert state["socket"] == sock and state["pid"] == new_worker
        assert _ping(second) == "ok"  # its open client keeps working
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    # the same generous bound as above: the new tunnel, its last holder killed, stops sshtunnel
    # (10 s timed out in a clean-clone CI run beside the Slurm tests, session 7)
    wait_until("every tunnel process to end", lambda: not worker_pids(runtime), 30, 0.1)


# --------------------------------------------------------------------------- sweeps


def test_sweep_through_the_tunnel_completes_without_leaking_secrets(
    tunnel_env, mongo_user, tmp_path
):
    secrets = secrets_of(tunnel_env)
    scanner = CmdlineScanner(secrets)
    scanner.start()
    try:
        proc = run_app(
            "fail.py",
            "-m",
            "hydra/launcher=seml_local",
            "x=1,3",
            *FAST,
            cwd=tmp_path,
            env=tunnel_env["env"],
        )
    finally:
        scanner.stop.set()
        scanner.join()
    assert proc.returncode == 0, proc.stderr
    assert scanner.scans > 5 and scanner.found == []
    db = mongo_user["client"][mongo_user["database"]]
    docs = {d["config"]["x"]: d for d in db["fail"].find()}
    assert {x: d["status"] for x, d in docs.items()} == {1: "COMPLETED", 3: "COMPLETED"}
    assert (docs[1]["result"], docs[3]["result"]) == (10, 30)
    for text in (proc.stdout, proc.stderr):
        assert all(s not in text for s in secrets)
    assert assert_no_secret_in_files(tmp_path / "multirun", secrets) > 0  # .submitit, logs
    assert assert_no_secret_in_files(tunnel_env["runtime"], secrets) > 0  # tunnel log, state
    log = next(tunnel_env["runtime"].glob("tunnel-*.log")).read_text()
    assert "tunnel up" in log
    assert_no_secret_in_database(db, secrets)
    # the tunnel ended with the launcher
    wait_until("the tunnel to end", lambda: not worker_pids(tunnel_env["runtime"]), 10, 0.1)


def _sshd_serving(tunnel_pid: int) -> set[int]:
    """The sshd processes holding the server end of ``tunnel_pid``'s SSH connection (TCP
    connections as ``ss -tnp`` lists them, matched by the tunnel's local port), not those of
    other tunnels to the same sshd."""
    out = subprocess.run(
        ["ss", "-Htnp", "state", "established"], capture_output=True, text=True, check=True
    ).stdout
    rows = []  # (local, peer, pids): with a state filter ss leaves out the State column
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 4:
            rows.append((fields[2], fields[3], {int(p) for p in re.findall(r"pid=(\d+)", line)}))
    ports = {
        local.rsplit(":", 1)[1]
        for local, peer, pids in rows
        if tunnel_pid in pids and peer.endswith(f":{SSHD_PORT}")
    }
    return {
        pid
        for local, peer, pids in rows
        for pid in pids
        if local.endswith(f":{SSHD_PORT}") and peer.rsplit(":", 1)[1] in ports
    }


def test_killed_ssh_connection_is_restored_on_the_same_socket_and_the_sweep_completes(
    tunnel_env, mongo_user, sshd, tmp_path
):
    db = mongo_user["client"][mongo_user["database"]]
    runtime = tunnel_env["runtime"]
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "apps" / "sleep_app.py"),
            "-m",
            "hydra/launcher=seml_local",
            "seconds=4",
            "tag=a,b,c",
            *FAST,
        ],
        cwd=tmp_path,
        env={**os.environ, **tunnel_env["env"]},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(
            "three RUNNING experiments",
            lambda: db["sleep_app"].count_documents({"status": "RUNNING"}) == 3,
            60,
            0.1,
        )
        state = json.loads(next(runtime.glob("tunnel-*.json")).read_text())
        log_path = next(runtime.glob("tunnel-*.log"))
        # only this tunnel's connection: the sshd is shared with other tests (xdist workers)
        serving = _sshd_serving(state["pid"])
        assert serving, "the tunnel has no SSH connection to kill"
        for pid in serving:  # the sshd processes serving the tunnel's SSH connection
            os.kill(pid, signal.SIGKILL)
        wait_until(
            "the tunnel to reconnect",
            lambda: "SSH connection re-established" in log_path.read_text(),
            20,
            0.1,
        )
        after = json.loads(next(runtime.glob("tunnel-*.json")).read_text())
        assert (after["pid"], after["socket"]) == (state["pid"], state["socket"])
        assert db["sleep_app"].count_documents({"status": "RUNNING"}) == 3
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    docs = list(db["sleep_app"].find())
    assert len(docs) == 3
    assert {d["status"] for d in docs} == {"COMPLETED"}
    assert sorted(d["config"]["tag"] for d in docs) == ["a", "b", "c"]
    assert all(d["result"] == 4 for d in docs)
    assert "SSH connection lost" in log_path.read_text()
    assert all(s not in out + err for s in secrets_of(tunnel_env))


def test_slurm_jobs_open_their_own_tunnel_on_the_nodes(tunnel_env, mongo_user, slurm, tmp_path):
    """The launcher passes the jobs only the config file's path: each node reads it and opens
    its own tunnel (nodes have their own host names, so their own tunnel files)."""
    proc = run_app(
        "fail.py", "-m", "hydra/launcher=seml", "x=1,3", *FAST, cwd=tmp_path, env=tunnel_env["env"]
    )
    assert proc.returncode == 0, proc.stderr
    db = mongo_user["client"][mongo_user["database"]]
    docs = list(db["fail"].find())
    assert {d["status"] for d in docs} == {"COMPLETED"} and len(docs) == 2
    hosts = {d["host"]["hostname"] for d in docs}
    logs = {p.name for p in tunnel_env["runtime"].glob("tunnel-*.log")}
    assert {f"{name.rsplit('-', 1)[1]}" for name in logs} >= {f"{h}.log" for h in hosts}
    assert_no_secret_in_files(tmp_path / "multirun", secrets_of(tunnel_env))
    assert_no_secret_in_database(db, secrets_of(tunnel_env))


# --------------------------------------------------------------------------- a password in db.url


@pytest.fixture
def auth_mongod(tmp_path):
    """A private mongod with ``--auth`` on a free port (so a job that lacks the password cannot
    write): an admin (created through the localhost exception; its client is ``client``) and a
    user of database ``exps`` with a random password (``url``). Stopped at the end."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = tmp_path / "mongod"
    data.mkdir()
    proc = subprocess.Popen(
        [MONGOD, "--auth", "--port", str(port), "--bind_ip", "127.0.0.1"]
        + ["--dbpath", str(data), "--logpath", str(data / "log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    user, password = f"u_{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    client = pymongo.MongoClient(port=port, serverSelectionTimeoutMS=2000)

    def answers() -> bool:
        assert proc.poll() is None, f"mongod ended: {(data / 'log').read_text()[-2000:]}"
        try:
            return bool(client.admin.command("ping"))
        except pymongo.errors.PyMongoError:
            return False

    try:
        wait_until("the private mongod to answer", answers, 60, 0.2)
        admin_pw = uuid.uuid4().hex
        client.admin.command("createUser", "admin", pwd=admin_pw, roles=["root"])
        admin = pymongo.MongoClient(port=port, username="admin", password=admin_pw)
        admin["exps"].command("createUser", user, pwd=password, roles=["readWrite"])
        url = f"mongodb://{user}:{password}@127.0.0.1:{port}/exps"
        yield {"url": url, "user": user, "password": password, "client": admin}
    finally:
        client.close()
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize("url_from", ["command_line", "config_group"])
@pytest.mark.parametrize(
    "launcher", ["seml_local", pytest.param("seml", marks=pytest.mark.slurm)]
)  # the slurm fixture is asked for in the test
def test_password_in_db_url_is_written_nowhere_and_reaches_the_jobs_privately(
    launcher, url_from, auth_mongod, tmp_path, request
):
    """A password given in ``hydra.launcher.db.url`` on the command line (the launcher warns),
    or in a config group file (``+db=secret``, ``# @package hydra.launcher``), for a MongoDB
    that requires it: no other process's command line (jobs, sbatch, srun, the ``seml``
    command), no file of the sweep (multirun.yaml, each point's .hydra/*.yaml, .submitit
    pickles and logs), no document, GridFS payload (nor its ``metadata.hydra_base``) or output
    holds it; the jobs still authenticate with it, also when ``seml start`` submits them again
    from the documents."""
    if launcher == "seml":
        request.getfixturevalue("slurm")
    password, url = auth_mongod["password"], auth_mongod["url"]
    env = {**os.environ, "SEML_MONGODB_URI": "", "SEML_MONGODB_CONFIG": str(tmp_path / "none")}
    if url_from == "command_line":
        given = [f"hydra.launcher.db.url={url}"]
    else:  # a config directory of its own, outside the sweep (and not snapshotted)
        group = tmp_path / "extra_conf" / "db"
        group.mkdir(parents=True)
        (group / "secret.yaml").write_text(f"# @package hydra.launcher\ndb:\n  url: {url}\n")
        given = [f"hydra.searchpath=[file://{group.parent}]", "+db=secret"]
    app = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "examples" / "fail.py"),
            "-m",
            f"hydra/launcher={launcher}",
            *given,
            "x=1,2",  # x=2 fails: `seml start` runs it again below
            *FAST,
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # the launcher's own command line is the user's choice (and warned about): not scanned
    scanner = CmdlineScanner([password], ignore=launcher_or_its_fork(app.pid))
    scanner.start()
    try:
        out, err = app.communicate(timeout=300)
        db = auth_mongod["client"]["exps"]
        docs = {d["config"]["x"]: d for d in db["fail"].find()}
        assert {x: d["status"] for x, d in docs.items()} == {1: "COMPLETED", 2: "FAILED"}, err
        assert docs[1]["result"] == 10 and "x == 2" in docs[2]["fail_trace"][-1]
        if launcher == "seml":  # `seml start` (its settings from SEML_MONGODB_URI) re-submits
            seml_env = {**env, "SEML_MONGODB_URI": url}
            for args in (["reset", "-y"], ["start"]):
                cli = subprocess.run(
                    [sys.executable, "-c", "from seml_hydra.cli import main; main()", "fail"]
                    + args,
                    cwd=tmp_path,
                    env=seml_env,
                    capture_output=True,
                    text=True,
                )
                assert cli.returncode == 0, cli.stdout + cli.stderr
                assert password not in cli.stdout + cli.stderr
            first_start = docs[2]["start_time"]

            def ran_again():
                doc = db["fail"].find_one({"_id": docs[2]["_id"]})
                return doc if doc["status"] == "FAILED" and doc["start_time"] > first_start else 0

            assert (
                "x == 2" in wait_until("the restarted run", ran_again, 120, 0.3)["fail_trace"][-1]
            )
    finally:
        scanner.stop.set()
        scanner.join()
        if app.poll() is None:
            app.kill()
    assert app.returncode == 1 and "x == 2" in err  # the failed point, nothing else
    if url_from == "command_line":
        assert "carries a password" in out + err and "SEML_MONGODB_URI" in out + err
        assert f"{auth_mongod['user']}:***@" in docs[1]["seml"]["command"]
    assert scanner.scans > 5 and scanner.found == []
    stored = docs[1]["slurm"][0]
    hydra_base = db["fs.files"].find_one({"metadata.kind": "seml_hydra_payload"})["metadata"]
    assert hydra_base["hydra_base"]["launcher"]["db"]["url"] == url.replace(password, "***")
    assert stored and password not in str(docs[1])
    assert password not in out + err
    sweep = tmp_path / "multirun"
    assert next(sweep.rglob("multirun.yaml")) and next(sweep.rglob(".submitit"))
    assert len(list(sweep.rglob(".hydra/hydra.yaml"))) >= 2  # written by the jobs
    assert assert_no_secret_in_files(sweep, [password]) > 5
    assert_no_secret_in_database(db, [password])


# --------------------------------------------------------------------------- the local end

ATTACKER = """
import sys
import pymongo
from urllib.parse import quote_plus
host, port = sys.argv[1], sys.argv[2]
host = quote_plus(host, safe="") if host.endswith(".sock") else host
try:
    client = pymongo.MongoClient(host=host, port=int(port) if port != "None" else None,
                                 directConnection=True, serverSelectionTimeoutMS=3000)
    client.admin.command("ping")
    print("REACHED MongoDB through the tunnel", client.list_database_names())
except Exception as err:
    print("refused:", type(err).__name__, err)
"""


def _tcp_listeners(pid: int) -> list[str]:
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if f"pid={pid}," in line]


def test_another_user_cannot_use_the_tunnels_local_end(tunnel_env, other_user):
    db = connect(resolve_db_settings(None))
    host, port = db.client.address  # the tunnel's local end, as our clients use it
    state = json.loads(next(tunnel_env["runtime"].glob("tunnel-*.json")).read_text())
    attack = other_user.python(ATTACKER, str(host), str(port))
    assert attack.returncode == 0, attack.stderr
    assert "refused:" in attack.stdout and "REACHED" not in attack.stdout, attack.stdout
    assert "Permission denied" in attack.stdout  # the socket is there, but not theirs
    assert _tcp_listeners(state["pid"]) == []  # no TCP port anyone could use instead
    assert os.stat(host).st_mode & 0o077 == 0  # nor may group or others write to it
    assert db.command("ping")["ok"] == 1  # and it is ours to use


# --------------------------------------------------------------------------- host keys


class StrangerSSHServer(threading.Thread):
    """Someone else's SSH server (a man in the middle) on a free port of 127.0.0.1, with its own
    ed25519 host key: it records every authentication attempt (and every password) it gets."""

    def __init__(self, key_path: Path) -> None:
        import socket

        import paramiko

        super().__init__(daemon=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key_path)])
        self.key = paramiko.Ed25519Key(filename=str(key_path))
        self.public = (key_path.with_suffix(".pub")).read_text().split()[:2]
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.attempts: list[tuple] = []
        self.transports: list = []
        self.stop = threading.Event()

    def run(self) -> None:
        import paramiko

        server = self

        class Recorder(paramiko.ServerInterface):
            def get_allowed_auths(self, username):
                return "password,publickey"

            def check_auth_none(self, username):
                server.attempts.append(("none", username))
                return paramiko.AUTH_FAILED

            def check_auth_password(self, username, password):
                server.attempts.append(("password", username, password))
                return paramiko.AUTH_FAILED

            def check_auth_publickey(self, username, key):
                server.attempts.append(("publickey", username))
                return paramiko.AUTH_FAILED

        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            transport = paramiko.Transport(conn)
            transport.add_server_key(self.key)
            self.transports.append(transport)
            try:
                transport.start_server(server=Recorder())
            except (paramiko.SSHException, EOFError, OSError):
                pass

    def close(self) -> None:
        self.stop.set()
        self.join(5)
        for transport in self.transports:
            transport.close()
        self.sock.close()


def test_unknown_or_changed_ssh_host_keys_are_refused_before_authenticating(
    tunnel_env, sshd, tmp_path
):
    ssh_password = f"sshpw-{uuid.uuid4().hex}"
    stranger = StrangerSSHServer(tmp_path / "stranger_key")
    stranger.start()
    try:

        def attempt(**ssh) -> str:
            cfg = json.loads(json.dumps(tunnel_env["config"]))
            cfg["ssh_config"].update(retries_max=1, retries_delay=0.1, **ssh)
            path = tmp_path / f"m{uuid.uuid4().hex[:6]}.config"
            path.write_text(yaml.safe_dump(cfg))
            with pytest.raises(DatabaseError) as exc:
                connect(resolve_db_settings({"config_file": str(path)}))
            msg = str(exc.value)
            assert all(s not in msg for s in [ssh_password, *secrets_of(tunnel_env)])
            return msg

        # unknown host: ~/.ssh/known_hosts (the test's HOME) has only the real sshd's key
        msg = attempt(ssh_port=stranger.port, ssh_password=ssh_password)
        assert stranger.connections >= 1 and stranger.attempts == []  # nothing was sent
        assert f"the SSH host [127.0.0.1]:{stranger.port} is not in" in msg
        assert f"`ssh -p {stranger.port} root@127.0.0.1`" in msg and "ssh-ed25519" in msg

        # changed key: the stranger answers where known_hosts expects the real sshd's key
        known = tmp_path / "known_hosts_changed"
        known.write_text(known_hosts_line("127.0.0.1", stranger.port, sshd["host_key"]))
        msg = attempt(ssh_port=stranger.port, ssh_password=ssh_password, ssh_known_hosts=str(known))
        assert stranger.connections >= 2 and stranger.attempts == []
        assert f"the SSH host key of [127.0.0.1]:{stranger.port} does not match {known}" in msg
        assert f"ssh-keygen -R '[127.0.0.1]:{stranger.port}'" in msg
    finally:
        stranger.close()

    # the real sshd, unknown to an empty known_hosts file: refused too
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    msg = attempt(ssh_known_hosts=str(empty))
    assert f"the SSH host [127.0.0.1]:{sshd['port']} is not in {empty}" in msg
    # and once accepted (the line `ssh` would add), the tunnel opens
    empty.write_text(known_hosts_line("127.0.0.1", sshd["port"], sshd["host_key"]))
    cfg = json.loads(json.dumps(tunnel_env["config"]))
    cfg["ssh_config"]["ssh_known_hosts"] = str(empty)
    path = tmp_path / "accepted.config"
    path.write_text(yaml.safe_dump(cfg))
    assert connect(resolve_db_settings({"config_file": str(path)})).command("ping")["ok"] == 1


def _connect_with_known_hosts(tunnel_env, tmp_path, text: str):
    """Connect through the tunnel with ``ssh_known_hosts`` a file holding ``text``."""
    known = tmp_path / f"known_hosts_{uuid.uuid4().hex[:6]}"
    known.write_text(text)
    cfg = json.loads(json.dumps(tunnel_env["config"]))
    cfg["ssh_config"].update(retries_max=1, retries_delay=0.1, ssh_known_hosts=str(known))
    path = tmp_path / f"m{uuid.uuid4().hex[:6]}.config"
    path.write_text(yaml.safe_dump(cfg))
    return known, lambda: connect(resolve_db_settings({"config_file": str(path)}))


def test_known_hosts_marker_lines_and_malformed_lines_do_not_break_the_host_key_check(
    tunnel_env, sshd, tmp_path
):
    """OpenSSH's ``@cert-authority`` line and a malformed line before the valid entry: the
    tunnel opens (paramiko's ``HostKeys.load`` failed on them: "Incorrect padding"), and the
    malformed line is named in the tunnel's log with its file and line number."""
    kind, key = sshd["host_key"]
    valid = known_hosts_line("127.0.0.1", sshd["port"], sshd["host_key"])
    known, open_db = _connect_with_known_hosts(
        tunnel_env,
        tmp_path,
        f"# comment\n\n@cert-authority *.example.org {kind} {key}\n"
        f"[127.0.0.1]:{sshd['port']} {kind} not-base64!\n{valid}",
    )
    assert open_db().command("ping")["ok"] == 1
    log = next(tunnel_env["runtime"].glob("tunnel-*.log")).read_text()
    assert f"{known} line 4 skipped" in log


def test_a_revoked_or_certificate_only_host_key_is_refused_saying_why(tunnel_env, sshd, tmp_path):
    """The sshd's key on a ``@revoked`` line is refused although a plain line lists it; a host
    with only a ``@cert-authority`` line is refused saying certificates are not supported and
    how to add a plain entry."""
    kind, key = sshd["host_key"]
    valid = known_hosts_line("127.0.0.1", sshd["port"], sshd["host_key"])
    _, open_db = _connect_with_known_hosts(
        tunnel_env, tmp_path, f"{valid}@revoked * {kind} {key}\n"
    )
    with pytest.raises(DatabaseError, match="which is revoked"):
        open_db()
    _, open_db = _connect_with_known_hosts(
        tunnel_env, tmp_path, f"@cert-authority [127.0.0.1]:* {kind} {key}\n"
    )
    with pytest.raises(DatabaseError) as error:
        open_db()
    assert "certificate-based host keys are not supported" in str(error.value)
    assert f"ssh-keyscan -p {sshd['port']} 127.0.0.1 >> ~/.ssh/known_hosts" in str(error.value)


# --------------------------------------------------------------------------- refused logins, stops


def _seml(env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``seml ARGS`` in a subprocess with ``env`` over this one's."""
    return subprocess.run(
        [sys.executable, "-c", "from seml_hydra.cli import main; main()", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _locks_free(runtime: Path) -> bool:
    """Every tunnel ``alive`` lock in ``runtime`` is free (no process holds it)."""
    locks = list(runtime.glob("tunnel-*.alive.lock"))
    return bool(locks) and not any(tunnel._alive_lock_held(lock) for lock in locks)


def test_a_key_the_ssh_host_refuses_fails_at_once_saying_why_and_leaves_the_lock_free(
    tunnel_env, sshd, tmp_path
):
    """``ssh_pkey`` a key the SSH host does not accept: ``seml list`` fails in seconds (not after
    40 s of "no answer") with the server's words, whom it refused and the key offered; no
    tunnel process is left holding the tunnel's lock, so once the key is the right one (same
    configuration, same lock) the next command works without killing anything."""
    import shutil
    import time

    key = tmp_path / "id_refused"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    fingerprint = subprocess.run(
        ["ssh-keygen", "-l", "-f", f"{key}.pub"], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    cfg = json.loads(json.dumps(tunnel_env["config"]))
    cfg["ssh_config"]["ssh_pkey"] = str(key)
    del cfg["ssh_config"]["ssh_private_key_password"]
    tunnel_env["path"].write_text(yaml.safe_dump(cfg))
    runtime = tunnel_env["runtime"]

    started = time.monotonic()
    refused = _seml(tunnel_env["env"], "list")
    took = time.monotonic() - started
    out = refused.stdout + refused.stderr
    assert refused.returncode == 1, out
    assert "SSH tunnel to MongoDB failed: the SSH host 127.0.0.1:" in out
    assert "refused the login of user 'root': Permission denied (publickey)" in out
    assert f"tried the key {key} (ssh-ed25519 {fingerprint})" in out
    assert "Traceback" not in out and cfg["password"] not in out
    assert took < 20, f"the refusal took {took:.0f} s"  # no retries, no 40 s wait
    assert worker_pids(runtime) == []  # no tunnel process left behind
    assert _locks_free(runtime)

    shutil.copyfile(sshd["key"], key)  # the cause fixed: a key the SSH host accepts
    fixed = _seml(tunnel_env["env"], "list")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    wait_until("the tunnel to end with seml", lambda: not worker_pids(runtime), 30, 0.1)


class SilentServer(threading.Thread):
    """A TCP server on a free port of 127.0.0.1 that accepts connections and never says a word
    (an SSH host that hangs): the tunnel process waits in its SSH start."""

    def __init__(self) -> None:
        import socket

        super().__init__(daemon=True)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.conns: list = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.conns.append(self.sock.accept()[0])
            except OSError:
                continue

    def close(self) -> None:
        self.stop.set()
        self.join(5)
        for conn in self.conns:
            conn.close()
        self.sock.close()


def test_the_tunnel_process_ends_on_sigterm_and_with_its_parent_while_its_ssh_start_waits(
    tunnel_env,
):
    """An SSH host that never answers: the tunnel process, waiting in its SSH start, ends within
    seconds on SIGTERM (the command says so) and when the command that started it is killed
    (``PR_SET_PDEATHSIG``, EOF on its stdin), leaving the tunnel's lock free each time."""
    runtime = tunnel_env["runtime"]
    silent = SilentServer()
    silent.start()
    procs: list[subprocess.Popen] = []
    try:
        cfg = json.loads(json.dumps(tunnel_env["config"]))
        cfg["ssh_config"]["ssh_port"] = silent.port
        tunnel_env["path"].write_text(yaml.safe_dump(cfg))

        def start_waiting() -> tuple[subprocess.Popen, int]:
            seen = len(silent.conns)
            proc = subprocess.Popen(
                [sys.executable, "-c", "from seml_hydra.cli import main; main()", "list"],
                env={**os.environ, **tunnel_env["env"]},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            procs.append(proc)
            wait_until("the SSH start to wait", lambda: len(silent.conns) > seen, 60, 0.05)
            (worker,) = worker_pids(runtime)
            return proc, worker

        def ended(worker: int):  # gone, and its lock free (its files close after its memory)
            return lambda: worker not in worker_pids(runtime) and _locks_free(runtime)

        proc, worker = start_waiting()
        os.kill(worker, signal.SIGTERM)
        wait_until("the tunnel process to end", ended(worker), 10, 0.05)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 1 and "stopped by SIGTERM before the tunnel was up" in err, err

        proc, worker = start_waiting()
        proc.kill()  # the command ends without a word to its tunnel process
        proc.communicate()
        wait_until("the orphan to end", ended(worker), 10, 0.05)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        silent.close()
