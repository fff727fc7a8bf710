"""Unit tests for seml_hydra.core.ranges.format_ids."""

from __future__ import annotations

import pytest

from seml_hydra.core.ranges import format_ids


@pytest.mark.parametrize(
    "ids, expected",
    [
        ([], ""),
        ([5], "5"),
        ([1, 2], "1-2"),
        ([1, 2, 3], "1-3"),
        ([1, 3], "1, 3"),
        ([1, 2, 3, 7], "1-3, 7"),
        ([7, 1, 3, 2], "1-3, 7"),  # unsorted input
        ([2, 2, 1, 1, 3], "1-3"),  # duplicates
        ([1, 2, 4, 5, 7, 9, 10, 11], "1-2, 4-5, 7, 9-11"),
        ([0, 1, 10], "0-1, 10"),
        ([100, 101, 102, 200], "100-102, 200"),
    ],
)
def test_format_ids(ids, expected):
    assert format_ids(ids) == expected


@pytest.mark.parametrize("ids", [iter([3, 1, 2]), (1, 2, 3), {3, 2, 1}, range(1, 4)])
def test_format_ids_accepts_any_iterable(ids):
    assert format_ids(ids) == "1-3"


def test_format_ids_puts_ids_that_are_not_integers_after_the_ranges():
    from seml_hydra.core.ranges import format_ids

    assert format_ids([3, "b", 1, 2.5, {"x": 1}, 2, "b"]) == "1-3, 'b', 2.5, {'x': 1}"


def test_format_ids_shows_forged_ids_without_escape_sequences_or_markup():
    """A string ``_id`` with a terminal escape sequence or rich markup (a forged document) is
    shown as its repr with ``[`` escaped: printed through rich it neither drives the terminal
    nor raises ``MarkupError``."""
    from rich.console import Console

    text = format_ids([1, "id\x1b]0;PWNED\x07", "[/oops]"])
    assert "\x1b" not in text and "\x07" not in text
    console = Console(record=True, color_system=None)
    console.print(f"Reset: {text}")
    assert console.export_text() == "Reset: 1, '[/oops]', 'id\\x1b]0;PWNED\\x07'\n"
