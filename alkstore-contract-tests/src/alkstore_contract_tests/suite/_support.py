"""Helpers the suite's tests share."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

import pytest

from alkstore.engine import StoreTarget, TestProvider

__all__ = [
    "SIDE_EFFECTS",
    "OpenStore",
    "Runs",
    "SideEffect",
    "StartRunning",
    "eventually",
    "finish",
    "needs",
    "spawn",
    "start_thread",
]

import alkstore

T = TypeVar("T")

OpenStore = Callable[[], alkstore.Store]
"""Opens another store on the test's target (the ``open_store`` fixture)."""

SideEffect = Callable[[alkstore.TxHandle], object]

SIDE_EFFECTS: dict[str, SideEffect] = {
    "enqueue_tx": lambda tx: tx.enqueue_tx("emails", None, {"order": 1}),
    "publish_tx": lambda tx: tx.publish_tx("orders", {"order": 1}),
    "publish_with_key_tx": lambda tx: tx.publish_with_key_tx("orders", "k", {"order": 1}),
    "notify_tx": lambda tx: tx.notify_tx("orders", {"order": 1}),
    "save_offset_tx": lambda tx: tx.save_offset_tx(
        "orders", "projection", tx.publish_tx("orders", {"order": 1})
    ),
    "outbox_enqueue_tx": lambda tx: tx.outbox_enqueue_tx("hooks", None, {"order": 1}),
}
"""One call of each ``*_tx`` side effect: a job in ``emails``, an event in ``orders``,
a notify on ``orders``, the offset of ``projection`` on ``orders``, a send in ``hooks``."""


class Runs(Protocol):
    """A Worker or a Consumer: something that runs until its stop signal is set."""

    def run(self, stop: threading.Event) -> None: ...


StartRunning = Callable[[Runs], threading.Event]
"""Starts one on a thread and returns its stop signal (the ``running`` fixture)."""

OPEN_TARGET = """
import json, sys, alkstore
_given = json.loads(sys.argv[1])
if _given["api"] == "async":
    from alkstore_contract_tests.suite._api import open_through_the_async_api
    store = open_through_the_async_api(_given["target"], _given["options"])
else:
    store = alkstore.open(_given["target"], **_given["options"])
"""


def spawn(
    target: StoreTarget, code: str, *arguments: str, api: str = "sync"
) -> subprocess.Popen[str]:
    """Start a Python process with ``store`` opened on ``target`` through ``api``
    (the session's: ``sync``, or ``async`` behind the suite's facade), running ``code``."""
    encoded = json.dumps({"target": target.target, "options": dict(target.options), "api": api})
    return subprocess.Popen(
        [sys.executable, "-c", OPEN_TARGET + textwrap.dedent(code), encoded, *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(child: subprocess.Popen[str], timeout: float = 60) -> str:
    """Wait for ``child`` to succeed and return what it printed."""
    out, errors = child.communicate(timeout=timeout)
    assert child.returncode == 0, f"child failed:\n{errors}"
    return out


def eventually(check: Callable[[], T | None], timeout: float = 5.0) -> T:
    """Poll ``check`` until it returns something other than None/False."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.01)


def start_thread(function: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=function, daemon=True)
    thread.start()
    return thread


def needs(provider: TestProvider, method: str) -> None:
    """Skip, with the provider's reason, a test that needs a provider backdoor it lacks."""
    implementation = getattr(type(provider), method, None)
    if implementation is None or implementation is getattr(TestProvider, method, None):
        pytest.skip(f"the provider does not implement TestProvider.{method}")
