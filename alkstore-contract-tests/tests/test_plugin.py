"""The plugin as pytest loads it: through its installed ``pytest11`` entry point."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest


def test_the_plugin_is_registered_under_pytest11() -> None:
    plugins = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert plugins["alkstore"] == "alkstore_contract_tests.plugin"


def test_without_the_option_other_test_runs_are_untouched(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_ordinary():\n    assert True\n")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)


def test_the_options_are_documented_in_help(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(["*--alkstore-engine=NAME*", "*--alkstore-option=KEY=VALUE*"])


def test_an_unknown_engine_fails_at_start_up_listing_the_installed_ones(
    pytester: pytest.Pytester,
) -> None:
    result = pytester.runpytest_subprocess("--alkstore-engine=nosuch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--alkstore-engine=nosuch: no such engine is installed (installed: *postgres*sqlite*)*"]
    )
