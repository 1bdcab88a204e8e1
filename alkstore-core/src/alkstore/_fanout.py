"""The receivers of one store's wakes, by key: what every engine's watcher or
listener fans its commits out to."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from alkstore import _fork
from alkstore._errors import Closed, Database
from alkstore._names import RESERVED_PREFIX
from alkstore._receivers import BufferedWakeReceiver
from alkstore._values import Wake

__all__ = ["WakeFanout"]


class WakeFanout:
    """A thread-safe registry of wake receivers by key, and the fan-out to them.

    An engine makes one per store and feeds it from wherever it learns of
    commits (a watcher thread, a LISTEN connection, its own commit path):
    :meth:`deliver` hands one ``Wake(key)`` to every receiver of each key.
    When the engine can deliver no more, :meth:`fail` closes every receiver —
    failure is an event, never silence — and later subscribes raise
    :class:`~alkstore.Database` naming the cause; :meth:`close` does the same
    when the store closes, and later subscribes raise :class:`~alkstore.Closed`.

    With ``coalesce`` a receiver drops a wake equal to one it holds pending
    (engines whose wakes may coalesce); without it every delivery queues,
    except to receivers of alkstore's own keys (``RESERVED_PREFIX``), which
    always coalesce: those wakes only say "look again".
    ``on_unsubscribe(key)`` runs after the owner of a receiver of ``key``
    closed it (not when :meth:`fail` or :meth:`close` did), outside the
    fan-out's lock: an engine that listens per key (``LISTEN``) stops there
    once :meth:`has_receivers` says the key has none left.
    """

    def __init__(
        self,
        *,
        coalesce: bool,
        on_unsubscribe: Callable[[str], None] | None = None,
    ) -> None:
        self._coalesce = coalesce
        self._on_unsubscribe = on_unsubscribe
        self._lock = threading.Lock()
        self._receivers: dict[str, set[BufferedWakeReceiver]] = {}
        self._closed = False
        self._failure: Database | None = None
        _fork.track(self)

    @property
    def error(self) -> Database | None:
        """Why the wake path failed (see :meth:`fail`), or None."""
        return self._failure

    def subscribe(self, key: str) -> BufferedWakeReceiver:
        """A new receiver of every wake of ``key`` delivered from now on.

        Raises:
            Database: the wake path failed (the cause chained).
            Closed: the fan-out was closed with its store.
        """
        # The wakes of alkstore's own keys (a queue's, a stream's) say "look again",
        # however many came: a receiver kept across a worker's parks holds one.
        coalesce = self._coalesce or key.startswith(RESERVED_PREFIX)
        receiver = BufferedWakeReceiver(key, coalesce=coalesce, on_close=self._forget)
        with self._lock:
            self._check_usable()
            self._receivers.setdefault(key, set()).add(receiver)
        return receiver

    def check_usable(self) -> None:
        """Raise what :meth:`subscribe` would raise now, if anything."""
        with self._lock:
            self._check_usable()

    def deliver(self, keys: Iterable[str]) -> None:
        """Hand ``Wake(key)`` to every receiver of each key in ``keys``."""
        with self._lock:
            targets = [(key, r) for key in keys for r in self._receivers.get(key, ())]
        for key, receiver in targets:
            receiver.deliver(Wake(key))

    def deliver_to_all(self, wake: Wake) -> None:
        """Hand ``wake`` to every receiver, whatever its key (a reconnect wake)."""
        for receiver in self._all():
            receiver.deliver(wake)

    def keys(self) -> set[str]:
        """The keys that have at least one open receiver."""
        with self._lock:
            return set(self._receivers)

    def has_receivers(self, key: str) -> bool:
        """Whether ``key`` has at least one open receiver."""
        with self._lock:
            return key in self._receivers

    def fail(self, error: BaseException, what: str) -> None:
        """The wake path died: close every receiver; later subscribes raise
        ``Database(what)`` with ``error`` chained, a permanent error (only
        reopening the store brings wakes back). Only the first failure counts."""
        failure = Database(what)
        failure.__cause__ = error
        with self._lock:
            if self._failure is None and not self._closed:
                self._failure = failure
        self._close_all()

    def close(self) -> None:
        """Close every receiver; later subscribes raise ``Closed``. Idempotent."""
        with self._lock:
            self._closed = True
        self._close_all()

    def _disown_after_fork(self, parent_pid: int) -> None:
        """In a forked child (``_fork``): every receiver closed, as with the store,
        but no ``on_unsubscribe`` (an ``UNLISTEN`` on the parent's connection)."""
        self._lock = threading.Lock()  # the feeding thread may have held it
        self._closed = True
        receivers = [r for group in self._receivers.values() for r in group]
        self._receivers = {}
        for receiver in receivers:
            receiver.abandon()

    def __repr__(self) -> str:
        with self._lock:
            count = sum(len(group) for group in self._receivers.values())
            keys = len(self._receivers)
        state = "failed" if self._failure else "closed" if self._closed else "open"
        return f"<WakeFanout {count} receivers of {keys} keys, {state}>"

    def _check_usable(self) -> None:
        # Called with the lock held.
        if self._failure is not None:
            refused = Database(str(self._failure))
            refused.permanent = True
            raise refused from self._failure.__cause__
        if self._closed:
            raise Closed("the store is closed")

    def _all(self) -> list[BufferedWakeReceiver]:
        with self._lock:
            return [r for group in self._receivers.values() for r in group]

    def _close_all(self) -> None:
        with self._lock:
            receivers = [r for group in self._receivers.values() for r in group]
            self._receivers.clear()
        for receiver in receivers:
            receiver.close()  # _forget finds it gone: no on_unsubscribe

    def _forget(self, receiver: BufferedWakeReceiver) -> None:
        key = receiver.channel
        with self._lock:
            group = self._receivers.get(key)
            if group is None or receiver not in group:
                return  # closed by fail() or close(), which forgot it first
            group.discard(receiver)
            if not group:
                del self._receivers[key]
        if self._on_unsubscribe is not None:
            self._on_unsubscribe(key)
