"""The pytest plugin: ``--alkstore-engine=NAME`` selects the engine under test.

Without that option the plugin adds its options to ``pytest --help`` and does
nothing else, so it stays out of the way of every other test run.
"""

from __future__ import annotations

import pytest

__all__ = ["pytest_addoption", "pytest_configure"]


def pytest_addoption(parser: pytest.Parser) -> None:
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


def pytest_configure(config: pytest.Config) -> None:
    name = config.getoption("alkstore_engine")
    if name is None:
        return
    import alkstore  # noqa: PLC0415 - only when the suite is asked for

    installed = alkstore.engines()
    if name not in installed:
        listed = ", ".join(sorted(installed)) or "none"
        raise pytest.UsageError(
            f"--alkstore-engine={name}: no such engine is installed (installed: {listed})"
        )
    raise pytest.UsageError(
        "alkstore-contract-tests 0.1.0.dev0 does not contain the conformance suite yet"
    )
