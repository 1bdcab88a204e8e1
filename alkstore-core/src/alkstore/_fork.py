"""A store belongs to the process that opened it.

After ``os.fork()`` the child holds copies of everything the parent's stores
hold: PostgreSQL sockets both processes would then talk over (each reading
the other's answers), SQLite handles whose locks the kernel gave the parent
alone (SQLite: never carry an open connection across a fork), and none of
the store's threads. The child may neither use those copies nor close them:
closing one ends the parent's session, and a rollback sent at the child's
exit would end the parent's transaction.

So in the child every inherited store is *disowned*, at once and without
I/O: marked closed (each call raises :class:`~alkstore.Closed` saying why),
its receivers closed, and kept referenced, so that nothing of it is closed
or finalized there. The child opens a store of its own.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol

__all__ = ["Inheritable", "track"]


class Inheritable(Protocol):
    """Something a forked child must disown (a store, a wake fan-out)."""

    def _disown_after_fork(self, parent_pid: int) -> None:
        """Stop being usable in this (child) process, without any I/O and
        without waiting on a lock another thread of the parent may have held."""


_live: weakref.WeakSet[Inheritable] = weakref.WeakSet()
_disowned: list[Inheritable] = []  # in a child: never collected, so never finalized


def track(thing: Inheritable) -> None:
    """Disown ``thing`` in any child this process forks from now on."""
    _live.add(thing)


def _disown_inherited() -> None:
    parent_pid = os.getppid()
    inherited = list(_live)
    _live.clear()
    _disowned.extend(inherited)
    for thing in inherited:
        thing._disown_after_fork(parent_pid)


if hasattr(os, "register_at_fork"):  # not on Windows, which cannot fork
    os.register_at_fork(after_in_child=_disown_inherited)
