"""The sync API over the async one: how ``--alkstore-api=async`` runs the suite.

The suite's tests are written once, against the sync API. In async mode each
store a test gets is a :class:`StoreFacade`: it has the sync ``Store`` API,
and every call runs the matching PUBLIC method of an ``alkstore.AsyncStore``
(or of what that handed out: ``AsyncQueue``, ``AsyncJob``, ``AsyncStream``,
``AsyncEventReceiver``, ``AsyncTxHandle``, ``AsyncLock``, ``AsyncInspector``,
``AsyncOutbox``) on the test's event loop, a thread of its own, and wraps
what comes back in the matching facade. So what the tests exercise is the
async layer itself: its argument checks, its errors, the engine's async
hooks. An error crosses unchanged: the very exception object, so the same
type and message. Values (``JobInfo``, ``StreamEvent``, ``Schedule``, ...)
and wake receivers are the same in both APIs and pass through as they are.

Context managers map to their async twins (``with store.transaction()`` runs
``async with store.transaction()``), and ``run_schedules(threading.Event)``
runs ``run_schedules(asyncio.Event)`` with the one mirroring the other.
A facade's async methods (``recv_async``, ``async for``) may be awaited on any
loop: they await the async API on the test's loop and hand the outcome over.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from alkstore_contract_tests.suite._loop import LoopThread, mirror_stop

if TYPE_CHECKING:
    from alkstore import (
        AsyncEventReceiver,
        AsyncInspector,
        AsyncJob,
        AsyncLock,
        AsyncOutbox,
        AsyncQueue,
        AsyncStore,
        AsyncStream,
        AsyncTxHandle,
        EnqueueOpts,
        JobInfo,
        JobState,
        LockInfo,
        QueueOpts,
        QueueStats,
        Schedule,
        ScheduleOpts,
        StreamEvent,
        StreamStats,
        TxState,
        WakeReceiver,
    )
    from alkstore.engine import Capabilities

__all__ = [
    "ConnectionFacade",
    "EventReceiverFacade",
    "Facade",
    "InspectorFacade",
    "JobFacade",
    "LockFacade",
    "OutboxFacade",
    "QueueFacade",
    "StoreFacade",
    "StreamFacade",
    "TxFacade",
    "native",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
W = TypeVar("W")


class Facade:
    """A sync view of one object of the async API, on the loop that owns it."""

    def __init__(self, inner: Any, loop: LoopThread) -> None:
        self._inner = inner
        self._loop = loop

    @property
    def async_object(self) -> Any:
        """The object of the async API this facade calls."""
        return self._inner

    @property
    def loop(self) -> LoopThread:
        """The event loop the async object lives on."""
        return self._loop

    def __repr__(self) -> str:
        return f"<sync facade of {self._inner!r}>"


def native(value: T) -> T:
    """The async API's own object behind ``value`` if it is a facade, else ``value``."""
    return value.async_object if isinstance(value, Facade) else value


class _AsyncContext(Protocol[T_co]):
    async def __aenter__(self) -> T_co: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None: ...


class _Entered(Generic[T, W]):
    """``with`` over an async context manager: enter and exit run on the loop."""

    def __init__(self, loop: LoopThread, manager: _AsyncContext[T], wrap: Callable[[T], W]) -> None:
        self._loop = loop
        self._manager = manager
        self._wrap = wrap

    def __enter__(self) -> W:
        return self._wrap(self._loop.run(self._manager.__aenter__))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        return bool(self._loop.run(lambda: self._manager.__aexit__(exc_type, exc, tb)))


