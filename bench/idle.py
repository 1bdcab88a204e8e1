"""Idle cost: CPU used by one Store with 50 listeners and 4 parked workers.

    python bench/idle.py [TARGET] [--seconds N] [--json]

TARGET defaults to a SQLite file in a temporary folder; give a PostgreSQL
DSN to measure that engine. Reports the process's CPU time over the idle
window as a percentage of one core (nothing is committed meanwhile).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import alkstore


def measure(target: str, seconds: float) -> dict[str, object]:
    store = alkstore.open(target)
    try:
        listeners = [store.listen(f"channel-{n}") for n in range(50)]
        stop = threading.Event()
        queue = store.queue("idle")

        def park() -> None:
            while not stop.is_set():
                queue.wait(0.5)

        workers = [threading.Thread(target=park) for _ in range(4)]
        for worker in workers:
            worker.start()
        time.sleep(0.5)  # let everything settle into its wait
        cpu_before, wall_before = time.process_time(), time.monotonic()
        time.sleep(seconds)
        cpu = time.process_time() - cpu_before
        wall = time.monotonic() - wall_before
        stop.set()
        for worker in workers:
            worker.join()
        for listener in listeners:
            listener.close()
    finally:
        store.close()
    return {
        "target": store.location,
        "listeners": 50,
        "parked_workers": 4,
        "seconds": round(wall, 2),
        "cpu_percent_of_a_core": round(100 * cpu / wall, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        target = arguments.target or str(Path(folder) / "idle.db")
        result = measure(target, arguments.seconds)
    if arguments.json:
        json.dump(result, sys.stdout)
        print()
    else:
        print(
            f"{result['target']}: {result['cpu_percent_of_a_core']}% of a core over "
            f"{result['seconds']} s, idle with 50 listeners and 4 parked workers"
        )


if __name__ == "__main__":
    main()
