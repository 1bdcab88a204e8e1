"""The engine API: what an engine implements and what core gives it.

An engine is a distribution that registers a subclass of :class:`Engine` under
the ``alkstore.engines`` entry-point group::

    [project.entry-points."alkstore.engines"]
    myengine = "alkstore_myengine:MyEngine"

``alkstore.open("myengine://...")`` then instantiates ``MyEngine`` once and
calls :meth:`Engine.open` with the target string as the caller gave it.

The engine's ``Store``, ``Queue``, ``Stream``, ``Lock``, ``TxHandle`` and
``Inspector`` subclasses implement the ``_``-prefixed hooks of those classes:
storage primitives. The public methods around the hooks are core's: they
check names, options and payloads and raise the contract's errors before a
hook runs, so every engine rejects bad input identically. Hooks receive
checked names, encoded JSON text and resolved :class:`JobStamp` values.
Everything that is the same on every engine is core's too: ``Queue.wait``,
the scheduler's leadership and fire loop, the claim order, the wake keys and
the fan-out to receivers (:class:`WakeFanout`, :class:`PollingWatcher`).

The engine declares the contract version it was written for
(``Engine.contract_version``); discovery refuses one this core cannot drive
(see :data:`CONTRACT_VERSION`).

To prove conformance, an engine also provides a :class:`TestProvider` (from
:meth:`Engine.test_provider`) that the ``alkstore-contract-tests`` suite uses
to make isolated stores. See ``docs/engine-authors.md``.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from alkstore._async_job import AsyncJob
from alkstore._async_open import open_offloaded
from alkstore._async_queue import AsyncQueue
from alkstore._async_store import AsyncStore
from alkstore._async_stream import AsyncStream
from alkstore._async_tx import AsyncTxHandle
from alkstore._backoff import backoff_ceiling
from alkstore._call_deadline import wait_budget
from alkstore._capabilities import Capabilities
from alkstore._codec import decode
from alkstore._commit_cursor import CommitCursor
from alkstore._contract import CONTRACT_VERSION
from alkstore._discovery import LIBPQ_KEYWORDS, load_engine, redact
from alkstore._engine_settings import settings_from_options
from alkstore._event_rows import stream_events
from alkstore._every import PlacedSchedule, place_schedule
from alkstore._fanout import WakeFanout
from alkstore._inspect import Inspector
from alkstore._job import Job
from alkstore._lock import Lock
from alkstore._names import SCHEDULES_WAKE_KEY, queue_wake_key, stream_wake_key
from alkstore._offload import WouldWait
from alkstore._polling import PollingWatcher, WakeSource
from alkstore._queue import EXPIRED, LAPSED_ON_LAST_ATTEMPT, Queue
from alkstore._receivers import BufferedWakeReceiver, WakeReceiver
from alkstore._scheduler import DueSchedule, DueSchedules, Fired
from alkstore._stamp import JobStamp
from alkstore._store import Store
from alkstore._stream import Stream, TrimRule, offset_past_head
from alkstore._translate import DriverErrors
from alkstore._tx import Params, TxHandle

__all__ = [
    "CONTRACT_VERSION",
    "EXPIRED",
    "LAPSED_ON_LAST_ATTEMPT",
    "LIBPQ_KEYWORDS",
    "SCHEDULES_WAKE_KEY",
    "AsyncJob",
    "AsyncQueue",
    "AsyncStore",
    "AsyncStream",
    "AsyncTxHandle",
    "BufferedWakeReceiver",
    "Capabilities",
    "CommitCursor",
    "DriverErrors",
    "DueSchedule",
    "DueSchedules",
    "Engine",
    "Fired",
    "Inspector",
    "Job",
    "JobStamp",
    "Lock",
    "Params",
    "PlacedSchedule",
    "PollingWatcher",
    "Queue",
    "Store",
    "StoreTarget",
    "Stream",
    "TestProvider",
    "TrimRule",
    "TxHandle",
    "WakeFanout",
    "WakeReceiver",
    "WakeSource",
    "WouldWait",
    "backoff_ceiling",
    "decode",
    "load_engine",
    "offset_past_head",
    "place_schedule",
    "queue_wake_key",
    "redact",
    "settings_from_options",
    "stream_events",
    "stream_wake_key",
    "wait_budget",
]


class Engine(abc.ABC):
    """An installed storage engine; core instantiates it once, with no arguments.

    Subclasses set ``name`` (the entry-point name), ``schemes`` (the URL
    schemes they serve), ``contract_version`` and ``capabilities``, and
    implement :meth:`open`.
    Importing the engine's module must be cheap: defer heavy driver imports
    to :meth:`open`.
    """

    name: ClassVar[str]
    """The engine's name, equal to its entry-point name."""
    schemes: ClassVar[tuple[str, ...]]
    """URL schemes this engine serves, e.g. ``("postgres", "postgresql")``."""
    contract_version: ClassVar[str]
    """The engine contract version (``"MAJOR.MINOR"``) the engine was written for:
    discovery refuses it unless the major equals ``CONTRACT_VERSION``'s and the
    minor is not newer."""
    capabilities: ClassVar[Capabilities] = Capabilities()
    """The asymmetries the contract allows this engine, declared once: :meth:`open`
    passes them to its ``Store``."""

    @abc.abstractmethod
    def open(self, target: str, **options: Any) -> Store:
        """Open the store at ``target``, exactly as the caller wrote it.

        ``options`` are the keyword arguments of ``alkstore.open``; an engine
        may also read options from a URL's query string. Unknown options must
        raise ``TypeError`` (unknown name) or ``ValueError`` (bad value)
        naming the option. Failure to reach the storage raises
        :class:`~alkstore.Database` with a message that never shows a password.
        """

    async def open_async(self, target: str, **options: Any) -> AsyncStore:
        """Open the store at ``target`` for asyncio code (``alkstore.open_async``).

        By default the sync store :meth:`open` returns is opened on a thread
        and the async API runs its hooks on a small pool of threads. A native
        engine overrides this to return its own :class:`AsyncStore`, taking the
        same ``options`` and raising the same errors as :meth:`open`.
        """
        return await open_offloaded(self.open, target, options)

    def test_provider(self, options: Mapping[str, str]) -> TestProvider:
        """Return the provider the contract suite uses to make isolated stores.

        ``options`` are the suite's ``--alkstore-option KEY=VALUE`` pairs
        (e.g. a DSN). Import test-only code inside this method, not at module
        level, so production imports stay light.
        """
        raise NotImplementedError(
            f"the alkstore engine {self.name!r} provides no test provider, "
            "so the contract suite cannot run against it"
        )

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} name={self.name!r} schemes={self.schemes!r} "
            f"contract={getattr(self, 'contract_version', None)!r}>"
        )


