"""The Prometheus text of a store's metrics, built from inspector values (no database)."""

from __future__ import annotations

import pytest

from alkstore import ConsumerStats, QueueStats, Schedule, StreamStats
from alkstore._metrics import (
    QUEUE_STATES,
    Sample,
    StoreMetrics,
    _metrics,
    escape_help,
    escape_label_value,
)


def test_label_values_escape_backslash_quote_and_line_feed_and_nothing_else() -> None:
    assert escape_label_value('a\\b"c\nd\te\r€') == 'a\\\\b\\"c\\nd\te\r€'
    assert escape_help('a\\b"c\nd') == 'a\\\\b"c\\nd'


def test_a_sample_line_quotes_each_label_and_writes_numbers_as_prometheus_reads_them() -> None:
    assert Sample("m", (), 3).line() == "m 3"
    assert Sample("m", (("q", 'x"y'), ("s", "ready")), 1.5).line() == 'm{q="x\\"y",s="ready"} 1.5'
    assert Sample("m", (), float("nan")).line() == "m NaN"
    assert Sample("m", (), float("inf")).line() == "m +Inf"
    assert Sample("m", (), True).line() == "m 1"


def test_every_metric_has_its_help_and_type_even_with_nothing_to_count() -> None:
    text = StoreMetrics((), (), (), read_s=0.25).text()
    lines = text.splitlines()
    assert [line for line in lines if not line.startswith("#")] == [
        "alkstore_inspect_duration_seconds 0.25"
    ]
    assert len([line for line in lines if line.startswith("# TYPE ")]) == 7
    assert all(line.endswith(" gauge") for line in lines if line.startswith("# TYPE "))


def test_each_queue_gets_every_state_and_an_age_of_zero_with_none_ready() -> None:
    metrics = _metrics([QueueStats("b", 1, 2, 3, 4, 5, 6.5)], [], [], ["a", "b"], read_s=0.0)
    assert [stats.name for stats in metrics.queues] == ["a", "b"]
    samples = {(s.name, s.labels): s.value for s in metrics.samples()}
    assert [samples["alkstore_queue_jobs", (("queue", "b"), ("state", state))]
            for state in QUEUE_STATES] == [1, 2, 4, 5, 3]  # fmt: skip
    assert samples["alkstore_queue_oldest_ready_age_seconds", (("queue", "a"),)] == 0
    assert samples["alkstore_queue_oldest_ready_age_seconds", (("queue", "b"),)] == 6.5


def test_streams_and_schedules_become_head_offset_lag_and_next_fire_samples() -> None:
    stream = StreamStats("s", 9, (ConsumerStats("c", 4, 5),))
    schedule = Schedule("nightly", "@every 1d", "reports", None, 1_900_000_000.0)
    lines = StoreMetrics((), (stream,), (schedule,), read_s=0.0).text().splitlines()
    assert 'alkstore_stream_head_offset{stream="s"} 9' in lines
    assert 'alkstore_stream_consumer_offset{stream="s",consumer="c"} 4' in lines
    assert 'alkstore_stream_consumer_lag{stream="s",consumer="c"} 5' in lines
    assert (
        'alkstore_schedule_next_fire_timestamp_seconds{schedule="nightly",queue="reports"} '
        "1900000000.0"
    ) in lines


def test_an_always_exported_queue_must_be_named() -> None:
    with pytest.raises(TypeError, match="non-empty"):
        _metrics([], [], [], [""], read_s=0.0)
