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


# -- id_filter: the ids of a selection as ``_id`` ranges for MongoDB ------------------------------


def _matches(query: dict, _id) -> bool:
    """Whether a document with ``_id`` matches ``query``, for the operators ``id_filter`` uses
    (``$or``, ``$in``, ``$gte``, ``$lte``, ``$type`` int/long), as MongoDB compares them: numbers
    by value (``2.0 == 2``), other types never equal to a number."""

    def number(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if "$or" in query:
        return any(_matches(part, _id) for part in query["$or"])
    cond = query["_id"]
    if "$in" in cond:
        return any(type(v) is type(_id) and v == _id for v in cond["$in"])
    if not number(_id):
        return False
    in_range = cond["$gte"] <= _id <= cond["$lte"]
    is_int = isinstance(_id, int)  # BSON int32/int64 are Python ints; a double is a float
    return in_range and (is_int or cond.get("$type") is None)


@pytest.mark.parametrize(
    "ids",
    [
        [],
        [7],
        list(range(1, 100_001)),
        [1, 2, 3, 7, 8, 20, 21, 22, 23],
        [5, 3, 4, 4, 1],  # unsorted, a duplicate
        [1, 2, "x", 3, 10, 2.5],  # a string id and a float id (forged documents)
        [i for i in range(1, 2000) if i % 7],  # 286 runs: more than MAX_ID_RANGES
    ],
)
def test_id_filter_matches_exactly_the_given_ids(ids):
    from seml_hydra.core.ranges import id_filter

    query = id_filter(ids)
    top = max([i for i in ids if isinstance(i, int)], default=10)
    universe = [*range(-1, top + 3), 2.5, 3.5, "x", "y", "3", True]
    given = {(type(i), i) for i in ids}
    assert [i for i in universe if _matches(query, i)] == [
        i for i in universe if (type(i), i) in given
    ]


def test_id_filter_of_a_launch_is_one_range_and_of_scattered_ids_a_bounded_or():
    """100,000 consecutive ids are one ``_id`` range (not a 0.8 MB ``$in``); ids in many short
    runs give at most ``MAX_ID_RANGES`` ranges, the rest in one ``$in``."""
    from seml_hydra.core.ranges import MAX_ID_RANGES, MIN_RANGE_LENGTH, id_filter

    assert id_filter(range(1, 100_001)) == {
        "_id": {"$gte": 1, "$lte": 100_000, "$type": ["int", "long"]}
    }
    assert id_filter([4, 5]) == {"_id": {"$in": [4, 5]}}  # shorter than MIN_RANGE_LENGTH
    assert MIN_RANGE_LENGTH == 3
    scattered = id_filter([i for i in range(1, 2000) if i % 7])
    ranges = [p for p in scattered["$or"] if "$gte" in p["_id"]]
    assert len(ranges) == MAX_ID_RANGES
    assert [p for p in scattered["$or"] if "$in" in p["_id"]][0]["_id"]["$in"]  # the others
    assert id_filter([]) == {"_id": {"$in": []}}


def test_id_runs_are_the_sorted_integer_runs_and_the_other_ids():
    from seml_hydra.core.ranges import id_runs

    assert id_runs([3, 1, 2, 7, "a", True, 2, 9, 8]) == ([(1, 3), (7, 9)], ["a", True])
    assert id_runs(iter([])) == ([], [])
