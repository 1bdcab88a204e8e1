"""Prometheus metrics of a store: its queues, streams and schedules as gauges.

Everything comes from ``store.inspect()``, read afresh for each call: one
read of the queues, one of the streams, one of the schedules. The text is
Prometheus' text exposition format, version 0.0.4 (what every Prometheus
server and agent scrapes), built here with no dependency.

Names follow Prometheus' conventions: ``alkstore_`` first, ``snake_case``,
the unit last (``_seconds``), counts of things now as gauges. Label values
are the names as stored, escaped as the format says (``\\``, ``"`` and
line feeds), so any queue or stream name is safe to export.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from alkstore._inspect import QueueStats, StreamStats
from alkstore._values import Schedule

if TYPE_CHECKING:
    from alkstore._async_store import AsyncStore
    from alkstore._store import Store

__all__ = [
    "CONTENT_TYPE",
    "QUEUE_STATES",
    "Sample",
    "StoreMetrics",
    "prometheus_text",
    "prometheus_text_async",
    "read_metrics",
    "read_metrics_async",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The HTTP ``Content-Type`` of :func:`prometheus_text`'s output."""

QUEUE_STATES = ("ready", "scheduled", "processing", "dead", "expired")
"""The ``state`` label of ``alkstore_queue_jobs``: :class:`~alkstore.QueueStats`' counts.

``JobInfo.state`` says ``pending`` for a job counted here as ``ready``,
``scheduled`` or ``expired`` (pending, and ready now / later / past expiry).
"""

_FAMILIES: dict[str, tuple[str, str]] = {
    # name: (HELP text, label names shown in the docs)
    "alkstore_queue_jobs": (
        "Jobs in the queue now, by state: ready (claimable now), scheduled (ready later), "
        "processing (claimed), dead (dead letters), expired (past expiry, not yet swept).",
        "queue, state",
    ),
    "alkstore_queue_oldest_ready_age_seconds": (
        "How long the longest-waiting ready job of the queue has been ready; 0 with none ready.",
        "queue",
    ),
    "alkstore_stream_head_offset": (
        "The offset of the stream's newest committed event; 0 while it has none.",
        "stream",
    ),
    "alkstore_stream_consumer_offset": (
        "The offset a consumer of the stream last saved.",
        "stream, consumer",
    ),
    "alkstore_stream_consumer_lag": (
        "Events of the stream after the consumer's saved offset.",
        "stream, consumer",
    ),
    "alkstore_schedule_next_fire_timestamp_seconds": (
        "When a runner next fires the schedule (Unix seconds); far in the past means no runner.",
        "schedule, queue",
    ),
    "alkstore_inspect_duration_seconds": (
        "How long reading these metrics from the store took.",
        "",
    ),
}


