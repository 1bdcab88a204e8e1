"""Payloads: JSON values in, equal values out; anything else refused up front."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import alkstore
from alkstore.engine import Capabilities

text = st.text(st.characters(codec="utf-8"), max_size=50)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(text, children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=25)
@given(payload=json_values)
def test_payloads_round_trip_through_queues_and_streams(
    store: alkstore.Store, payload: Any
) -> None:
    queue = store.queue("payloads")
    queue.enqueue(payload)
    job = queue.claim_one("w")
    assert job is not None
    assert job.payload == payload
    assert job.ack()
    stream = store.stream("payloads")
    offset = stream.publish(payload)
    assert stream.read_since(offset - 1)[0].payload == payload


@pytest.mark.parametrize("payload", [{1, 2}, float("nan"), {1: "int key"}, b"bytes", object()])
def test_a_non_json_payload_raises_codec_and_writes_nothing(
    store: alkstore.Store, payload: object
) -> None:
    with pytest.raises(alkstore.Codec):
        store.queue("q").enqueue(payload)
    with pytest.raises(alkstore.Codec):
        store.stream("s").publish(payload)
    with pytest.raises(alkstore.Codec):
        store.notify("c", payload)
    assert store.queue("q").claim_one("w") is None
    assert store.stream("s").read_since(0) == []


def test_payload_as_builds_typed_values(store: alkstore.Store) -> None:
    store.queue("q").enqueue([1, 2, 3])
    job = store.queue("q").claim_one("w")
    assert job is not None
    assert job.payload_as(tuple[int, ...]) == (1, 2, 3)


def test_notify_payloads_up_to_the_declared_limit_work_and_one_byte_more_raises(
    store: alkstore.Store, capabilities: Capabilities
) -> None:
    limit = capabilities.notify_payload_limit
    if limit is None:
        store.notify("c", "x" * 100_000)  # no limit declared: a large payload works
        with store.transaction() as tx:
            tx.notify_tx("c", "x" * 100_000)
        return
    at_limit = "x" * (limit - 2)  # the two JSON quotes make it exactly `limit` bytes
    store.notify("c", at_limit)
    with store.transaction() as tx:
        tx.notify_tx("c", at_limit)
    with pytest.raises(alkstore.PayloadTooLarge):
        store.notify("c", at_limit + "x")
    with pytest.raises(alkstore.PayloadTooLarge), store.transaction() as tx:
        tx.notify_tx("c", at_limit + "x")
    multibyte = "é" * ((limit - 2) // 2 + 1)  # fewer characters than bytes
    with pytest.raises(alkstore.PayloadTooLarge):
        store.notify("c", multibyte)
