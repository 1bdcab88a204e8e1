"""The JSON codec: what goes in comes back out equal, or is refused up front."""

from __future__ import annotations

import datetime
import decimal
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import alkstore
from alkstore._codec import encode
from alkstore.engine import decode

# Text of valid Unicode scalar values: lone surrogates are not text.
unicode_text = st.text(st.characters(codec="utf-8"))

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=False, allow_infinity=False)
    | unicode_text,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(unicode_text, children, max_size=5)
    ),
    max_leaves=30,
)


@given(json_values)
def test_every_json_value_round_trips_exactly(value: Any) -> None:
    decoded = decode(encode(value))
    assert decoded == value
    assert _types(decoded) == _types(value)


@given(json_values)
def test_encoded_text_is_valid_utf8(value: Any) -> None:
    encode(value).encode("utf-8")


def test_tuples_encode_as_lists() -> None:
    assert decode(encode({"pair": (1, "two")})) == {"pair": [1, "two"]}


def test_negative_zero_keeps_its_sign() -> None:
    assert math.copysign(1.0, decode(encode(-0.0))) == -1.0


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({1, 2}, "set"),
        (float("nan"), "NaN"),
        (float("inf"), "infinity"),
        ({"a": [1, float("-inf")]}, "payload['a'][1]"),
        ({1: "int key"}, "key of type int"),
        ({None: "x"}, "key of type NoneType"),
        ({("a",): "x"}, "key of type tuple"),
        (b"bytes", "bytes"),
        (datetime.datetime(2026, 1, 1), "datetime"),
        (decimal.Decimal("1.5"), "Decimal"),
        (object(), "object"),
        ("lone \ud800 surrogate", "lone surrogates"),
        ({"\udfff": 1}, "lone surrogates"),
    ],
)
def test_values_json_cannot_hold_are_refused(value: object, says: str) -> None:
    with pytest.raises(alkstore.Codec, match=_literal(says)):
        encode(value)


def test_a_value_that_contains_itself_is_refused() -> None:
    looped: list[object] = []
    looped.append(looped)
    with pytest.raises(alkstore.Codec, match="refers to itself"):
        encode(looped)


def test_codec_errors_are_alkstore_errors_and_value_errors() -> None:
    with pytest.raises(alkstore.Error):
        encode({1, 2})
    with pytest.raises(ValueError, match="set"):
        encode({1, 2})


@pytest.mark.parametrize(
    "text",
    ["", "{", "NaN", "-Infinity", "[1,]", "{'a': 1}", "1 2", "[1]]", '"a"x', " ", "[" * 100_000],
)
def test_decoding_text_that_is_not_json_raises_codec(text: str) -> None:
    with pytest.raises(alkstore.Codec, match="not valid JSON"):
        decode(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [(" 1", 1), ("1\n", 1), ('\t {"a": [1, 2]} \r\n', {"a": [1, 2]}), ('"x"', "x")],
)
def test_stored_text_may_have_whitespace_around_its_value(text: str, value: object) -> None:
    """What ``encode`` writes has none, but a row written by other means may."""
    assert decode(text) == value


def _types(value: Any) -> Any:
    """The shape of a value with its exact types, so 1 and 1.0 and True differ."""
    if isinstance(value, dict):
        return {key: _types(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_types(item) for item in value]
    return type(value)


def _literal(text: str) -> str:
    import re

    return re.escape(text)


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-32"])
def test_stored_bytes_decode_in_any_json_encoding(encoding: str) -> None:
    assert decode('{"name": "Zoë", "n": [1, 2.5]}'.encode(encoding)) == {
        "name": "Zoë",
        "n": [1, 2.5],
    }


def test_stored_bytes_that_are_not_text_are_a_codec_error() -> None:
    with pytest.raises(alkstore.Codec, match="not valid JSON"):
        decode(b'"\xff"')  # not UTF-8


def _nested_dicts(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def _dict_holding_itself() -> dict[str, Any]:
    value: dict[str, Any] = {}
    value["self"] = value
    return value


@pytest.mark.parametrize(
    "payload",
    [_nested_dicts(600), _nested_dicts(5000), _dict_holding_itself(), [_dict_holding_itself()]],
    ids=["dicts-600", "dicts-5000", "dict-holding-itself", "list-of-it"],
)
def test_a_payload_nested_too_deep_is_refused_with_codec_not_a_recursion_error(
    payload: object,
) -> None:
    with pytest.raises(alkstore.Codec, match="nested more than 500 levels deep") as refused:
        encode(payload)
    assert len(str(refused.value)) < 200