@dataclass(frozen=True, slots=True)
class Sample:
    """One line of the exposition: a metric name, its labels and its value."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float | int

    def line(self) -> str:
        """The sample as one line of the text format, without its line feed."""
        if not self.labels:
            return f"{self.name} {_value(self.value)}"
        labels = ",".join(f'{key}="{escape_label_value(text)}"' for key, text in self.labels)
        return f"{self.name}{{{labels}}} {_value(self.value)}"


@dataclass(frozen=True, slots=True)
class StoreMetrics:
    """What one read of a store found, ready to print as text or JSON."""

    queues: tuple[QueueStats, ...]
    streams: tuple[StreamStats, ...]
    schedules: tuple[Schedule, ...]
    read_s: float
    """How long the reads took."""

    def samples(self) -> list[Sample]:
        """Every sample, grouped by metric in the order of the text."""
        found: list[Sample] = []
        for stats in self.queues:
            counts = {
                "ready": stats.ready, "scheduled": stats.scheduled,
                "processing": stats.processing, "dead": stats.dead, "expired": stats.expired,
            }  # fmt: skip
            found.extend(
                Sample("alkstore_queue_jobs", (("queue", stats.name), ("state", state)), count)
                for state, count in counts.items()
            )
        found.extend(
            Sample(
                "alkstore_queue_oldest_ready_age_seconds",
                (("queue", stats.name),),
                round(stats.oldest_ready_age_s or 0.0, 3),
            )
            for stats in self.queues
        )
        found.extend(
            Sample("alkstore_stream_head_offset", (("stream", s.name),), s.head)
            for s in self.streams
        )
        for metric, field in (
            ("alkstore_stream_consumer_offset", "offset"),
            ("alkstore_stream_consumer_lag", "lag"),
        ):
            found.extend(
                Sample(metric, (("stream", s.name), ("consumer", c.name)), getattr(c, field))
                for s in self.streams
                for c in s.consumers
            )
        found.extend(
            Sample(
                "alkstore_schedule_next_fire_timestamp_seconds",
                (("schedule", s.name), ("queue", s.queue)),
                round(s.next_fire_at, 3),
            )
            for s in self.schedules
        )
        found.append(Sample("alkstore_inspect_duration_seconds", (), round(self.read_s, 6)))
        return found

    def text(self) -> str:
        """The text exposition format 0.0.4: each metric's HELP and TYPE, then its samples.

        A metric with no samples (no streams yet, say) still has its HELP and TYPE lines.
        """
        by_name: dict[str, list[str]] = {name: [] for name in _FAMILIES}
        for sample in self.samples():
            by_name[sample.name].append(sample.line())
        lines: list[str] = []
        for name, (help_text, _) in _FAMILIES.items():
            lines.append(f"# HELP {name} {escape_help(help_text)}")
            lines.append(f"# TYPE {name} gauge")
            lines.extend(by_name[name])
        return "\n".join(lines) + "\n"

    def as_json(self) -> list[dict[str, object]]:
        """Every sample as ``{"name", "labels", "value"}``, for scripts."""
        return [
            {"name": s.name, "labels": dict(s.labels), "value": s.value} for s in self.samples()
        ]


def read_metrics(store: Store, *, queues: Iterable[str] = ()) -> StoreMetrics:
    """Read the store's metrics now (three short reads through ``store.inspect()``).

    ``queues`` are names always exported, with zero counts while they hold
    no job: ``inspect().queues()`` lists only queues holding a row, so
    without it a drained queue's series end (Prometheus marks them stale).

    Raises:
        alkstore.Database: the store could not be read.
        alkstore.Closed: the store is closed.
    """
    started = time.monotonic()
    inspector = store.inspect()
    found = inspector.queues()
    streams = inspector.streams()
    schedules = inspector.schedules()
    return _metrics(found, streams, schedules, queues, time.monotonic() - started)


async def read_metrics_async(store: AsyncStore, *, queues: Iterable[str] = ()) -> StoreMetrics:
    """:func:`read_metrics` for an :class:`~alkstore.AsyncStore`."""
    started = time.monotonic()
    inspector = store.inspect()
    found = await inspector.queues()
    streams = await inspector.streams()
    schedules = await inspector.schedules()
    return _metrics(found, streams, schedules, queues, time.monotonic() - started)


def prometheus_text(store: Store, *, queues: Iterable[str] = ()) -> str:
    """The store's metrics now, in Prometheus' text exposition format 0.0.4.

    Serve it with the ``Content-Type`` :data:`CONTENT_TYPE`; see
    :func:`read_metrics` for ``queues`` and the errors.
    """
    return read_metrics(store, queues=queues).text()


async def prometheus_text_async(store: AsyncStore, *, queues: Iterable[str] = ()) -> str:
    """:func:`prometheus_text` for an :class:`~alkstore.AsyncStore`."""
    return (await read_metrics_async(store, queues=queues)).text()


def _metrics(
    found: Sequence[QueueStats],
    streams: Sequence[StreamStats],
    schedules: Sequence[Schedule],
    always: Iterable[str],
    read_s: float,
) -> StoreMetrics:
    listed = {stats.name: stats for stats in found}
    for name in always:
        if not isinstance(name, str) or not name:
            raise TypeError(f"queue names must be non-empty strings, not {name!r}")
        listed.setdefault(name, QueueStats(name, 0, 0, 0, 0, 0, None))
    return StoreMetrics(
        queues=tuple(listed[name] for name in sorted(listed)),
        streams=tuple(streams),
        schedules=tuple(schedules),
        read_s=read_s,
    )


def escape_label_value(text: str) -> str:
    """A label value as the text format writes it: ``\\``, ``"`` and line feeds escaped."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """A HELP text as the text format writes it: ``\\`` and line feeds escaped."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _value(value: float | int) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))
