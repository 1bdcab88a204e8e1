"""Named locks: mutual exclusion bounded by a TTL."""

from __future__ import annotations

import abc
from types import TracebackType
from typing import TYPE_CHECKING

from alkstore._options import check_duration

if TYPE_CHECKING:
    from alkstore._store import Store

__all__ = ["Lock"]


class Lock(abc.ABC):
    """A held named lock, as ``store.try_lock`` returned it.

    Exclusion lasts until ``release`` or until the TTL runs out without a
    ``renew``. After expiry anyone may acquire the lock: exclusion lapses
    silently, and this handle's ``renew`` and ``release`` return False.
    Used as a context manager, the lock is released on exit.
    """

    def __init__(self, store: Store, name: str, owner: str, ttl_s: float) -> None:
        self._store = store
        self.name = name
        """The lock's name."""
        self.owner = owner
        """Who holds it when held through this handle: the owner given to ``store.lock``."""
        self.ttl_s = ttl_s
        """The TTL of the latest acquire or renew."""

    def renew(self, ttl_s: float | None = None) -> bool:
        """Extend the lock to ``now + ttl_s`` (default: the current TTL).

        False, and nothing changes, once the lock was lost (expired and
        possibly taken by another owner, or released).
        """
        self._store._check_open()
        seconds = self.ttl_s if ttl_s is None else check_duration(ttl_s, "ttl_s", zero_ok=False)
        renewed = self._renew(seconds)
        if renewed:
            self.ttl_s = seconds
        return renewed

    def release(self) -> bool:
        """Release the lock; False if this owner no longer held it."""
        self._store._check_open()
        return self._release()

    def __enter__(self) -> Lock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._store.closed:
            self.release()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} owner={self.owner!r} ttl_s={self.ttl_s}>"

    @abc.abstractmethod
    def _renew(self, ttl_s: float) -> bool:
        """Set the expiry to ``now + ttl_s`` if this owner still holds the lock unexpired."""

    @abc.abstractmethod
    def _release(self) -> bool:
        """Delete the lock row if this owner holds it; True if it did."""
