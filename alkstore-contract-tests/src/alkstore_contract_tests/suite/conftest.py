"""Fixtures of the conformance suite: stores come only from the engine's provider,
through the API the session runs (``--alkstore-api``)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

import alkstore
from alkstore.engine import Capabilities, StoreTarget, TestProvider
from alkstore_contract_tests.plugin import API, PROVIDER
from alkstore_contract_tests.suite._api import SYNC, StoreOpener
from alkstore_contract_tests.suite._support import OpenStore, Runs, StartRunning, start_thread

settings.register_profile(
    "alkstore-suite",
    max_examples=int(os.environ.get("ALKSTORE_SUITE_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=bool(os.environ.get("CI")),
)
settings.load_profile("alkstore-suite")


@pytest.fixture(scope="session")
def provider(pytestconfig: pytest.Config) -> TestProvider:
    found = pytestconfig.stash.get(PROVIDER, None)
    if found is None:
        pytest.fail("the conformance suite runs with --alkstore-engine=NAME")
    assert isinstance(found, TestProvider)
    return found


@pytest.fixture(scope="session")
def capabilities(provider: TestProvider) -> Capabilities:
    return provider.engine.capabilities


@pytest.fixture
def target(provider: TestProvider) -> Iterator[StoreTarget]:
    made = provider.create_target()
    yield made
    provider.drop_target(made)


@pytest.fixture(scope="session")
def api(pytestconfig: pytest.Config) -> str:
    """The API the session runs the suite through: ``sync`` or ``async``."""
    return pytestconfig.stash.get(API, SYNC)


@pytest.fixture
def opener(provider: TestProvider, api: str, target: StoreTarget) -> Iterator[StoreOpener]:
    """Opens the test's stores (and driver connections) through the session's API;
    closes them before the test's target is dropped."""
    made = StoreOpener(provider, api)
    yield made
    made.close()


@pytest.fixture
def open_store(opener: StoreOpener, target: StoreTarget) -> OpenStore:
    """Open another store on the test's target (a peer, as another process would be)."""
    return lambda: opener.open(target)


@pytest.fixture
def store(open_store: OpenStore) -> alkstore.Store:
    return open_store()


@pytest.fixture
def peer(open_store: OpenStore) -> alkstore.Store:
    return open_store()


@pytest.fixture
def scheduler_lease_s(provider: TestProvider) -> float:
    lease = provider.scheduler_lease_s
    if lease is None or lease > 1.0:
        pytest.skip("the provider declares no scheduler lease of a second or less")
    return lease


@pytest.fixture
def multi_process(capabilities: Capabilities) -> None:
    if not capabilities.shared_between_processes:
        pytest.skip("the engine declares stores are not shared between processes")


@pytest.fixture
def running() -> Iterator[StartRunning]:
    """Start Workers or Consumers on threads; stop them (and wait for them) after the test."""
    started: list[tuple[threading.Event, threading.Thread]] = []

    def run(runner: Runs) -> threading.Event:
        stop = threading.Event()
        started.append((stop, start_thread(lambda: runner.run(stop))))
        return stop

    yield run
    for stop, thread in started:
        stop.set()
        thread.join(30)
        assert not thread.is_alive(), f"{thread.name} did not stop"
