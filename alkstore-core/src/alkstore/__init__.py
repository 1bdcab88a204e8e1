"""alkstore: coordination primitives inside the database you already have.

Notify/listen wakes, durable streams with consumer offsets, at-least-once job
queues, a transactional outbox, TTL named locks and a scheduler (intervals, and
cron in IANA time zones) — one API over SQLite and PostgreSQL::

    import alkstore

    with alkstore.open("app.db") as store:
        with store.transaction() as tx:
            tx.execute("INSERT INTO orders (id) VALUES (?)", (42,))
            tx.enqueue_tx("emails", None, {"order": 42})  # commits with the order

Engines are separate distributions found through entry points; see
:func:`open` and :func:`engines`. Engine authors start at :mod:`alkstore.engine`.
"""

from __future__ import annotations

from alkstore._async_inspect import AsyncInspector
from alkstore._async_job import AsyncJob
from alkstore._async_lock import AsyncLock
from alkstore._async_open import open_async
from alkstore._async_outbox import AsyncOutbox
from alkstore._async_queue import AsyncQueue
from alkstore._async_store import AsyncStore
from alkstore._async_stream import AsyncEventReceiver, AsyncStream
from alkstore._async_tx import AsyncTxHandle
from alkstore._codec import JSONValue
from alkstore._consumer import Consumer
from alkstore._discovery import EngineInfo, engines, open
from alkstore._errors import (
    Closed,
    Codec,
    Database,
    EngineNotFound,
    Error,
    InvalidName,
    InvalidSpec,
    LeadershipLost,
    PayloadTooLarge,
    ReservedName,
    StreamTrimmed,
)
from alkstore._inspect import ConsumerStats, Inspector, LockInfo, QueueStats, StreamStats
from alkstore._job import Job
from alkstore._lock import Lock
from alkstore._metrics import CONTENT_TYPE as PROMETHEUS_CONTENT_TYPE
from alkstore._metrics import prometheus_text, prometheus_text_async
from alkstore._names import (
    OUTBOX_QUEUE_PREFIX,
    RECONNECT_CHANNEL,
    RESERVED_PREFIX,
    SCHEDULER_LOCK,
)
from alkstore._options import EnqueueOpts, QueueOpts, ScheduleOpts
from alkstore._outbox import Outbox
from alkstore._queue import Queue
from alkstore._receivers import WakeReceiver
from alkstore._run_stats import RunStats
from alkstore._signals import stop_on_signals
from alkstore._store import Store
from alkstore._stream import EventReceiver, Stream
from alkstore._tx import TxHandle, TxState
from alkstore._values import JobInfo, JobState, Schedule, StreamEvent, Wake
from alkstore._worker import Worker

__all__ = [
    "OUTBOX_QUEUE_PREFIX",
    "PROMETHEUS_CONTENT_TYPE",
    "RECONNECT_CHANNEL",
    "RESERVED_PREFIX",
    "SCHEDULER_LOCK",
    "AsyncEventReceiver",
    "AsyncInspector",
    "AsyncJob",
    "AsyncLock",
    "AsyncOutbox",
    "AsyncQueue",
    "AsyncStore",
    "AsyncStream",
    "AsyncTxHandle",
    "Closed",
    "Codec",
    "Consumer",
    "ConsumerStats",
    "Database",
    "EngineInfo",
    "EngineNotFound",
    "EnqueueOpts",
    "Error",
    "EventReceiver",
    "Inspector",
    "InvalidName",
    "InvalidSpec",
    "JSONValue",
    "Job",
    "JobInfo",
    "JobState",
    "LeadershipLost",
    "Lock",
    "LockInfo",
    "Outbox",
    "PayloadTooLarge",
    "Queue",
    "QueueOpts",
    "QueueStats",
    "ReservedName",
    "RunStats",
    "Schedule",
    "ScheduleOpts",
    "Store",
    "Stream",
    "StreamEvent",
    "StreamStats",
    "StreamTrimmed",
    "TxHandle",
    "TxState",
    "Wake",
    "WakeReceiver",
    "Worker",
    "engines",
    "open",
    "open_async",
    "prometheus_text",
    "prometheus_text_async",
    "stop_on_signals",
]
