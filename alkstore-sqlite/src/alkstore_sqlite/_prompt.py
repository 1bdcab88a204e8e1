"""The async API's fast path: hooks run on the event loop's thread when they need not wait.

Core's async store asks ``Store._without_waiting`` before it hands a call to
a thread: on a loaded machine the hand-off costs more than the SQLite
statement itself. A hook runs here only if it is one of the short ones
below, on the pool's prompt connection, which fails at once with
SQLITE_BUSY instead of waiting for the write lock and never checkpoints.
Each of these hooks writes with at most one statement, or in one ``BEGIN
IMMEDIATE`` transaction, so SQLITE_BUSY always comes before anything was
written: the refused call then runs on a thread, from the start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from alkstore import Database
from alkstore.engine import WouldWait
from alkstore_sqlite._errors import met_a_lock
from alkstore_sqlite._lock import SQLiteLock
from alkstore_sqlite._queue import SQLiteQueue
from alkstore_sqlite._stream import SQLiteStream

if TYPE_CHECKING:
    from alkstore_sqlite._pool import ConnectionPool

__all__ = ["CHECKPOINT_EVERY", "CHECKPOINT_ROWS", "PromptCalls"]

T = TypeVar("T")

CHECKPOINT_EVERY = 1000
"""After this many prompt writes, the next one is refused and asks the pool for
a checkpoint that restarts the WAL, which the thread the refused call goes to
runs first (the prompt connection never checkpoints: the loop's thread must
not copy pages or flush the disk). Until it ends, prompt writes are refused.
About SQLite's own cadence (a checkpoint per 1,000 WAL pages, three small
enqueues' worth each): a checkpoint costs a flush however few pages it
copies, so fewer, larger ones are cheaper."""
CHECKPOINT_ROWS = 2048
"""Likewise after prompt writes that changed this many rows (big batches fill
the WAL faster than many small writes)."""
CHECKPOINT_TEXT = 2**20
"""Likewise after prompt writes that carried this many characters of payloads
and names (big payloads fill it faster too)."""

_READS: frozenset[Callable[..., Any]] = frozenset({
    SQLiteQueue._until_ready, SQLiteQueue._get_job,
    SQLiteStream._read_since, SQLiteStream._get_offset,
})  # fmt: skip
_WRITES: frozenset[Callable[..., Any]] = frozenset({
    SQLiteQueue._enqueue, SQLiteQueue._claim, SQLiteQueue._ack_batch, SQLiteQueue._ack_job,
    SQLiteQueue._retry_job, SQLiteQueue._fail_job, SQLiteQueue._release_job,
    SQLiteQueue._heartbeat_job, SQLiteStream._publish, SQLiteStream._save_offset,
    SQLiteLock._renew, SQLiteLock._release,
})  # fmt: skip


class PromptCalls:
    """Runs a store's short hooks on the calling thread, or refuses them."""

    def __init__(self, pool: ConnectionPool, *, writes: bool) -> None:
        """``writes``: whether writes may run promptly (not when every commit
        flushes the disk, as with ``durability="full"``)."""
        self._pool = pool
        self._writes = writes
        self._writes_since_checkpoint = 0
        self._text_since_checkpoint = 0
        self._rows_at_checkpoint = 0  # the prompt connection's total_changes then

    def __repr__(self) -> str:
        return f"<PromptCalls writes={'on' if self._writes else 'off'}>"

    def run(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` on the prompt connection; ``WouldWait`` if it is not a
        short hook, or met a lock (having written nothing)."""
        hook = getattr(call, "__func__", None)
        writes = hook not in _READS
        if writes and (hook not in _WRITES or not self._writes):
            raise WouldWait
        with self._pool.prompt():  # from here, the store's close waits for us
            if writes:
                self._refuse_for_a_checkpoint(args)
            try:
                return call(*args)
            except Database as exc:
                if met_a_lock(exc.__cause__):
                    raise WouldWait from None
                raise

    def _refuse_for_a_checkpoint(self, args: tuple[Any, ...]) -> None:
        """Raise ``WouldWait`` when the prompt writes since the last refusal
        may have grown the WAL enough to checkpoint it."""
        if self._pool.checkpoint_pending:
            raise WouldWait
        self._writes_since_checkpoint += 1
        for arg in args:  # not sum() over a generator: this runs on every prompt write
            if type(arg) is str:
                self._text_since_checkpoint += len(arg)
        changes = self._pool.prompt_changes()
        rows = changes - self._rows_at_checkpoint
        if (
            self._writes_since_checkpoint > CHECKPOINT_EVERY
            or self._text_since_checkpoint > CHECKPOINT_TEXT
            or not 0 <= rows < CHECKPOINT_ROWS
        ):
            self._writes_since_checkpoint = self._text_since_checkpoint = 0
            self._rows_at_checkpoint = changes
            self._pool.want_checkpoint()
            raise WouldWait
