"""Profile one hot path of alkstore with pyinstrument, in this process.

    python bench/profile.py OPERATION [--engine sqlite|postgres] [--count N]

OPERATION is one of: enqueue_1, enqueue_100, claim_one, claim_batch, publish_100,
wake_fanout. Prints pyinstrument's call tree of the timed loop only (set-up
and fresh storage are outside it). bench/README.md records what these showed.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator

from _harness import postgres_database, sqlite_file
from pyinstrument import Profiler

import alkstore

Loop = Callable[[alkstore.Store, int], None]


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
    "wake_fanout": wake_fanout,
}
NEEDS_JOBS = {"claim_one", "claim_batch"}


@contextlib.contextmanager
def fresh_store(engine: str) -> Iterator[alkstore.Store]:
    place = sqlite_file() if engine == "sqlite" else postgres_database()
    with place as where, alkstore.open(str(where)) as store:
        yield store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("operation", choices=sorted(LOOPS))
    parser.add_argument("--engine", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--count", type=int, default=3_000)
    arguments = parser.parse_args()
    with fresh_store(arguments.engine) as store:
        if arguments.operation in NEEDS_JOBS:
            enqueue_100(store, arguments.count)
        profiler = Profiler(interval=0.0005)
        profiler.start()
        LOOPS[arguments.operation](store, arguments.count)
        profiler.stop()
    print(profiler.output_text(unicode=True, color=False, show_all=False))


if __name__ == "__main__":
    main()
