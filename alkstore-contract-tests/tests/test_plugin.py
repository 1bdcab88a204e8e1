"""The plugin as pytest loads it: through its installed ``pytest11`` entry point."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

from alkstore.engine import CONTRACT_VERSION, load_engine


def test_the_plugin_is_registered_under_pytest11() -> None:
    plugins = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert plugins["alkstore"] == "alkstore_contract_tests.plugin"


def test_without_the_option_other_test_runs_are_untouched(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_ordinary():\n    assert True\n")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)


def test_the_options_are_documented_in_help(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(
        [
            "*--alkstore-engine=NAME*",
            "*--alkstore-option=KEY=VALUE*",
            "*--alkstore-api={sync,async}*",
            "*--alkstore-test-timeout=S*",
        ]
    )


def test_an_api_other_than_sync_or_async_is_refused(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--alkstore-engine=sqlite", "--alkstore-api=trio")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--alkstore-api*invalid choice*'trio'*"])


@pytest.mark.parametrize(
    ("arguments", "shown"),
    [
        ((), "alkstore API: sync"),
        (("--alkstore-api=sync",), "alkstore API: sync"),
        (
            ("--alkstore-api=async",),
            "alkstore API: async (AsyncStore from the engine's open_async*",
        ),
    ],
)
def test_the_header_shows_the_api_the_suite_runs_through(
    pytester: pytest.Pytester, arguments: tuple[str, ...], shown: str
) -> None:
    result = pytester.runpytest_subprocess(
        "--alkstore-engine=sqlite", "--collect-only", "-k", "no_such_test", *arguments
    )
    result.stdout.fnmatch_lines([shown])


@pytest.mark.parametrize("seconds", ["0", "-1", "nan"])
def test_a_time_limit_that_is_not_positive_is_refused(
    pytester: pytest.Pytester, seconds: str
) -> None:
    result = pytester.runpytest_subprocess(
        "--alkstore-engine=sqlite", f"--alkstore-test-timeout={seconds}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--alkstore-test-timeout=*: expected seconds > 0*"])


def test_an_unknown_engine_fails_at_start_up_listing_the_installed_ones(
    pytester: pytest.Pytester,
) -> None:
    result = pytester.runpytest_subprocess("--alkstore-engine=nosuch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--alkstore-engine=nosuch: *'nosuch' engine*(installed engines: *postgres*sqlite*)*"]
    )


@pytest.mark.parametrize(
    ("arguments", "limit"),
    [
        ((), "120 s per test"),
        (("--alkstore-test-timeout=7.5",), "7.5 s per test"),
        (("--timeout=300",), "pytest-timeout's own setting"),
    ],
)
def test_every_suite_test_gets_a_time_limit_unless_the_user_set_one(
    pytester: pytest.Pytester, arguments: tuple[str, ...], limit: str
) -> None:
    result = pytester.runpytest_subprocess(
        "--alkstore-engine=sqlite", "--collect-only", "-k", "no_such_test", *arguments
    )
    result.stdout.fnmatch_lines([f"alkstore test time limit: {limit}"])


def test_the_header_shows_the_contract_versions_of_core_and_of_the_engine(
    pytester: pytest.Pytester,
) -> None:
    written_for = load_engine("sqlite").contract_version
    result = pytester.runpytest_subprocess(
        "--alkstore-engine=sqlite", "--collect-only", "-k", "no_such_test"
    )
    result.stdout.fnmatch_lines(
        [
            f"alkstore contract version: core implements {CONTRACT_VERSION}, "
            f"the engine was written for {written_for}"
        ]
    )
