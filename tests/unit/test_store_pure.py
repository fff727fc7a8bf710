"""Pure helpers of seml_hydra.store written once: the reserved collection names (what the
``seml list`` listing hides is what an experiments collection may not be called) and scrubbing
secrets from messages (the client's errors and the tunnel process's). No services."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from seml_hydra.store.collections import is_reserved_collection, validate_collection_name
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


def test_scrub_hides_secrets_raw_and_percent_encoded_and_url_passwords():
    secret = "p@ss/wörd"
    text = (
        f"auth failed for {secret}; uri mongodb://alice:{quote(secret, safe='')}@h:1/db; "
        "other mongodb://bob:hunter2@h2/db"
    )
    out = scrub(text, [secret, None, ""])
    assert secret not in out and quote(secret, safe="") not in out and "hunter2" not in out
    assert (
        out == "auth failed for ***; uri mongodb://alice:***@h:1/db; other mongodb://bob:***@h2/db"
    )


def test_scrub_leaves_text_without_secrets_alone():
    assert scrub("hydra/launcher=seml at 127.0.0.1:27017", ["", None]) == (
        "hydra/launcher=seml at 127.0.0.1:27017"
    )


def test_the_names_refused_as_the_seml_commands_own_are_its_root_commands():
    """``CLI_WORDS`` (refused as collection names: ``seml NAME ...`` would run the command) is
    the ``seml`` command's own list of root commands, not a second list that can drift."""
    import typer

    from seml_hydra.cli.app import app
    from seml_hydra.store.collections import CLI_WORDS

    root = typer.main.get_command(app)
    assert set(root.commands) == set(CLI_WORDS)
