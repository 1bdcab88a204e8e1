"""Whether a path still leads to the database file a store opened.

A file deleted, moved away or replaced under an open store (a restore from
backup swaps it) goes on serving the connections that have it open: what
they write then reaches no other process, and is gone with the last of
them. The store looks (:class:`FileWatch`) and refuses to go on.
"""

from __future__ import annotations

import math
import os
import time

from alkstore import Database

__all__ = ["FileChanged", "FileWatch", "Identity", "check_identity", "identity_of"]

Identity = tuple[int, int]
"""A file's ``(device, inode)``."""

LOOK_EVERY_S = 0.1
"""How long a store goes between two looks at its path (a look is a stat,
about as long as a short claim: not one per call)."""


class FileChanged(Database):
    """The database file was deleted or replaced under the open store."""

    permanent = True  # no retry reaches the new file: the store must be reopened

    def __init__(self, reason: str, consequence: str) -> None:
        super().__init__(f"{reason}; {consequence}: reopen the store")
        self.reason = reason
        """What became of the file."""


_OLD_FILE_READ = "the store still reads the old one"


def identity_of(path: str) -> Identity:
    """The identity of the file at ``path``.

    Raises:
        FileChanged: there is no file at ``path`` any more.
    """
    try:
        status = os.stat(path)
    except FileNotFoundError:
        reason = f"{path!r} is gone (deleted or moved away) while the store had it open"
        raise FileChanged(reason, _OLD_FILE_READ) from None
    return status.st_dev, status.st_ino


def check_identity(path: str, identity: Identity) -> None:
    """Raise :class:`FileChanged` unless ``path`` still leads to the file of ``identity``."""
    if identity_of(path) != identity:
        reason = (
            f"{path!r} was replaced by another file while the store had it open "
            "(as a restore from backup does)"
        )
        raise FileChanged(reason, _OLD_FILE_READ)


class FileWatch:
    """The identity a store opened its file with, looked at again at most every
    :data:`LOOK_EVERY_S`; once it changed, every :meth:`check` raises."""

    def __init__(self, path: str) -> None:
        self._path = path
        self.identity = identity_of(path)
        """The file's identity when the store opened it."""
        self._next_look = time.monotonic() + LOOK_EVERY_S
        self._changed: str | None = None

    def check(self) -> None:
        """Raise :class:`FileChanged` once the file is known to have changed,
        looking first when the last look is old enough (called on every lease)."""
        if time.monotonic() >= self._next_look:
            self.look()

    def changed(self, error: FileChanged) -> None:
        """Record that the file changed (seen here, or by the wake watcher)."""
        if self._changed is None:
            self._changed = error.reason
        self._next_look = -math.inf  # every check raises from now on

    def look(self) -> None:
        """Look now (as when a connection to the path failed): raise
        :class:`FileChanged` if the file changed."""
        if self._changed is None:
            self._next_look = time.monotonic() + LOOK_EVERY_S
            try:
                check_identity(self._path, self.identity)
                return
            except FileChanged as changed:
                self.changed(changed)
            except OSError:  # cannot look (a folder made unreadable): the file may be fine
                return
        assert self._changed is not None
        raise FileChanged(self._changed, "what this store writes would reach no other process")
