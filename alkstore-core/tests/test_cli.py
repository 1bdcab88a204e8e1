"""The ``alkstore`` command, run as users run it: a console script in a subprocess."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

import alkstore.engine as alkstore_engine


def alkstore(*arguments: str) -> subprocess.CompletedProcess[str]:
    executable = shutil.which("alkstore")
    command = [executable] if executable else [sys.executable, "-m", "alkstore._cli"]
    return subprocess.run(
        [*command, *arguments], capture_output=True, text=True, timeout=60, check=False
    )


def test_engines_lists_the_workspace_engines_as_a_table() -> None:
    result = alkstore("engines")
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["ENGINE", "SCHEMES", "DISTRIBUTION", "VERSION", "CONTRACT"]
    names = [row.split()[0] for row in rows]
    assert all(row.split()[-1] == alkstore_engine.CONTRACT_VERSION for row in rows)
    assert "sqlite" in names
    assert "postgres" in names


def test_engines_json_is_for_scripts() -> None:
    result = alkstore("engines", "--json")
    assert result.returncode == 0, result.stderr
    engines = {row["name"]: row for row in json.loads(result.stdout)}
    assert engines["postgres"]["schemes"] == ["postgres", "postgresql"]
    assert engines["postgres"]["contract_version"] == alkstore_engine.CONTRACT_VERSION
    assert engines["sqlite"]["distribution"] == "alkstore-sqlite"


def test_without_a_command_it_prints_help_and_exits_2() -> None:
    result = alkstore()
    assert result.returncode == 2
    assert "engines" in result.stdout


@pytest.mark.parametrize("arguments", [("nosuch",), ("engines", "--nosuch")])
def test_bad_usage_exits_2_with_one_clear_line(arguments: tuple[str, ...]) -> None:
    result = alkstore(*arguments)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("alkstore")


def test_version() -> None:
    result = alkstore("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("alkstore 0.")
