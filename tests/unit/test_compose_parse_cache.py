"""``launch.compose.parse_cache``: OmegaConf's interpolation parse trees are kept for the thread
inside ``cached_interpolation_parse`` only, and ``omegaconf.base.parse`` is OmegaConf's own
again once no thread is inside (after an error too, and whatever order threads leave in).
No MongoDB, no Slurm."""

from __future__ import annotations

import threading

import omegaconf.base
import pytest

from seml_hydra.launch.compose.parse_cache import cached_interpolation_parse

TEXT = "${a.b}_${c}"


def parse_twice() -> tuple[object, object]:
    return omegaconf.base.parse(TEXT), omegaconf.base.parse(TEXT)


def test_the_thread_inside_reads_its_cache_and_the_original_is_back_after():
    original = omegaconf.base.parse
    cache: dict = {}
    with cached_interpolation_parse(cache):
        first, second = parse_twice()
        assert first is second is cache[TEXT]
    assert omegaconf.base.parse is original
    first, second = parse_twice()
    assert first is not second
    assert first.getText() == cache[TEXT].getText()
    with cached_interpolation_parse(cache):  # the same cache again: its trees are kept
        assert omegaconf.base.parse(TEXT) is cache[TEXT]


def test_other_threads_parse_as_before_while_one_is_inside():
    inside, done = threading.Event(), threading.Event()
    seen: list[tuple[object, object]] = []

    def other() -> None:
        inside.wait(30)
        seen.append(parse_twice())
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with cached_interpolation_parse({}):
        inside.set()
        assert done.wait(30)
    thread.join(30)
    first, second = seen[0]
    assert first is not second


def test_threads_leaving_in_any_order_restore_the_original():
    """A enters, B enters, A leaves (B still cached), B leaves: the original is back (saving and
    restoring per block would leave B's view of A's wrapper in place)."""
    original = omegaconf.base.parse
    b_inside, a_left, b_checked = threading.Event(), threading.Event(), threading.Event()
    b_cache: dict = {}
    b_seen: list[bool] = []

    def b() -> None:
        with cached_interpolation_parse(b_cache):
            b_inside.set()
            a_left.wait(30)
            first, second = parse_twice()
            b_seen.append(first is second is b_cache[TEXT])
            b_checked.set()

    thread = threading.Thread(target=b)
    with cached_interpolation_parse({}):
        thread.start()
        assert b_inside.wait(30)
    a_left.set()
    assert b_checked.wait(30)
    thread.join(30)
    assert b_seen == [True]
    assert omegaconf.base.parse is original


def test_an_inner_block_uses_its_own_cache_then_the_outer_ones():
    original = omegaconf.base.parse
    outer: dict = {}
    inner: dict = {}
    with cached_interpolation_parse(outer):
        with cached_interpolation_parse(inner):
            omegaconf.base.parse(TEXT)
        assert TEXT in inner and TEXT not in outer
        omegaconf.base.parse(TEXT)
        assert TEXT in outer and outer[TEXT] is not inner[TEXT]
        assert omegaconf.base.parse is not original
    assert omegaconf.base.parse is original


def test_an_error_inside_restores_the_original():
    original = omegaconf.base.parse
    with pytest.raises(RuntimeError, match="boom"), cached_interpolation_parse({}):
        raise RuntimeError("boom")
    assert omegaconf.base.parse is original
