"""Profile one hot path of alkstore with pyinstrument, in this process.

    python bench/profile.py OPERATION [--engine sqlite|postgres] [--count N]

OPERATION is one of: enqueue_1, enqueue_100, claim_one, claim_batch, publish_100,
replay, wake_fanout, or through the asyncio API (``open_async``): async_enqueue_1,
async_claim_batch. Prints pyinstrument's call tree of the timed loop only
(set-up and fresh storage are outside it). bench/README.md records what these
showed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator

from _harness import postgres_database, sqlite_file
from pyinstrument import Profiler

import alkstore

Loop = Callable[[alkstore.Store, int], None]
AsyncLoop = Callable[[alkstore.AsyncStore, int], Awaitable[None]]


def enqueue_1(store: alkstore.Store, count: int) -> None:
    queue = store.queue("q")
    for n in range(count):
        queue.enqueue({"n": n})


def enqueue_100(store: alkstore.Store, count: int) -> None:
    for start in range(0, count, 100):
        with store.transaction() as tx:
            for n in range(start, start + 100):
                tx.enqueue_tx("q", None, {"n": n})


def claim_one(store: alkstore.Store, count: int) -> None:
    queue = store.queue("q")
    for _ in range(count):
        job = queue.claim_one("w")
        assert job is not None
        job.ack()


def claim_batch(store: alkstore.Store, count: int) -> None:
    queue = store.queue("q")
    while jobs := queue.claim_batch("w", 32):
        queue.ack_batch([job.id for job in jobs], "w")


def publish_100(store: alkstore.Store, count: int) -> None:
    for start in range(0, count, 100):
        with store.transaction() as tx:
            for n in range(start, start + 100):
                tx.publish_tx("s", {"n": n})


def replay(store: alkstore.Store, count: int) -> None:
    """Read the stream ``publish_100`` wrote (set-up) from 0, a page of 1,000 at a time."""
    stream = store.stream("s")
    offset = 0
    while page := stream.read_since(offset, 1000):
        offset = page[-1].offset


def wake_fanout(store: alkstore.Store, count: int) -> None:
    """Notifies with 50 listeners attached, each woken (pyinstrument samples this thread)."""
    receivers = [store.listen("c") for _ in range(50)]
    for n in range(count):
        store.notify("c", n)
        for receiver in receivers:
            receiver.recv(5)  # a wake per notify here: each waits for the last one
    for receiver in receivers:
        receiver.close()


LOOPS: dict[str, Loop] = {
    "enqueue_1": enqueue_1,
    "enqueue_100": enqueue_100,
    "claim_one": claim_one,
    "claim_batch": claim_batch,
    "publish_100": publish_100,
    "replay": replay,
    "wake_fanout": wake_fanout,
}


async def async_enqueue_1(store: alkstore.AsyncStore, count: int) -> None:
    queue = store.queue("q")
    for n in range(count):
        await queue.enqueue({"n": n})


async def async_claim_batch(store: alkstore.AsyncStore, count: int) -> None:
    queue = store.queue("q")
    while jobs := await queue.claim_batch("w", 32):
        await queue.ack_batch([job.id for job in jobs], "w")


ASYNC_LOOPS: dict[str, AsyncLoop] = {
    "async_enqueue_1": async_enqueue_1,
    "async_claim_batch": async_claim_batch,
}
NEEDS_JOBS = {"claim_one", "claim_batch", "async_claim_batch"}
NEEDS_EVENTS = {"replay"}


@contextlib.contextmanager
def fresh_target(engine: str) -> Iterator[str]:
    place = sqlite_file() if engine == "sqlite" else postgres_database()
    with place as where:
        yield str(where)


def profiled(target: str, operation: str, count: int) -> Profiler:
    """Run the operation's loop on ``target`` under a profiler; return the profiler."""
    if operation in NEEDS_JOBS:
        with alkstore.open(target) as store:
            enqueue_100(store, count)
    if operation in NEEDS_EVENTS:
        with alkstore.open(target) as store:
            publish_100(store, count)
    if operation in ASYNC_LOOPS:
        return asyncio.run(_profiled_async(target, ASYNC_LOOPS[operation], count))
    with alkstore.open(target) as store:
        profiler = Profiler(interval=0.0005)
        profiler.start()
        LOOPS[operation](store, count)
        profiler.stop()
    return profiler


async def _profiled_async(target: str, loop: AsyncLoop, count: int) -> Profiler:
    async with alkstore.open_async(target) as store:
        profiler = Profiler(interval=0.0005, async_mode="enabled")
        profiler.start()
        await loop(store, count)
        profiler.stop()
    return profiler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("operation", choices=sorted([*LOOPS, *ASYNC_LOOPS]))
    parser.add_argument("--engine", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--count", type=int, default=3_000)
    arguments = parser.parse_args()
    with fresh_target(arguments.engine) as target:
        profiler = profiled(target, arguments.operation, arguments.count)
    print(profiler.output_text(unicode=True, color=False, show_all=False))


if __name__ == "__main__":
    main()
