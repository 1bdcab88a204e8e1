"""The pytest plugin: ``--alkstore-engine=NAME`` runs the conformance suite.

With the option, pytest collects the suite from this installed package —
whatever the working directory, with no conftest to write — and runs it
against the named engine through that engine's test provider. Without it,
the plugin only adds its options to ``pytest --help``.

``--alkstore-api=async`` runs the same tests through the async API: every
store a test uses is an ``AsyncStore`` (the engine's ``open_async``) behind a
sync facade whose calls await the async methods on an event loop of the
test's own (``alkstore_contract_tests.suite._facade``).

Every suite test runs under a time limit (pytest-timeout): a broken engine
makes a test fail, never hang the run. The limit is
``--alkstore-test-timeout`` seconds, else pytest-timeout's own setting
(``--timeout``, ``PYTEST_TIMEOUT`` or the ``timeout`` ini value) if the user
gave one, else :data:`DEFAULT_TEST_TIMEOUT_S`.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = [
    "API",
    "API_CHOICES",
    "DEFAULT_TEST_TIMEOUT_S",
    "PROVIDER",
    "pytest_addoption",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_ignore_collect",
    "pytest_report_header",
    "pytest_unconfigure",
]

SUITE = Path(__file__).parent / "suite"

PROVIDER = pytest.StashKey["object"]()
"""Where the session's test provider lives (an ``alkstore.engine.TestProvider``)."""

API = pytest.StashKey[str]()
"""Which API the session runs the suite through: one of :data:`API_CHOICES`."""

API_CHOICES = ("sync", "async")
"""The values of ``--alkstore-api``: the sync API, or the async one behind a sync facade."""

DEFAULT_TEST_TIMEOUT_S = 120.0
"""The time limit of each suite test when nobody set one: the slowest correct
test takes about 20 s on a loaded machine."""

# SIGALRM raises in the test's own thread, so the test fails and the run goes
# on (each xdist worker runs its tests on its main thread too); the "thread"
# method would end the whole process. Without SIGALRM, threads it is.
_TIMEOUT_METHOD = "signal" if hasattr(signal, "SIGALRM") else "thread"

# A signal can land while the test holds a lock its own cleanup needs (the
# timeout is raised between a lock's acquire and its ``with`` block): the test
# then hangs in its teardown. This long after its limit, the process ends
# with every thread's stack on stderr; under xdist the worker is replaced and
# the run goes on.
_BACKSTOP_FACTOR, _BACKSTOP_MIN_S = 0.5, 10.0

pytest.register_assert_rewrite("alkstore_contract_tests.suite")


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add the ``--alkstore-*`` options, in their own group of ``pytest --help``."""
    group = parser.getgroup("alkstore", "alkstore conformance suite")
    group.addoption(
        "--alkstore-engine",
        metavar="NAME",
        default=None,
        help="run the alkstore conformance suite against the installed engine NAME",
    )
    group.addoption(
        "--alkstore-option",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="an option for the engine's test provider (e.g. dsn=postgresql://...); repeatable",
    )
    group.addoption(
        "--alkstore-api",
        choices=API_CHOICES,
        default="sync",
        help=(
            "the API the suite runs through: sync (the default), or async (every store is "
            "an AsyncStore from the engine's open_async, driven through a sync facade)"
        ),
    )
    group.addoption(
        "--alkstore-test-timeout",
        metavar="S",
        type=float,
        default=None,
        help=(
            "fail any suite test still running after S seconds "
            f"(default: pytest-timeout's setting if given, else {DEFAULT_TEST_TIMEOUT_S:g})"
        ),
    )


def pytest_configure(config: pytest.Config) -> None:
    """With ``--alkstore-engine``: load the engine, make its test provider, collect the suite."""
    name = config.getoption("alkstore_engine")
    if name is None:
        return
    timeout = config.getoption("alkstore_test_timeout")
    if timeout is not None and not timeout > 0:
        raise pytest.UsageError(f"--alkstore-test-timeout={timeout:g}: expected seconds > 0")
    import alkstore  # noqa: PLC0415 - only when the suite is asked for
    from alkstore.engine import load_engine  # noqa: PLC0415

    try:
        engine = load_engine(name)  # refuses one built for another contract, saying why
    except alkstore.EngineNotFound as exc:
        raise pytest.UsageError(f"--alkstore-engine={name}: {exc}") from exc
    options = _provider_options(config.getoption("alkstore_option"))
    try:
        provider = engine.test_provider(options)
    except (NotImplementedError, ValueError) as exc:
        raise pytest.UsageError(f"--alkstore-engine={name}: {exc}") from exc
    config.stash[PROVIDER] = provider
    config.stash[API] = config.getoption("alkstore_api")
    config.args[:] = [str(SUITE)]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give every suite test without a ``timeout`` mark of its own the suite's time limit."""
    if config.stash.get(PROVIDER, None) is None:
        return
    timeout = _suite_timeout(config)
    if timeout is None:
        return
    mark = pytest.mark.timeout(timeout, method=_TIMEOUT_METHOD)
    for item in items:
        if item.path.is_relative_to(SUITE) and item.get_closest_marker("timeout") is None:
            item.add_marker(mark)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """End the process if a suite test outlives its time limit by far (see above)."""
    limit = _time_limit(item)
    if not item.path.is_relative_to(SUITE) or limit is None or limit <= 0:
        yield
        return
    grace = max(limit * _BACKSTOP_FACTOR, _BACKSTOP_MIN_S)
    backstop = threading.Timer(
        limit + grace, _abandon_run, args=(item.config, item.nodeid, limit + grace)
    )
    backstop.daemon = True
    backstop.start()
    try:
        yield
    finally:
        backstop.cancel()


