"""The pytest plugin: ``--alkstore-engine=NAME`` runs the conformance suite.

With the option, pytest collects the suite from this installed package —
whatever the working directory, with no conftest to write — and runs it
against the named engine through that engine's test provider. Without it,
the plugin only adds its options to ``pytest --help``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

__all__ = [
    "PROVIDER",
    "pytest_addoption",
    "pytest_configure",
    "pytest_ignore_collect",
    "pytest_report_header",
    "pytest_unconfigure",
]

SUITE = Path(__file__).parent / "suite"

PROVIDER = pytest.StashKey["object"]()
"""Where the session's test provider lives (an ``alkstore.engine.TestProvider``)."""

pytest.register_assert_rewrite("alkstore_contract_tests.suite")


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
    from alkstore.engine import load_engine  # noqa: PLC0415

    installed = alkstore.engines()
    if name not in installed:
        listed = ", ".join(sorted(installed)) or "none"
        raise pytest.UsageError(
            f"--alkstore-engine={name}: no such engine is installed (installed: {listed})"
        )
    options = _provider_options(config.getoption("alkstore_option"))
    engine = load_engine(name)
    try:
        provider = engine.test_provider(options)
    except (NotImplementedError, ValueError) as exc:
        raise pytest.UsageError(f"--alkstore-engine={name}: {exc}") from exc
    config.stash[PROVIDER] = provider
    config.args[:] = [str(SUITE)]


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Without an engine, the suite's files are not tests to collect."""
    if config.stash.get(PROVIDER, None) is None and collection_path.is_relative_to(SUITE):
        return True
    return None


def pytest_unconfigure(config: pytest.Config) -> None:
    provider = config.stash.get(PROVIDER, None)
    if provider is not None:
        provider.close()  # type: ignore[attr-defined]


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    provider = config.stash.get(PROVIDER, None)
    if provider is None:
        return None
    import alkstore  # noqa: PLC0415

    engine = provider.engine  # type: ignore[attr-defined]
    info = alkstore.engines()[engine.name]
    lines = [
        f"alkstore engine: {info.name} ({info.distribution} {info.version})",
        f"alkstore capabilities: {engine.capabilities}",
    ]
    described = provider.describe()  # type: ignore[attr-defined]
    if described:
        lines.append(f"alkstore provider: {described}")
    return lines


def _provider_options(pairs: list[str]) -> dict[str, str]:
    options = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise pytest.UsageError(f"--alkstore-option {pair!r}: expected KEY=VALUE")
        options[key] = value
    return options
