"""Jobs run the code of launch time: a flat project and a src-layout project (installed
editable) are edited while their job is held, and the result still shows the launched code."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import run_app

APP = """
import hydra
{imports}


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    return {{"value": {value_expr}, "file": {file_expr}, "cwd": __import__("os").getcwd()}}


if __name__ == "__main__":
    main()
"""


def write_flat_project(root: Path) -> Path:
    (root / "conf").mkdir(parents=True)
    (root / "conf" / "config.yaml").write_text("tag: flat\n")
    (root / "helper.py").write_text("VALUE = 1\n")
    app = root / "app.py"
    app.write_text(
        APP.format(imports="import helper", value_expr="helper.VALUE", file_expr="helper.__file__")
    )
    return app


def write_src_project(root: Path) -> Path:
    (root / "src" / "mypkg").mkdir(parents=True)
    (root / "src" / "mypkg" / "__init__.py").write_text("VALUE = 1\n")
    (root / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [build-system]
            requires = ["setuptools"]
            build-backend = "setuptools.build_meta"
            [project]
            name = "seml-hydra-test-mypkg"
            version = "0.0.1"
            [tool.setuptools.packages.find]
            where = ["src"]
            """
        )
    )
    (root / "conf").mkdir()
    (root / "conf" / "config.yaml").write_text("tag: src\n")
    app = root / "app.py"
    app.write_text(
        APP.format(imports="import mypkg", value_expr="mypkg.VALUE", file_expr="mypkg.__file__")
    )
    return app


def launch_held(app: Path, collection) -> dict:
    """Launch one point with wait=false and a held array; returns its document."""
    run_app(
        app,
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.wait=false",
        "+hydra.launcher.additional_parameters.hold=true",
        cwd=app.parent,
        timeout=120,
        check=True,
    )
    (doc,) = list(collection.find())
    assert doc["status"] == "PENDING"
    return doc


def release_and_wait(doc: dict, collection) -> dict:
    subprocess.run(["scontrol", "release", str(doc["slurm"][0]["array_id"])], check=True)
    deadline = time.monotonic() + 120
    while True:
        current = collection.find_one({"_id": doc["_id"]})
        if current["status"] in ("COMPLETED", "FAILED", "KILLED"):
            return current
        assert time.monotonic() < deadline, current["status"]
        time.sleep(0.3)


def test_flat_project_job_runs_the_code_of_launch_time(slurm, test_db, tmp_path):
    app = write_flat_project(tmp_path / "flat")
    doc = launch_held(app, test_db["app"])
    assert sorted(rel for rel, _ in doc["seml"]["source_files"]) == [
        "app.py",
        "conf/config.yaml",
        "helper.py",
    ]
    (app.parent / "helper.py").write_text("VALUE = 2\n")  # edited while the job waits
    done = release_and_wait(doc, test_db["app"])
    assert done["status"] == "COMPLETED", done.get("fail_trace")
    assert done["result"]["value"] == 1
    assert "/src-semltest_" in done["result"]["file"]  # in the private runtime directory
    assert not Path(done["result"]["file"]).exists()  # the job removed its directory
    assert done["result"]["cwd"] == str(app.parent)  # the launch directory, as Hydra has it


@pytest.fixture
def editable_src_project(tmp_path):
    app = write_src_project(tmp_path / "srcproj")
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-build-isolation", "-e", str(app.parent)],
        check=True,
        capture_output=True,
    )
    yield app
    subprocess.run([*pip, "uninstall", "-y", "seml-hydra-test-mypkg"], capture_output=True)


def test_src_layout_project_installed_editable_runs_from_the_snapshot(
    slurm, test_db, editable_src_project
):
    app = editable_src_project
    doc = launch_held(app, test_db["app"])
    assert "src/mypkg/__init__.py" in [rel for rel, _ in doc["seml"]["source_files"]]
    (app.parent / "src" / "mypkg" / "__init__.py").write_text("VALUE = 2\n")
    done = release_and_wait(doc, test_db["app"])
    assert done["status"] == "COMPLETED", done.get("fail_trace")
    assert done["result"]["value"] == 1
    assert "/src-semltest_" in done["result"]["file"]
    assert done["result"]["file"].endswith("src/mypkg/__init__.py")


def test_a_module_another_user_plants_for_the_job_is_not_imported(
    slurm, test_db, tmp_path, other_user
):
    """Job ids are public: while the job waits, another user creates the snapshot directory
    the job used to take (``/tmp/seml_hydra_src_<cluster>_<array>_<task>``, with a counter
    saying it is in use) holding its own ``helper.py``. The job imports the launched one from
    its private directory."""
    app = write_flat_project(tmp_path / "flat")
    doc = launch_held(app, test_db["app"])
    key = f"semltest_{doc['slurm'][0]['array_id']}_0"
    planted = Path("/tmp") / f"seml_hydra_src_{key}"
    counter = Path("/tmp") / f".seml_hydra_src_{key}.users"
    try:
        other_user.run(
            "sh",
            "-c",
            f"mkdir -m 755 {planted} && echo 'VALUE = 666' > {planted}/helper.py"
            f" && echo 1 > {counter}",
            check=True,
        )
        done = release_and_wait(doc, test_db["app"])
        assert done["status"] == "COMPLETED", done.get("fail_trace")
        assert done["result"]["value"] == 1
        assert not done["result"]["file"].startswith(str(planted))
    finally:
        other_user.run("rm", "-rf", str(planted), str(counter))