def _time_limit(item: pytest.Item) -> float | None:
    """The test's time limit: its ``timeout`` mark's (the suite's limit, or the
    test's own), else pytest-timeout's own setting; None without one."""
    if not item.config.pluginmanager.hasplugin("timeout"):
        return None  # pytest-timeout disabled: no limit to back up
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        limit = marker.args[0]
        return float(limit) if isinstance(limit, (int, float)) else None
    given = _pytest_timeout_setting(item.config)
    try:
        return None if given is None else float(str(given))
    except ValueError:
        return None


def _pytest_timeout_setting(config: pytest.Config) -> object:
    """What the user gave pytest-timeout (``--timeout``, ``PYTEST_TIMEOUT`` or the
    ``timeout`` ini value, in its order), or None."""
    for given in (
        config.getoption("timeout", None),
        os.environ.get("PYTEST_TIMEOUT"),
        config.getini("timeout"),
    ):
        if given not in (None, ""):
            return given
    return None


def _abandon_run(config: pytest.Config, nodeid: str, after_s: float) -> None:
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:  # write to the real stderr, not to the test's captured output
        capture.suspend_global_capture(in_=True)
    sys.stderr.write(
        f"\nalkstore suite: {nodeid} is still running {after_s:g} s after it began, past its "
        "time limit (the limit's signal could not end it); ending the process\n"
    )
    faulthandler.dump_traceback(all_threads=True)
    sys.stderr.flush()
    os._exit(1)


def _suite_timeout(config: pytest.Config) -> float | None:
    """The suite's time limit, or None to leave pytest-timeout's own setting in force."""
    if not config.pluginmanager.hasplugin("timeout"):
        return None  # pytest-timeout disabled with -p no:timeout: no limit to give
    given: float | None = config.getoption("alkstore_test_timeout")
    if given is not None:
        return given
    return None if _pytest_timeout_setting(config) is not None else DEFAULT_TEST_TIMEOUT_S


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Without an engine, the suite's files are not tests to collect."""
    if config.stash.get(PROVIDER, None) is None and collection_path.is_relative_to(SUITE):
        return True
    return None


def pytest_unconfigure(config: pytest.Config) -> None:
    """Close the session's test provider, if there is one."""
    provider = config.stash.get(PROVIDER, None)
    if provider is not None:
        provider.close()  # type: ignore[attr-defined]


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """Name the engine, its distribution and both contract versions atop the run."""
    provider = config.stash.get(PROVIDER, None)
    if provider is None:
        return None
    import alkstore  # noqa: PLC0415
    from alkstore.engine import CONTRACT_VERSION  # noqa: PLC0415

    engine = provider.engine  # type: ignore[attr-defined]
    info = alkstore.engines()[engine.name]
    lines = [
        f"alkstore engine: {info.name} ({info.distribution} {info.version})",
        f"alkstore contract version: core implements {CONTRACT_VERSION}, "
        f"the engine was written for {engine.contract_version}",
        f"alkstore capabilities: {engine.capabilities}",
        f"alkstore API: {_describe_api(config.stash[API])}",
    ]
    timeout = _suite_timeout(config)
    lines.append(
        "alkstore test time limit: "
        + ("pytest-timeout's own setting" if timeout is None else f"{timeout:g} s per test")
    )
    described = provider.describe()  # type: ignore[attr-defined]
    if described:
        lines.append(f"alkstore provider: {described}")
    return lines


def _describe_api(api: str) -> str:
    if api == "async":
        return "async (AsyncStore from the engine's open_async, through the suite's sync facade)"
    return "sync"


def _provider_options(pairs: list[str]) -> dict[str, str]:
    options = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise pytest.UsageError(f"--alkstore-option {pair!r}: expected KEY=VALUE")
        options[key] = value
    return options