class StoreFacade(Facade):
    """The sync ``Store`` API over an ``AsyncStore``."""

    _inner: AsyncStore

    @property
    def async_store(self) -> AsyncStore:
        return self._inner

    @property
    def location(self) -> str:
        return self._inner.location

    @property
    def capabilities(self) -> Capabilities:
        return self._inner.capabilities

    @property
    def closed(self) -> bool:
        return self._inner.closed

    def close(self) -> None:
        self._loop.run(self._inner.close)

    def __enter__(self) -> StoreFacade:
        self._loop.run(self._inner.__aenter__)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._loop.run(lambda: self._inner.__aexit__(exc_type, exc, tb))

    def notify(self, channel: str, payload: object) -> None:
        self._loop.run(lambda: self._inner.notify(channel, payload))

    def listen(self, channel: str) -> WakeReceiver:
        return self._loop.run(lambda: self._inner.listen(channel))

    def stream(self, name: str) -> StreamFacade:
        return StreamFacade(self._loop.call(lambda: self._inner.stream(name)), self._loop)

    def queue(self, name: str, opts: QueueOpts | None = None) -> QueueFacade:
        return QueueFacade(self._loop.call(lambda: self._inner.queue(name, opts)), self._loop)

    def outbox(self, name: str) -> OutboxFacade:
        return OutboxFacade(self._loop.call(lambda: self._inner.outbox(name)), self._loop)

    def try_lock(self, name: str, owner: str, ttl_s: float) -> LockFacade | None:
        lock = self._loop.run(lambda: self._inner.try_lock(name, owner, ttl_s))
        return None if lock is None else LockFacade(lock, self._loop)

    def schedule(
        self,
        name: str,
        spec: str,
        queue: str,
        payload: object,
        opts: ScheduleOpts | None = None,
    ) -> Schedule:
        return self._loop.run(lambda: self._inner.schedule(name, spec, queue, payload, opts))

    def unschedule(self, name: str) -> bool:
        return self._loop.run(lambda: self._inner.unschedule(name))

    def run_schedules(self, stop: Any, *, owner: str | None = None) -> None:
        """``run_schedules`` until the thread-side ``stop`` (a ``threading.Event``) is set."""

        def run(halt: asyncio.Event) -> Awaitable[None]:
            return self._inner.run_schedules(halt, owner=owner)

        self._loop.run(lambda: mirror_stop(stop, run))

    def begin_tx(self) -> TxFacade:
        return TxFacade(self._loop.run(self._inner.begin_tx), self._loop)

    def transaction(self) -> _Entered[AsyncTxHandle, TxFacade]:
        manager = self._loop.call(self._inner.transaction)
        return _Entered(self._loop, manager, lambda tx: TxFacade(tx, self._loop))

    def adopt_tx(self, connection: Any) -> TxFacade:
        given = connection if isinstance(connection, ConnectionFacade) else None
        tx = self._loop.run(lambda: self._inner.adopt_tx(native(connection)))
        return TxFacade(tx, self._loop, given)

    def inspect(self) -> InspectorFacade:
        return InspectorFacade(self._loop.call(self._inner.inspect), self._loop)


class QueueFacade(Facade):
    """The sync ``Queue`` API over an ``AsyncQueue``."""

    _inner: AsyncQueue

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def opts(self) -> QueueOpts:
        return self._inner.opts

    def enqueue(self, payload: object, opts: EnqueueOpts | None = None) -> int:
        return self._loop.run(lambda: self._inner.enqueue(payload, opts))

    def claim_one(self, worker_id: str) -> JobFacade | None:
        job = self._loop.run(lambda: self._inner.claim_one(worker_id))
        return None if job is None else JobFacade(job, self._loop)

    def claim_batch(self, worker_id: str, n: int) -> list[JobFacade]:
        jobs = self._loop.run(lambda: self._inner.claim_batch(worker_id, n))
        return [JobFacade(job, self._loop) for job in jobs]

    def ack_batch(self, job_ids: Iterable[Any], worker_id: str) -> int:
        given = [native(job) for job in job_ids]
        return self._loop.run(lambda: self._inner.ack_batch(given, worker_id))

    def cancel(self, job_id: int) -> bool:
        return self._loop.run(lambda: self._inner.cancel(job_id))

    def get_job(self, job_id: int) -> JobInfo | None:
        return self._loop.run(lambda: self._inner.get_job(job_id))

    def sweep_expired(self) -> int:
        return self._loop.run(self._inner.sweep_expired)

    def requeue_dead(
        self, job_ids: Iterable[int] | None = None, *, reset_attempts: bool = True
    ) -> int:
        return self._loop.run(
            lambda: self._inner.requeue_dead(job_ids, reset_attempts=reset_attempts)
        )

    def purge_dead(self, older_than_s: float | None = None) -> int:
        return self._loop.run(lambda: self._inner.purge_dead(older_than_s))

    def wait(self, timeout: float | None) -> bool:
        return self._loop.run(lambda: self._inner.wait(timeout))


