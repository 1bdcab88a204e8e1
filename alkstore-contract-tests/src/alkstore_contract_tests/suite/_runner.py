"""``run_schedules`` on a thread, for the scheduler tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import alkstore

STALLS_FORGIVEN = 2
"""How often a sole runner may lose its lease to a stall and lead again.

A machine stalls a test's runner past two-thirds of its short lease seldom;
twice in one test is already unlikely, and an engine whose renewals fail
every time loses the lease every lease period, which a test of a second or
more sees more often than this."""


class Runner:
    """``run_schedules`` in a thread, keeping what it raised.

    A ``sole`` runner is the only one on its store. A loaded machine that
    stalls it past its lease costs it the lock even though nobody else wants
    it (``LeadershipLost``, as api.md pins); it then leads again, as a
    supervisor would, up to :data:`STALLS_FORGIVEN` times, counting each loss
    in ``stalls``. A boundary fires in the transaction that moves its schedule
    on, so leading again cannot fire one twice. Runners that compete keep
    every ``LeadershipLost`` in ``errors``: losing the lease is what those
    tests look at.
    """

    def __init__(self, store: alkstore.Store, owner: str, *, sole: bool = False) -> None:
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.stalls = 0
        self.store = store
        self.owner = owner
        self.sole = sole
        self.thread = threading.Thread(target=self._run, name=f"runner {owner}", daemon=True)
        self.thread.start()

    def __repr__(self) -> str:
        state = "running" if self.thread.is_alive() else "ended"
        return (
            f"<Runner {self.owner!r} {state} sole={self.sole} "
            f"stalls={self.stalls} errors={self.errors!r}>"
        )

    def _run(self) -> None:
        while True:
            try:
                self.store.run_schedules(self.stop, owner=self.owner)
                return
            except alkstore.LeadershipLost as exc:
                if not self.sole or self.stalls == STALLS_FORGIVEN:
                    self.errors.append(exc)
                    return
                self.stalls += 1
            except BaseException as exc:
                self.errors.append(exc)
                return

    def until(self, check: Callable[[], object], timeout: float = 10.0) -> None:
        """Wait until ``check`` holds while the runner runs.

        A runner that ended (``LeadershipLost`` on a machine that stalled it
        past its lease, say) fails the wait at once with what it raised, not
        with a timeout that hides it. The timeout is generous: a loaded
        machine delays a boundary's fire, and the checks after the wait say
        exactly what must have fired.
        """
        deadline = time.monotonic() + timeout
        while not check():
            assert self.thread.is_alive(), f"run_schedules ended early: {self.errors!r}"
            assert time.monotonic() < deadline, (
                f"condition not met within {timeout} s; the runner is alive, "
                f"the schedules are {self.store.inspect().schedules()!r}"
            )
            time.sleep(0.01)

    def finish(self) -> list[BaseException]:
        """Stop the runner, wait for it, and return what it raised."""
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "run_schedules ignored its stop event"
        return self.errors
