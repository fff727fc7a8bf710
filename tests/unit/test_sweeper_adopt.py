"""A seml-hydra launcher set up by Hydra's plain basic sweeper adopts it (the sweeper's own
validation pass goes, its state stays); other sweepers are left alone."""

from __future__ import annotations

from hydra.core.plugins import Plugins
from omegaconf import OmegaConf

from seml_hydra.config import LOCAL_LAUNCHER_TARGET
from seml_hydra.launch.sweeper import LauncherValidates, basic_sweeper_class

Plugins.instance()  # Hydra's plugin scan executes the basic sweeper's module again: scan first


def config():
    return OmegaConf.create({"hydra": {"launcher": {"_target_": LOCAL_LAUNCHER_TARGET}}})


def set_up(sweeper):
    sweeper.setup(hydra_context=None, task_function=lambda cfg: None, config=config())
    return sweeper


def test_plain_basic_sweeper_is_adopted_with_its_state_kept():
    basic = basic_sweeper_class()
    sweeper = set_up(basic(max_batch_size=3, params={"x": "1,2"}))
    assert type(sweeper) is not basic and isinstance(sweeper, basic)
    assert type(sweeper).validate_batch_is_legal is LauncherValidates.validate_batch_is_legal
    assert (sweeper.max_batch_size, sweeper.params) == (3, {"x": "1,2"})
    sweeper.validate_batch_is_legal([["x=1"], ["oops=2"]])  # the launcher validates instead


def test_a_subclass_of_the_basic_sweeper_is_left_alone():
    class Other(basic_sweeper_class()):
        pass

    sweeper = set_up(Other(max_batch_size=None))
    assert type(sweeper) is Other


def test_a_basic_sweeper_out_of_reach_is_not_adopted_with_one_warning_saying_why(
    monkeypatch, caplog
):
    from seml_hydra.launch import sweeper as module

    monkeypatch.setattr(module, "SEARCH_DEPTH", 1)  # as if Hydra had more frames in between
    basic = basic_sweeper_class()
    with caplog.at_level("DEBUG", logger=module.__name__):
        sweeper = set_up(basic(max_batch_size=None))
    assert type(sweeper) is basic
    [record] = caplog.records
    assert record.levelname == "WARNING"
    assert record.getMessage().startswith("Hydra's basic sweeper not adopted: its setup is ")
    assert "beyond the 1 searched" in record.getMessage()


def test_a_sweeper_that_is_not_adopted_says_why_in_a_debug_line(caplog):
    from seml_hydra.launch import sweeper as module

    class Other(basic_sweeper_class()):
        pass

    with caplog.at_level("DEBUG", logger=module.__name__):
        set_up(Other(max_batch_size=None))
    [record] = caplog.records
    assert record.levelname == "DEBUG" and "Other is a subclass of it" in record.getMessage()