@dataclass(frozen=True, slots=True)
class StoreTarget:
    """How to open one isolated store: ``alkstore.open(target, **options)``.

    ``options`` must be JSON values, so another process can open the same
    storage (the contract suite's multi-process tests do).
    """

    target: str
    """The target to give ``alkstore.open``."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The options to give it, JSON values only."""


class TestProvider(abc.ABC):
    """How the contract suite gets fresh, isolated storage from an engine.

    The suite calls :meth:`create_target` for each test that needs a store,
    opens it (often several times, from threads and other processes, to act
    as peers), closes every store it opened, then calls :meth:`drop_target`.
    :meth:`close` runs once at the end of the session.
    """

    __test__ = False  # not a pytest test class, despite the name

    option_help: ClassVar[Mapping[str, str]] = {}
    """The ``--alkstore-option`` keys this provider understands, with help text."""

    def __init__(self, engine: Engine, options: Mapping[str, str]) -> None:
        unknown = sorted(set(options) - set(self.option_help))
        if unknown:
            known = ", ".join(sorted(self.option_help)) or "none"
            raise ValueError(
                f"the {engine.name!r} test provider has no option {', '.join(unknown)} "
                f"(it knows: {known})"
            )
        self.engine = engine
        """The engine this provider makes storage for."""
        self.options = dict(options)
        """The ``--alkstore-option`` values given, by key."""

    @abc.abstractmethod
    def create_target(self) -> StoreTarget:
        """Make new, empty storage that no other test shares, and say how to open it."""

    @abc.abstractmethod
    def drop_target(self, target: StoreTarget) -> None:
        """Remove the storage of ``target``; every store on it is closed by now."""

    def open_store(self, target: StoreTarget) -> Store:
        """Open a store on ``target``; each call is a separate peer on the same storage."""
        return self.engine.open(target.target, **target.options)

    def describe(self) -> str:
        """One line for the test report header, e.g. the server version."""
        return ""

    def close(self) -> None:  # noqa: B027 - most providers hold nothing
        """Release what the provider holds (e.g. stop a server it started)."""

    # What the suite needs beyond the contract. Each has a default that tells
    # the suite the provider cannot do it: the tests that need it are then
    # skipped with that reason in the report, never silently.

    scheduler_lease_s: ClassVar[float | None] = None
    """The scheduler leader lease (TTL) the provider's targets are opened with;
    the suite's scheduler tests need one of a second or less to stay fast."""

    speaks_sql: ClassVar[bool] = False
    """Whether ``tx.execute`` runs SQL (``SELECT :a, 'text'`` at least): the
    portable-parameter tests run only where it does."""

    def write_business_row(self, tx: TxHandle, key: str) -> None:
        """Write one business row identified by ``key`` with ``tx.execute``, in the
        engine's dialect. Make its table in :meth:`create_target`, never here: DDL
        inside the transaction commits it on some databases (MariaDB, MySQL)."""
        raise NotImplementedError("this provider cannot write business rows")

    def business_rows(self, store: Store) -> set[str]:
        """Return the keys of every committed business row."""
        raise NotImplementedError("this provider cannot read business rows")

    def expire_lock(self, target: StoreTarget, name: str) -> None:
        """Make the lock ``name`` expire now, behind its holder's back (a backdoor)."""
        raise NotImplementedError("this provider cannot expire locks behind the API")

    def shift_schedule(self, target: StoreTarget, name: str, by_s: float) -> None:
        """Move the schedule's next fire time ``by_s`` seconds (negative: into the
        past, as if its runner had been down), behind the API (a backdoor)."""
        raise NotImplementedError("this provider cannot move schedules behind the API")

    def break_wakes(self, store: Store) -> None:
        """Make ``store``'s wake path fail behind its back, as an outage or damaged
        storage would (a backdoor): e.g. kill the connection its listener holds, or
        damage what its watcher reads, so that the failure is lasting or forces a
        reconnect.

        The suite then checks that the failure is an event, never silence: an
        engine declaring ``reconnect_wakes`` sends its receivers
        ``Wake(alkstore.RECONNECT_CHANNEL)`` and wakes them again
        afterwards; any other engine closes them (``recv`` returns None,
        ``closed`` is True)."""
        raise NotImplementedError("this provider cannot break a store's wake path")

    def driver_connection(self, target: StoreTarget) -> Any:
        """A new driver connection to ``target``'s storage, of a kind ``adopt_tx``
        accepts, outside any transaction, with ``commit()``, ``rollback()`` and
        ``close()``; the suite closes it."""
        raise NotImplementedError("this provider cannot open driver connections to adopt")

    def other_storage_target(self, target: StoreTarget) -> StoreTarget:
        """A target on storage that ``target``'s connections do not reach (another
        file, another database), for the suite to check that ``adopt_tx`` refuses a
        connection to it. Create it as :meth:`create_target` does; the suite drops it."""
        raise NotImplementedError("this provider cannot make a target on other storage")

    def commit_behind_its_back(self, tx: TxHandle) -> None:
        """End ``tx``'s transaction through ``tx.execute`` in the engine's dialect
        (``COMMIT``), as a careless caller would; the engine may raise at once.

        The suite then checks that the handle refuses to go on: nothing written
        after it may escape into autocommit."""
        raise NotImplementedError("this provider cannot commit behind a handle's back")

    # The same backdoors for the suite's async mode (``--alkstore-api=async``),
    # given an AsyncStore. The suite also uses ``write_business_row_async(tx:
    # AsyncTxHandle, key)`` and ``async_driver_connection(target)`` where a
    # provider defines them (the engine authors' guide, section 10).

    async def business_rows_async(self, store: AsyncStore) -> set[str]:
        """:meth:`business_rows` as seen from an async store. By default, read
        through the store's sync companion, which sees every committed row."""
        companion = await store._companion()
        return await asyncio.to_thread(self.business_rows, companion)

    async def break_wakes_async(self, store: AsyncStore) -> None:
        """:meth:`break_wakes` of an async store's wake path. By default the
        companion's, which is the async store's unless the engine listens natively
        (overrides ``AsyncStore._watch``): such an engine implements this."""
        if type(store)._watch is not AsyncStore._watch:
            raise NotImplementedError(
                "the async store listens natively and this provider does not implement "
                "break_wakes_async(store) to break that wake path"
            )
        companion = await store._companion()
        await asyncio.to_thread(self.break_wakes, companion)