class JobFacade(Facade):
    """The sync ``Job`` API over an ``AsyncJob``: its fields, read live, and its settling calls."""

    _inner: AsyncJob

    @property
    def id(self) -> int:
        return self._inner.id

    @property
    def queue(self) -> str:
        return self._inner.queue

    @property
    def payload(self) -> Any:
        return self._inner.payload

    @property
    def priority(self) -> int:
        return self._inner.priority

    @property
    def attempts(self) -> int:
        return self._inner.attempts

    @property
    def max_attempts(self) -> int:
        return self._inner.max_attempts

    @property
    def run_at(self) -> float:
        return self._inner.run_at

    @property
    def deadline(self) -> float:
        return self._inner.deadline

    @property
    def worker_id(self) -> str:
        return self._inner.worker_id

    @property
    def visibility_timeout_s(self) -> float | None:
        return self._inner.visibility_timeout_s

    @property
    def key(self) -> str | None:
        return self._inner.key

    @property
    def traceparent(self) -> str | None:
        return self._inner.traceparent

    def payload_as(self, kind: type[T]) -> T:
        return self._inner.payload_as(kind)

    def ack(self) -> bool:
        return self._loop.run(self._inner.ack)

    def retry(self, error: str | BaseException, delay_s: float | None = None) -> bool:
        return self._loop.run(lambda: self._inner.retry(error, delay_s))

    def fail(self, error: str | BaseException) -> bool:
        return self._loop.run(lambda: self._inner.fail(error))

    def heartbeat(self, extend_s: float) -> bool:
        return self._loop.run(lambda: self._inner.heartbeat(extend_s))

    def release(self) -> bool:
        return self._loop.run(self._inner.release)


class StreamFacade(Facade):
    """The sync ``Stream`` API over an ``AsyncStream``."""

    _inner: AsyncStream

    @property
    def name(self) -> str:
        return self._inner.name

    def publish(self, payload: object) -> int:
        return self._loop.run(lambda: self._inner.publish(payload))

    def publish_with_key(self, key: str, payload: object) -> int:
        return self._loop.run(lambda: self._inner.publish_with_key(key, payload))

    def read_since(self, offset: int, limit: int = 1000) -> list[StreamEvent]:
        return self._loop.run(lambda: self._inner.read_since(offset, limit))

    def read_from_consumer(self, consumer: str, limit: int = 1000) -> list[StreamEvent]:
        return self._loop.run(lambda: self._inner.read_from_consumer(consumer, limit))

    def get_offset(self, consumer: str) -> int:
        return self._loop.run(lambda: self._inner.get_offset(consumer))

    def save_offset(self, consumer: str, offset: int) -> bool:
        return self._loop.run(lambda: self._inner.save_offset(consumer, offset))

    def trim(self, up_to: int) -> int:
        return self._loop.run(lambda: self._inner.trim(up_to))

    def retain(
        self, *, max_age_s: float | None = None, keep_last: int | None = None, force: bool = False
    ) -> int:
        return self._loop.run(
            lambda: self._inner.retain(max_age_s=max_age_s, keep_last=keep_last, force=force)
        )

    def trimmed_through(self) -> int:
        return self._loop.run(self._inner.trimmed_through)

    def subscribe(self, consumer: str) -> EventReceiverFacade:
        receiver = self._loop.run(lambda: self._inner.subscribe(consumer))
        return EventReceiverFacade(receiver, self._loop)


