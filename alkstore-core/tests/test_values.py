"""Value types and ``payload_as``."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

import pytest
from hypothesis import given
from hypothesis import strategies as st

import alkstore
from alkstore import JobInfo, Schedule, StreamEvent, Wake


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"


@dataclass
class Line:
    sku: str
    quantity: int
    price: float = 0.0


@dataclass
class Order:
    id: int
    lines: list[Line]
    colour: Colour
    note: Optional[str] = None  # noqa: UP045 - the typing.Optional spelling must work too
    tags: dict[str, int] = field(default_factory=dict)
    status: Literal["new", "paid"] = "new"
    window: tuple[int, int] | None = None


def event(payload: Any) -> StreamEvent:
    return StreamEvent(offset=1, stream="orders", key=None, payload=payload, created_at=0.0)


def test_payload_as_builds_nested_dataclasses() -> None:
    payload = {
        "id": 7,
        "lines": [{"sku": "A-1", "quantity": 2, "price": 3}, {"sku": "B-2", "quantity": 1}],
        "colour": "green",
        "tags": {"rush": 1},
        "window": [9, 17],
    }
    order = event(payload).payload_as(Order)
    assert order == Order(
        id=7,
        lines=[Line("A-1", 2, 3.0), Line("B-2", 1)],
        colour=Colour.GREEN,
        tags={"rush": 1},
        window=(9, 17),
    )
    assert isinstance(order.lines[0].price, float)


@pytest.mark.parametrize(
    ("payload", "target", "expected"),
    [
        (5, int, 5),
        (5, float, 5.0),
        (2.5, float, 2.5),
        ("x", str, "x"),
        (True, bool, True),
        (None, type(None), None),
        ([1, 2], list, [1, 2]),
        ([1, 2], list[int], [1, 2]),
        ([1, "a"], tuple, (1, "a")),
        ([1, 2, 3], tuple[int, ...], (1, 2, 3)),
        ({"a": 1}, dict, {"a": 1}),
        ({"a": [1]}, dict[str, list[int]], {"a": [1]}),
        ({"anything": [1]}, Any, {"anything": [1]}),
        ("red", Colour, Colour.RED),
        (3, int | str, 3),
        ("3", int | str, "3"),
        (None, Optional[int], None),  # noqa: UP045
    ],
)
def test_payload_as_builds_plain_types(payload: Any, target: Any, expected: Any) -> None:
    result = event(payload).payload_as(target)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("payload", "target", "says"),
    [
        ("5", int, "payload should be int, got str"),
        (True, int, "should be int, got bool"),
        (1, bool, "should be bool"),
        ([1, "x"], list[int], r"payload\[1\] should be int"),
        ({"id": 1}, Order, "lacks 'lines'"),
        (
            {"id": 1, "lines": [], "colour": "red", "extra": 1},
            Order,
            "keys Order does not define: extra",
        ),
        ({"id": 1, "lines": [{"sku": 1, "quantity": 1}], "colour": "red"}, Order, "lines"),
        ({"id": 1, "lines": [], "colour": "blue"}, Order, "payload.colour should be"),
        ([1, 2], tuple[int, int, int], "has 2 items, expected 3"),
        ("new", Literal["a", "b"], "one of"),
        ([], Order, "an object for Order"),
        ({"a": 1}, set, "cannot build set"),
    ],
)
def test_payload_as_says_where_a_payload_does_not_fit(payload: Any, target: Any, says: str) -> None:
    with pytest.raises(alkstore.Codec, match=says):
        event(payload).payload_as(target)


@given(st.lists(st.integers()), st.dictionaries(st.text(), st.floats(allow_nan=False)))
def test_payload_as_round_trips_typed_containers(
    numbers: list[int], table: dict[str, float]
) -> None:
    assert event(numbers).payload_as(list[int]) == numbers
    assert event(table).payload_as(dict[str, float]) == table


def test_job_info_payload_as() -> None:
    info = JobInfo(
        id=1, queue="q", state="dead", payload={"sku": "A", "quantity": 1}, priority=0,
        attempts=3, max_attempts=3, run_at=0.0, created_at=0.0, expires_at=None,
        worker_id="w", deadline=None, last_error="boom", died_at=1.0,
    )  # fmt: skip
    assert info.payload_as(Line) == Line("A", 1)


def test_value_types_are_frozen_and_compare_by_value() -> None:
    assert Wake("orders") == Wake("orders")
    assert hash(Wake("orders")) == hash(Wake("orders"))
    schedule = Schedule("nightly", "@every 1d", "reports", {}, 0.0)
    for value in (Wake("orders"), event(1), schedule):
        first_field = dataclasses.fields(value)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, first_field, "changed")


def test_reprs_show_what_matters() -> None:
    assert repr(Wake("orders")) == "Wake(channel='orders')"
    assert "offset=1" in repr(event({"a": 1}))


def test_reprs_of_values_with_payloads_stay_short() -> None:
    huge = {"blob": "x" * 1_000_000, "items": list(range(100_000)), "deep": [[[[[["end"]]]]]]}
    info = JobInfo(
        id=7, queue="q" * 10_000, state="pending", payload=huge, priority=0, attempts=0,
        max_attempts=3, run_at=0.0, created_at=0.0, expires_at=None, worker_id=None,
        deadline=None, last_error="e" * 100_000, died_at=None,
    )  # fmt: skip
    values = (info, event(huge), Schedule("nightly", "@every 1d", "reports", huge, 0.0))
    for value in values:
        shown = repr(value)
        assert len(shown) < 2_000
        assert shown.startswith(f"{type(value).__name__}(")
        assert "..." in shown
    assert "id=7" in repr(info)
    assert "state='pending'" in repr(info)


def test_reprs_of_small_values_are_the_dataclass_reprs() -> None:
    small = event({"a": [1, 2], "b": None})
    assert repr(small) == (
        f"StreamEvent(offset=1, stream={small.stream!r}, key=None, "
        f"payload={{'a': [1, 2], 'b': None}}, created_at={small.created_at!r})"
    )
