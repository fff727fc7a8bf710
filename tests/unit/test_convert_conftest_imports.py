"""``tools/lead/convert_conftest_imports.py``: imports of helpers from ``conftest`` or another
test file become imports from the ``tests/support`` module that defines each name."""

from __future__ import annotations

import importlib.util
import sys
import textwrap

import pytest
from support.paths import ROOT


def load_tool():
    spec = importlib.util.spec_from_file_location(
        "convert_conftest_imports", ROOT / "tools/lead/convert_conftest_imports.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


tool = load_tool()
INDEX = tool.support_index()


def convert(source: str) -> str:
    return tool.convert_source(textwrap.dedent(source), INDEX, "t.py")


def test_every_helper_name_is_defined_by_exactly_one_support_module():
    assert {n: m for n, m in INDEX.items() if len(m) != 1} == {}
    assert INDEX["wait_until"] == ["support.wait"]
    assert INDEX["OTHER_NODE"] == INDEX["LOST_NODE"] == ["support.slurm"]  # a tuple target
    assert "_answers" not in INDEX  # private names are never imported


def test_a_from_import_becomes_one_line_per_module_keeping_aliases():
    assert convert("from conftest import wait_until, run_app, squeue_tasks as squeue\n") == (
        "from support.run import run_app\n"
        "from support.slurm import squeue_tasks as squeue\n"
        "from support.wait import wait_until\n"
    )


def test_a_parenthesised_import_inside_a_function_keeps_its_indentation():
    source = """\
        def test_x():
            from conftest import (
                ROOT,
                statuses,
            )
            return ROOT, statuses
        """
    assert convert(source) == textwrap.dedent(
        """\
        def test_x():
            from support.mongo import statuses
            from support.paths import ROOT
            return ROOT, statuses
        """
    )


def test_import_conftest_becomes_imports_of_the_names_it_was_used_for():
    source = """\
        import conftest

        def test_x(tmp_path):
            conftest.wait_until("up", lambda: conftest.run_app("a.py", cwd=tmp_path))
        """
    assert convert(source) == textwrap.dedent(
        """\
        from support.run import run_app
        from support.wait import wait_until

        def test_x(tmp_path):
            wait_until("up", lambda: run_app("a.py", cwd=tmp_path))
        """
    )


def test_a_helper_imported_from_another_test_file_comes_from_support():
    assert convert("from test_retry import Blocker\n") == "from support.slurm import Blocker\n"
    assert convert("from tests.conftest import ROOT\n") == "from support.paths import ROOT\n"


@pytest.mark.parametrize(
    "source",
    ["from conftest import no_such_helper\n", "from test_retry import Sweep\n"],
)
def test_a_name_no_support_module_defines_is_refused_saying_which_and_where(source):
    with pytest.raises(tool.ConvertError, match=r"t\.py:1: '\w+' is defined by no module"):
        convert(source)


def test_a_file_without_such_imports_is_left_as_it_is():
    source = "import os\nfrom support.run import run_app\n"
    assert convert(source) == source


def test_the_command_leaves_a_file_it_cannot_convert_untouched(tmp_path, capsys):
    good, bad = tmp_path / "test_good.py", tmp_path / "test_bad.py"
    good.write_text("from conftest import ROOT\n")
    bad.write_text("from conftest import ROOT, no_such_helper\n")
    assert tool.main([str(good), str(bad)]) == 1
    assert good.read_text() == "from support.paths import ROOT\n"
    assert bad.read_text() == "from conftest import ROOT, no_such_helper\n"
    assert "'no_such_helper' is defined by no module" in capsys.readouterr().err