class EventReceiverFacade(Facade):
    """The sync ``EventReceiver`` API over an ``AsyncEventReceiver``: ``recv`` and
    iteration await ``recv_async`` on the loop; ``recv_async`` and ``async for``
    may be awaited on any loop."""

    _inner: AsyncEventReceiver

    @property
    def consumer(self) -> str:
        return self._inner.consumer

    @property
    def closed(self) -> bool:
        return self._inner.closed

    @property
    def last_delivered(self) -> int | None:
        return self._inner.last_delivered

    def recv(self, timeout: float | None = None) -> StreamEvent | None:
        return self._loop.run(lambda: self._inner.recv_async(timeout))

    async def recv_async(self, timeout: float | None = None) -> StreamEvent | None:
        return await asyncio.wrap_future(self._loop.submit(lambda: self._inner.recv_async(timeout)))

    def save_offset(self, offset: int | None = None) -> bool:
        return self._loop.run(lambda: self._inner.save_offset(offset))

    def close(self) -> None:
        self._loop.call(self._inner.close)

    def __iter__(self) -> Iterator[StreamEvent]:
        while (event := self.recv()) is not None:
            yield event

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        while (event := await self.recv_async()) is not None:
            yield event

    def __enter__(self) -> EventReceiverFacade:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class TxFacade(Facade):
    """The sync ``TxHandle`` API over an ``AsyncTxHandle``."""

    _inner: AsyncTxHandle

    def __init__(
        self, inner: AsyncTxHandle, loop: LoopThread, adopted: ConnectionFacade | None = None
    ) -> None:
        super().__init__(inner, loop)
        self._adopted = adopted

    @property
    def state(self) -> TxState:
        return self._inner.state

    @property
    def active(self) -> bool:
        return self._inner.active

    @property
    def connection(self) -> Any:
        """The driver connection; the caller's own facade of it when it adopted one."""
        connection = self._inner.connection
        if self._adopted is not None and connection is self._adopted.connection:
            return self._adopted
        return connection

    def enqueue_tx(self, queue: str, opts: EnqueueOpts | None, payload: object) -> int:
        return self._loop.run(lambda: self._inner.enqueue_tx(queue, opts, payload))

    def publish_tx(self, stream: str, payload: object) -> int:
        return self._loop.run(lambda: self._inner.publish_tx(stream, payload))

    def publish_with_key_tx(self, stream: str, key: str, payload: object) -> int:
        return self._loop.run(lambda: self._inner.publish_with_key_tx(stream, key, payload))

    def notify_tx(self, channel: str, payload: object) -> None:
        self._loop.run(lambda: self._inner.notify_tx(channel, payload))

    def save_offset_tx(self, stream: str, consumer: str, offset: int) -> bool:
        return self._loop.run(lambda: self._inner.save_offset_tx(stream, consumer, offset))

    def outbox_enqueue_tx(self, outbox: str, opts: EnqueueOpts | None, payload: object) -> int:
        return self._loop.run(lambda: self._inner.outbox_enqueue_tx(outbox, opts, payload))

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._loop.run(lambda: self._inner.execute(sql, params))

    def commit(self) -> None:
        self._loop.run(self._inner.commit)

    def rollback(self) -> None:
        self._loop.run(self._inner.rollback)

    def __enter__(self) -> TxFacade:
        self._loop.run(self._inner.__aenter__)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._loop.run(lambda: self._inner.__aexit__(exc_type, exc, tb))


class LockFacade(Facade):
    """The sync ``Lock`` API over an ``AsyncLock``."""

    _inner: AsyncLock

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def owner(self) -> str:
        return self._inner.owner

    @property
    def ttl_s(self) -> float:
        return self._inner.ttl_s

    def renew(self, ttl_s: float | None = None) -> bool:
        return self._loop.run(lambda: self._inner.renew(ttl_s))

    def release(self) -> bool:
        return self._loop.run(self._inner.release)

    def __enter__(self) -> LockFacade:
        self._loop.run(self._inner.__aenter__)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._loop.run(lambda: self._inner.__aexit__(exc_type, exc, tb))


class InspectorFacade(Facade):
    """The sync ``Inspector`` API over an ``AsyncInspector``."""

    _inner: AsyncInspector

    def queues(self) -> list[QueueStats]:
        return self._loop.run(self._inner.queues)

    def jobs(
        self,
        queue: str,
        state: JobState | None = None,
        *,
        limit: int = 100,
        after: int | None = None,
    ) -> list[JobInfo]:
        return self._loop.run(lambda: self._inner.jobs(queue, state, limit=limit, after=after))

    def streams(self) -> list[StreamStats]:
        return self._loop.run(self._inner.streams)

    def locks(self) -> list[LockInfo]:
        return self._loop.run(self._inner.locks)

    def schedules(self) -> list[Schedule]:
        return self._loop.run(self._inner.schedules)


class OutboxFacade(Facade):
    """The sync ``Outbox`` API over an ``AsyncOutbox``."""

    _inner: AsyncOutbox

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def queue_name(self) -> str:
        return self._inner.queue_name

    def enqueue(self, payload: object, opts: EnqueueOpts | None = None) -> int:
        return self._loop.run(lambda: self._inner.enqueue(payload, opts))

    def run_once(self, worker_id: str, deliver: Callable[[Any], None]) -> bool:
        return self._loop.run(lambda: self._inner.run_once(worker_id, deliver))


class ConnectionFacade(Facade):
    """A caller's driver connection, made and used on the loop (an async driver's
    connection belongs to its loop; SQLite's, to the thread that made it):
    ``commit``, ``rollback`` and ``close`` run there, awaited if they are coroutines."""

    @property
    def connection(self) -> Any:
        return self._inner

    def commit(self) -> None:
        self._loop.settle(self._inner.commit)

    def rollback(self) -> None:
        self._loop.settle(self._inner.rollback)

    def close(self) -> None:
        self._loop.settle(self._inner.close)
