"""Name rules: a non-empty string of valid Unicode, outside the reserved prefix."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import alkstore
from alkstore._names import check_identifier, check_name, outbox_queue_name

KINDS = ["channel", "stream", "queue", "lock", "outbox", "schedule"]
kinds = st.sampled_from(KINDS)
valid_text = st.text(st.characters(codec="utf-8"), min_size=1, max_size=1000)


@given(valid_text, kinds)
def test_any_unicode_name_outside_the_prefix_is_accepted(name: str, kind: str) -> None:
    if name.startswith("__alkstore_"):
        with pytest.raises(alkstore.ReservedName):
            check_name(name, kind)  # type: ignore[arg-type]
    else:
        assert check_name(name, kind) == name  # type: ignore[arg-type]


@given(st.text(st.characters(codec="utf-8")), kinds)
def test_every_name_under_the_reserved_prefix_is_refused(suffix: str, kind: str) -> None:
    with pytest.raises(alkstore.ReservedName, match=f"{kind} name .* reserved prefix"):
        check_name("__alkstore_" + suffix, kind)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "name",
    [
        alkstore.RECONNECT_CHANNEL,
        alkstore.SCHEDULER_LOCK,
        alkstore.OUTBOX_QUEUE_PREFIX + "webhooks",
        "__alkstore_",
    ],
)
def test_the_reserved_strings_are_reserved(name: str) -> None:
    assert name.startswith(alkstore.RESERVED_PREFIX)
    with pytest.raises(alkstore.ReservedName):
        check_name(name, "channel")


@pytest.mark.parametrize("name", ["_alkstore_x", "__Alkstore_x", "x__alkstore_", " __alkstore_x"])
def test_near_misses_of_the_prefix_are_ordinary_names(name: str) -> None:
    assert check_name(name, "queue") == name


@pytest.mark.parametrize("kind", KINDS)
def test_an_empty_name_is_invalid_and_says_which_kind(kind: str) -> None:
    with pytest.raises(alkstore.InvalidName, match=f"{kind} name must not be empty"):
        check_name("", kind)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", [None, 7, b"queue", ["queue"]])
def test_a_name_that_is_not_a_string_is_invalid(name: object) -> None:
    with pytest.raises(alkstore.InvalidName, match="must be a str"):
        check_name(name, "queue")


@given(st.text(), st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), st.text())
def test_a_name_with_lone_surrogates_is_invalid(before: str, surrogate: str, after: str) -> None:
    name = before + surrogate + after
    if name.startswith("__alkstore_"):
        return  # reserved-prefix and surrogate: either refusal is right
    with pytest.raises(alkstore.InvalidName, match="not valid Unicode"):
        check_name(name, "stream")


def test_identifiers_are_not_reserved_checked() -> None:
    assert check_identifier("__alkstore_consumer", "consumer name") == "__alkstore_consumer"
    with pytest.raises(alkstore.InvalidName, match="consumer name must not be empty"):
        check_identifier("", "consumer name")


def test_the_outbox_backing_queue_is_derived_under_the_prefix() -> None:
    assert outbox_queue_name("webhooks") == "__alkstore_outbox:webhooks"


def test_name_errors_are_alkstore_errors_and_value_errors() -> None:
    for error in (alkstore.InvalidName, alkstore.ReservedName):
        assert issubclass(error, alkstore.Error)
        assert issubclass(error, ValueError)
    assert not issubclass(alkstore.ReservedName, alkstore.InvalidName)
