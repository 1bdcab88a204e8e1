"""What every store keeps, sync or async: where it lives, its engine's
capabilities, whether it is closed, and the queue opts declared in it."""

from __future__ import annotations

import threading
from typing import NoReturn

from alkstore import _fork
from alkstore._capabilities import Capabilities
from alkstore._claims import ClaimLedger
from alkstore._errors import Closed, PayloadTooLarge
from alkstore._options import EnqueueOpts, QueueOpts, check_duration
from alkstore._stamp import JobStamp, stamp_job

__all__ = ["DEFAULT_SCHEDULER_LEASE_S", "StoreBasics"]

_DEFAULT_QUEUE_OPTS = QueueOpts()

DEFAULT_SCHEDULER_LEASE_S = 30.0
"""The scheduler leader's lease unless the engine was configured otherwise."""


class StoreBasics:
    """The state and checks :class:`~alkstore.Store` and :class:`~alkstore.AsyncStore` share."""

    job_keys: bool = False
    """Whether the engine honours ``JobStamp.key`` (unique jobs, contract 1.4).
    Core refuses ``EnqueueOpts(key=...)`` on an engine that does not say so,
    rather than let it write duplicates."""

    def __init__(
        self,
        location: str,
        capabilities: Capabilities,
        *,
        scheduler_lease_s: float = DEFAULT_SCHEDULER_LEASE_S,
    ) -> None:
        self.location = location
        """Where the store lives, safe to print (no passwords)."""
        self.capabilities = capabilities
        """The engine's declared asymmetries (``Engine.capabilities``)."""
        self.scheduler_lease_s = check_duration(
            scheduler_lease_s, "scheduler_lease_s", zero_ok=False
        )
        """The lease of the scheduler leader's lock, as the engine was configured."""
        self._closed = False
        self._inherited_from: int | None = None
        self._queue_opts: dict[str, QueueOpts] = {}
        self._queue_opts_lock = threading.Lock()
        self._claims = ClaimLedger()
        _fork.track(self)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran (or the engine shut the store down)."""
        return self._closed

    def __repr__(self) -> str:
        if self._inherited_from is not None:
            state = f"inherited from process {self._inherited_from}"
        else:
            state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} {self.location!r} {state}>"

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            f"{self!r} cannot be pickled, nor can what holds it (a queue, a job, a lock): "
            "a store belongs to the process that opened it. Send the other process what "
            "it needs (the target to open, a job's id and payload) and open a store there"
        )

    def _check_open(self) -> None:
        if self._closed:
            raise self._closed_error()

    def _closed_error(self) -> Closed:
        if self._inherited_from is None:
            return Closed(f"{self!r} is closed")
        return Closed(
            f"{self!r}: this process was forked from the one that opened the store, "
            "and may not use its connections; open a store in this process "
            "(alkstore.open after the fork)"
        )

    def _disown_after_fork(self, parent_pid: int) -> None:
        """In a forked child: closed for good, without touching what the parent's
        store holds (``_fork``). Engines extend :meth:`_after_fork_in_child`."""
        self._inherited_from = parent_pid
        self._closed = True
        self._queue_opts_lock = threading.Lock()  # another thread may have held it
        self._after_fork_in_child()

    def _after_fork_in_child(self) -> None:
        """Engine hook, run in a forked child once per store it inherited, after
        core marked the store closed: make sure nothing of the parent's is used
        or closed here later. No I/O, and no lock another thread of the parent
        may have held. Core refuses the store's calls already; most engines
        need nothing more (see "A forked child" in the engine authors' guide)."""

    def _declare_queue_opts(self, name: str, opts: QueueOpts | None) -> QueueOpts:
        """The opts ``queue(name, opts)`` gives the queue: ``opts``, now declared, or
        the ones declared before."""
        if opts is None:
            return self._declared_queue_opts(name)
        if not isinstance(opts, QueueOpts):
            raise TypeError(f"opts must be QueueOpts or None, not {type(opts).__name__}")
        with self._queue_opts_lock:
            self._queue_opts[name] = opts
        return opts

    def _share_declarations(self, other: StoreBasics) -> None:
        """Make ``other`` see the queue opts declared in this store, now and later
        (an async store and its sync companion are one store to their caller)."""
        with self._queue_opts_lock:
            other._queue_opts = self._queue_opts
            other._queue_opts_lock = self._queue_opts_lock

    def _declared_queue_opts(self, name: str) -> QueueOpts:
        return self._queue_opts.get(name, _DEFAULT_QUEUE_OPTS)

    def _refuse_key_unless_kept(self, key: str | None) -> None:
        """Refuse a unique key (``EnqueueOpts.key``, ``ScheduleOpts.key``) that the
        engine would not honour (``job_keys`` is False).

        Raises:
            NotImplementedError: naming the contract.
        """
        if key is not None and not self.job_keys:
            raise NotImplementedError(
                f"{self!r}: its engine does not implement unique jobs (a key in "
                "EnqueueOpts or ScheduleOpts, engine contract 1.4); upgrade the engine, "
                "or go without a key"
            )

    def _stamp(self, queue_opts: QueueOpts, opts: EnqueueOpts | None) -> JobStamp:
        """``stamp_job``, refusing a key the engine would not honour.

        Raises:
            NotImplementedError: ``opts.key`` is set and the engine predates
                unique jobs (``job_keys`` is False).
        """
        stamp = stamp_job(queue_opts, opts)
        self._refuse_key_unless_kept(stamp.key)
        return stamp

    def _check_notify_payload(self, payload_json: str) -> str:
        limit = self.capabilities.notify_payload_limit
        if limit is not None and len(payload_json) * 4 > limit:
            size = len(payload_json.encode("utf-8"))
            if size > limit:
                raise PayloadTooLarge(
                    f"notify payload is {size} bytes encoded; this engine's limit is {limit}"
                )
        return payload_json
