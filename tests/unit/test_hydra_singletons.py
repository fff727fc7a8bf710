"""Hydra's process-wide state is put back after a test that changed it, and left alone (not
copied, plugins not discovered again) after one that did not (``support.hydra_singletons``,
the autouse fixture of ``tests/conftest.py``)."""

from __future__ import annotations

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.core.singleton import Singleton
from hydra.core.utils import JobRuntime
from hydra.version import VersionBase, _get_version, setbase
from omegaconf import OmegaConf
from support.hydra_singletons import SingletonGuard


def change_everything() -> None:
    """What tests do to Hydra's state: a version base, a config stored, a resolver, the job's
    runtime changed in place."""
    setbase("1.2")
    ConfigStore.instance().store(name="guard_probe", node={"a": 1}, group="probe_group")
    OmegaConf.register_new_resolver("guard_probe", lambda: 1)
    JobRuntime.instance().set("name", "guard_probe")


def test_a_test_that_changed_the_state_leaves_it_as_it_found_it():
    guard = SingletonGuard()
    setbase("1.3")
    name_before = JobRuntime.instance().get("name")
    token = guard.before()
    change_everything()
    assert guard.after(token) is True
    assert VersionBase.instance().getbase() == _get_version("1.3")
    assert "probe_group" not in ConfigStore.instance().repo
    assert not OmegaConf.has_resolver("guard_probe")
    assert JobRuntime.instance().get("name") == name_before


def test_a_change_in_place_deep_in_the_state_is_seen():
    guard = SingletonGuard()
    ConfigStore.instance()  # present before the test
    token = guard.before()
    JobRuntime.instance().conf.name = "changed in place"
    assert guard.after(token) is True


def test_a_test_that_changed_nothing_keeps_the_same_objects_and_plugins():
    guard = SingletonGuard()
    Plugins.instance()
    ConfigStore.instance().store(name="guard_read", node={"a": 1})
    instances = dict(Singleton._instances)
    token = guard.before()
    assert ConfigStore.instance().load("guard_read.yaml").node.a == 1  # reads, changes nothing
    assert guard.after(token) is False
    assert Singleton._instances == instances
    assert all(Singleton._instances[k] is v for k, v in instances.items())


def test_the_plugins_are_kept_when_the_state_is_put_back_and_found_again_when_replaced():
    guard = SingletonGuard()
    plugins = Plugins.instance()
    token = guard.before()
    change_everything()
    guard.after(token)
    assert Singleton._instances[Plugins] is plugins
    token = guard.before()
    del Singleton._instances[Plugins]
    guard.after(token)
    assert Plugins in Singleton._instances
    assert Singleton._instances[Plugins] is not plugins


def test_a_state_first_seen_at_a_tests_start_is_the_one_put_back():
    """A fixture of wider scope that changed the state before the test: the test ends with that
    state, not the one of the session's start."""
    guard = SingletonGuard()
    guard.after(guard.before())
    ConfigStore.instance().store(name="wider_scope", node={"b": 2}, group="wider_group")
    token = guard.before()
    change_everything()
    guard.after(token)
    assert "wider_group" in ConfigStore.instance().repo
    assert "probe_group" not in ConfigStore.instance().repo
