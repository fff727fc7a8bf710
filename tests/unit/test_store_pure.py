"""Pure helpers of seml_hydra.store written once: the reserved collection names (what the
``seml list`` listing hides is what an experiments collection may not be called) and masking
password fields in messages (the client's errors and the tunnel process's). No services."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from seml_hydra.store.db.collections import is_reserved_collection, validate_collection_name
from seml_hydra.store.errors import InvalidCollectionName
from seml_hydra.store.masking import scrub
from seml_hydra.track.cache import is_listed_collection

RESERVED = [
    "seml_hydra_counters",
    "metrics",
    "fs",
    "fs.files",
    "fs.chunks",
    "system.views",
    "seml_hydra_metrics.train",
]
EXPERIMENTS = ["train", "fsx", "metrics_v2", "my.sweep", "seml_hydra_metricsx", "systems"]


@pytest.mark.parametrize("name", RESERVED)
def test_a_reserved_name_is_neither_listed_nor_accepted_for_experiments(name):
    assert is_reserved_collection(name)
    assert not is_listed_collection(name)
    with pytest.raises(InvalidCollectionName):
        validate_collection_name(name)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_an_experiments_name_is_listed_and_accepted(name):
    assert not is_reserved_collection(name)
    assert is_listed_collection(name)
    assert validate_collection_name(name) == name


def test_scrub_masks_url_passwords_raw_and_percent_encoded():
    secret = "p@ss/wörd"
    text = (
        f"auth failed; uri mongodb://alice:{quote(secret, safe='')}@h:1/db; "
        "other mongodb+srv://bob:hunter2@h2/db"
    )
    assert (
        scrub(text)
        == "auth failed; uri mongodb://alice:***@h:1/db; other mongodb+srv://bob:***@h2/db"
    )


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("bad option password='x y' here", "bad option password='***' here"),
        (
            "ssh=(('ssh_password', 'pw'), ('ssh_port', 22))",
            "ssh=(('ssh_password', '***'), ('ssh_port', 22))",
        ),
        (
            '{"ssh_private_key_password": "a,b", "x": 1}',
            '{"ssh_private_key_password": "***", "x": 1}',
        ),
        ("?tlsCertificateKeyFilePassword=s3&w=1", "?tlsCertificateKeyFilePassword=***&w=1"),
        ('line 5:\n    password: "unterminated\n', 'line 5:\n    password: "***\n'),
        ("createUser pwd=xyz)", "createUser pwd=***)"),
        ("mongodb://password:pw@h/db", "mongodb://password:***@h/db"),
    ],
)
def test_scrub_masks_the_value_of_password_keys(text, masked):
    assert scrub(text) == masked


@pytest.mark.parametrize(
    "text",
    [
        "Cannot reach MongoDB at a.example:27017: a timeout",  # password 'a'
        "settings from ~/.config/seml/mongodb.config, hydra/launcher=seml",  # password 'seml'
        "Cannot reach MongoDB at db1:27017 (db1 refused)",  # password 'db1', also the host
        "Check the user name and password there.",
    ],
)
def test_scrub_leaves_text_outside_password_fields_alone(text):
    """A short or common password, or one that is also a host name, shows up in a message only
    as itself in its field: masking its every occurrence spelled it out (``C***nnot re***ch``)."""
    assert scrub(text) == text


def test_scrub_masks_the_password_field_of_a_url_whose_password_is_also_its_host():
    assert (
        scrub("at mongodb://db1:db1@db1:27017/db1 (db1)")
        == "at mongodb://db1:***@db1:27017/db1 (db1)"
    )


def test_the_names_refused_as_the_seml_commands_own_are_its_root_commands():
    """``CLI_WORDS`` (refused as collection names: ``seml NAME ...`` would run the command) is
    the ``seml`` command's own list of root commands, not a second list that can drift."""
    import typer

    from seml_hydra.cli.app import app
    from seml_hydra.store.db.collections import CLI_WORDS

    root = typer.main.get_command(app)
    assert set(root.commands) == set(CLI_WORDS)
