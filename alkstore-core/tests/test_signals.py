"""stop_on_signals: SIGTERM and SIGINT stop a process's loops, whichever thread gets them."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

CHILD = """
import signal, sys, threading, time
from alkstore import stop_on_signals

def signal_from_a_worker_thread():
    time.sleep(0.2)
    # The kernel may deliver a process's signal to any thread; force the hard case.
    signal.pthread_kill(threading.get_ident(), getattr(signal, sys.argv[1]))

with stop_on_signals() as stop:
    threading.Thread(target=signal_from_a_worker_thread, daemon=True).start()
    stop.wait()  # untimed, in the main thread
    print("stopped", flush=True)
print("handler restored:", signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, flush=True)
"""


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_signal_landing_on_another_thread_still_ends_an_untimed_wait(name: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), name],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["stopped", "handler restored: True"]


def test_off_the_main_thread_the_event_is_the_callers() -> None:
    code = """
    import threading
    from alkstore import stop_on_signals
    def run():
        with stop_on_signals() as stop:
            print(stop.wait(0.05), flush=True)
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
