"""The claimed-job handle: the one way to ack, retry, fail or heartbeat a claim."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from alkstore._backoff import backoff_delay
from alkstore._options import check_duration
from alkstore._payload import HasPayload
from alkstore._short_repr import short_repr

if TYPE_CHECKING:
    from alkstore._claims import ClaimLedger
    from alkstore._queue import Queue  # noqa: F401 - named in a base class as a string

__all__ = ["ClaimedJob", "Job", "describe_error"]


class _ClaimingStore(Protocol):
    @property
    def _claims(self) -> ClaimLedger: ...


class _ClaimingQueue(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def _store(self) -> _ClaimingStore: ...


Q = TypeVar("Q", bound=_ClaimingQueue)


class ClaimedJob(HasPayload, Generic[Q]):
    """What a claim handed out: the job's fields and its claim's stamps.

    The base of :class:`Job` and :class:`~alkstore.AsyncJob`, which add the
    settling calls (sync or awaitable) on top.
    """

    __slots__ = (
        "_backoff_base_s",
        "_outcome",
        "_queue",
        "_released",
        "_twin",
        "attempts",
        "deadline",
        "id",
        "key",
        "max_attempts",
        "payload",
        "priority",
        "queue",
        "run_at",
        "traceparent",
        "visibility_timeout_s",
        "worker_id",
    )

    def __init__(
        self,
        *,
        queue: Q,
        id: int,
        payload: Any,
        priority: int,
        attempts: int,
        max_attempts: int,
        run_at: float,
        deadline: float,
        worker_id: str,
        backoff_base_s: float,
        visibility_timeout_s: float | None = None,
        key: str | None = None,
        traceparent: str | None = None,
    ) -> None:
        """Engines build jobs when claiming; ``backoff_base_s`` and
        ``visibility_timeout_s`` are the row's stamps (pass both), ``key`` its
        unique key and ``traceparent`` its stored trace context."""
        self._queue = queue
        self._backoff_base_s = backoff_base_s
        self._released = False
        self._outcome: tuple[str, str | None] | None = None
        """How a settling call on this handle settled the claim: ``("acked", None)``,
        ``("retried", error)`` or ``("dead", error)``; None until one did."""
        self._twin: Any = None  # the other API's handle on the same claim, when one exists
        self.id = id
        self.queue: str = queue.name
        self.payload = payload
        self.priority = priority
        self.attempts = attempts
        """Claims so far, this one included."""
        self.max_attempts = max_attempts
        self.run_at = run_at
        self.deadline = deadline
        """When this claim lapses (Unix seconds, the database's clock); moved by ``heartbeat``."""
        self.worker_id = worker_id
        self.key = key
        """The job's unique key (``EnqueueOpts.key``), else None."""
        self.traceparent = traceparent
        """The W3C ``traceparent`` of the span that enqueued it (OpenTelemetry), else None."""
        self.visibility_timeout_s = visibility_timeout_s
        """The claim's lease as stamped on the job's row: ``deadline`` was set to
        the claim's time plus this. None if the engine does not say. A duration,
        so ``heartbeat(job.visibility_timeout_s)`` renews the lease whatever this
        host's clock reads; ``deadline - time.time()`` would depend on it."""

    def _note(self, settled: bool, how: str, error: str | None = None) -> bool:
        """Remember a settling call that succeeded (a worker reads it: who settled
        the claim, its handler or the worker); return ``settled``."""
        if settled:
            self._outcome = (how, error)
        return settled

    def _acked(self, acked: bool) -> bool:
        """:meth:`_note` an ack; an acked job's claim needs no fencing any more (its
        id is never claimed again), so the store's ledger forgets it."""
        if self._note(acked, "acked"):
            self._queue._store._claims.forget(self.queue, (self.id,))
        return acked

    def _retry_delay(self, delay_s: float | None) -> float:
        """The delay a ``retry(error, delay_s)`` asks for: checked, or from the backoff curve."""
        if delay_s is None:
            return backoff_delay(self._backoff_base_s, max(self.attempts, 1))
        return check_duration(delay_s, "delay_s", zero_ok=True)

    def __repr__(self) -> str:
        keyed = "" if self.key is None else f" key={short_repr(self.key)}"
        return (
            f"<{type(self).__name__} id={self.id} queue={short_repr(self.queue)}{keyed} "
            f"attempts={self.attempts}/{self.max_attempts} priority={self.priority} "
            f"worker_id={short_repr(self.worker_id)} deadline={self.deadline:.3f}>"
        )


class Job(ClaimedJob["Queue"]):
    """A job this worker has claimed, and the handle to settle it.

    Every settling call is fenced: once the claim has lapsed (deadline passed)
    or another claim has taken the job, ``ack``, ``retry``, ``fail`` and
    ``heartbeat`` return False and change nothing.
    """

    __slots__ = ()

    def ack(self) -> bool:
        """Finish the job: delete its row. False if the claim was lost."""
        self._queue._store._check_open()
        return self._acked(not self._released and self._queue._ack_job(self))

    def retry(self, error: str | BaseException, delay_s: float | None = None) -> bool:
        """Release the job for another attempt after ``delay_s`` seconds.

        With ``delay_s=None`` the delay follows the backoff curve. A job with no
        attempts left goes to dead letters instead. ``error`` (a message or an
        exception) is recorded as ``last_error``. False if the claim was lost.
        """
        self._queue._store._check_open()
        delay = self._retry_delay(delay_s)
        if self._released:
            return False
        described = describe_error(error)
        if self.attempts >= self.max_attempts:  # the claim's attempts are the row's: fenced
            return self._note(self._queue._fail_job(self, described), "dead", described)
        return self._note(self._queue._retry_job(self, described, delay), "retried", described)

    def fail(self, error: str | BaseException) -> bool:
        """Move the job to dead letters now, recording ``error``. False if the claim was lost."""
        self._queue._store._check_open()
        described = describe_error(error)
        return self._note(
            not self._released and self._queue._fail_job(self, described), "dead", described
        )

    def heartbeat(self, extend_s: float) -> bool:
        """Move the deadline to ``now + extend_s`` (absolute, not added to the old one).

        False, and nothing changes, once the deadline has passed.
        """
        self._queue._store._check_open()
        seconds = check_duration(extend_s, "extend_s", zero_ok=False)
        return not self._released and self._queue._heartbeat_job(self, seconds)

    def release(self) -> bool:
        """Give the job back unfinished, for any worker to claim at once.

        Unlike ``retry``, this is not a failure: the attempt this claim used is
        given back and no error is recorded, so a job on its last attempt is
        not dead-lettered. Use it when shutting down mid-job. Afterwards every
        settling call on this handle returns False. False if the claim was lost.
        """
        self._queue._store._check_open()
        if self._released:
            return False
        self._released = self._queue._release_job(self)
        return self._released


def describe_error(error: str | BaseException) -> str:
    """Return what is recorded as ``last_error``: the text, or ``Type: message``.

    Lone surrogates (a file name decoded with ``surrogateescape``, say) cannot
    be stored as UTF-8: they are written as ``\\udcff`` escapes instead, so a
    handler's odd error message never keeps its job from being settled, and
    neither does an exception whose ``str()`` itself raises.
    """
    if isinstance(error, BaseException):
        try:
            message = str(error)
        except Exception as unprintable:  # a broken __str__: the job is settled all the same
            message = f"<str() of it raised {type(unprintable).__qualname__}>"
        name = type(error).__qualname__
        text = f"{name}: {message}" if message else name
    elif isinstance(error, str):
        text = error
    else:
        raise TypeError(f"error must be a str or an exception, not {type(error).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
