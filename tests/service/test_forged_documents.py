"""Forged or garbled documents (written by another tool, by hand, or by an attacker who can
write the database) met by the ``seml`` commands on the real MongoDB: one error line naming
the documents, exit 1, nothing half-written."""

from __future__ import annotations

import copy

from typer.testing import CliRunner

from seml_hydra.cli import app


def error(*args: str) -> str:
    """The output of a command that must fail as a user error: exit 1, one line."""
    result = CliRunner().invoke(app, list(args), prog_name="seml")
    out = result.output.strip()
    assert result.exit_code == 1, (out, result.exception)
    assert out.startswith("Error: ") and len(out.splitlines()) == 1, out
    return out


def test_results_with_a_list_valued_status_names_the_document(test_db):
    test_db["forged"].insert_many(
        [
            {"_id": 1, "status": "COMPLETED", "config": {"x": 1}, "result": 1},
            {"_id": 2, "status": ["COMPLETED"], "config": {"x": 2}, "result": 2},
        ]
    )
    out = error("forged", "results")
    assert "Experiment(s) 2 of forged have a status that is not a text" in out


def test_reload_sources_with_a_null_batch_id_names_the_documents_and_changes_nothing(test_db):
    docs = [
        {"_id": 1, "status": "STAGED", "batch_id": 1, "seml": {"source_files": [["a.py", "f"]]}},
        {"_id": 2, "status": "STAGED", "batch_id": None, "seml": {"source_files": []}},
    ]
    test_db["forged"].insert_many(copy.deepcopy(docs))
    out = error("forged", "reload-sources", "-y")
    assert "Experiment(s) 2 of forged have no batch id" in out
    assert list(test_db["forged"].find().sort("_id", 1)) == docs


def test_description_set_with_a_garbled_seml_field_writes_no_document(test_db):
    docs = [
        {"_id": 1, "status": "STAGED", "batch_id": 1, "seml": {}},
        {"_id": 2, "status": "STAGED", "batch_id": 1, "seml": {}},
        {"_id": 3, "status": "STAGED", "batch_id": 1, "seml": "garbled"},
    ]
    test_db["forged"].insert_many(copy.deepcopy(docs))
    out = error("forged", "description", "set", "hello")
    assert "Experiment(s) 3 have a `seml` field that is not a document" in out
    assert "Nothing was written" in out
    assert list(test_db["forged"].find().sort("_id", 1)) == docs
