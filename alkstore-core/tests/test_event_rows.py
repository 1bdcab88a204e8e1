"""Events built from rows are the events their constructor builds."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from alkstore import Codec, StreamEvent
from alkstore._event_rows import EventRow
from alkstore.engine import stream_events


def test_an_event_from_a_row_is_the_constructed_event() -> None:
    (built,) = stream_events("s", [(7, "k", '{"a": [1, 2.5, null]}', 12.5)])
    constructed = StreamEvent(7, "s", "k", {"a": [1, 2.5, None]}, 12.5)
    assert built == constructed
    assert type(built) is StreamEvent
    assert repr(built) == repr(constructed)
    assert pickle.loads(pickle.dumps(built)) == constructed
    assert dataclasses.replace(built, offset=8).offset == 8


def test_an_event_from_a_row_is_frozen() -> None:
    (event,) = stream_events("s", [(1, None, "1", 0.0)])
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.offset = 2  # type: ignore[misc]


def test_a_stored_key_is_turned_back_and_none_stays_none() -> None:
    rows: list[EventRow] = [(1, "stored:a", '"x"', 0.0), (2, None, b'"y"', 1.0)]
    first, second = stream_events("s", rows, lambda key: key.removeprefix("stored:"))
    assert (first.key, first.payload) == ("a", "x")
    assert (second.key, second.payload) == (None, "y")


def test_a_row_that_is_not_json_is_refused() -> None:
    with pytest.raises(Codec, match="not valid JSON"):
        stream_events("s", [(1, None, "{", 0.0)])
