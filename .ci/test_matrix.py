"""Every test on every supported Python, two Pythons at a time.

``hatch run test:all`` walks its matrix one Python after another; most of a
run waits on timeouts and the database rather than on the CPU, so two
Pythons side by side finish in little more than the time of one. Each
Python's output goes to its own log under ``.ci/logs/``; a failing one is
printed in full at the end.

Usage: ``.venv/bin/python .ci/test_matrix.py [--parallel N] [--python 3.12 ...] [-- pytest args]``
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PYTHONS = ("3.10", "3.11", "3.12", "3.13")
ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / ".ci" / "logs"
HATCH = Path(sys.executable).parent / "hatch"


def run_one(python: str, pytest_args: list[str]) -> tuple[str, int, float]:
    """Run ``hatch run +py=PYTHON test:all``; return the Python, its exit code and seconds."""
    started = time.monotonic()
    log = LOGS / f"test-{python}.log"
    with log.open("w") as out:
        code = subprocess.call(
            [str(HATCH), "run", f"+py={python}", "test:all", *pytest_args],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return python, code, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parallel", type=int, default=2, help="Pythons run at once")
    parser.add_argument("--python", action="append", choices=PYTHONS, help="only these")
    parser.add_argument("pytest_args", nargs="*", help="passed to every pytest run")
    options = parser.parse_args()
    pythons = options.python or list(PYTHONS)
    LOGS.mkdir(exist_ok=True)
    print(f"== tests on Python {', '.join(pythons)}, {options.parallel} at a time", flush=True)
    with ThreadPoolExecutor(options.parallel) as pool:
        results = list(pool.map(lambda py: run_one(py, options.pytest_args), pythons))
    failed = [python for python, code, _ in results if code != 0]
    for python, code, seconds in results:
        verdict = "ok" if code == 0 else f"FAILED (exit {code})"
        print(f"Python {python}: {verdict} in {seconds / 60:.1f} min", flush=True)
        for line in (LOGS / f"test-{python}.log").read_text(errors="replace").splitlines():
            if " passed" in line or " failed" in line or " error" in line:
                print(f"  {line.strip('= ')}", flush=True)
    for python in failed:
        print(f"\n== log of Python {python}\n", flush=True)
        print((LOGS / f"test-{python}.log").read_text(errors="replace"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
