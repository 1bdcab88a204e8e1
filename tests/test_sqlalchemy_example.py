"""The SQLAlchemy example (``examples/sqlalchemy_shop.py``) runs end to end on each engine.

It is run as a user runs it, in a subprocess, by target only. On PostgreSQL
the target puts alkstore's tables in the test's schema (``schema=``) and the
example's business tables there too (libpq's ``options=-csearch_path=``), so
the schema's drop takes everything.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SHOP = Path(__file__).parents[1] / "examples" / "sqlalchemy_shop.py"
RUN_TIMEOUT_S = 60.0

pytestmark = pytest.mark.timeout(3 * RUN_TIMEOUT_S)


def run_shop(*arguments: str) -> str:
    result = subprocess.run(
        [sys.executable, str(SHOP), *arguments],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout


def test_the_sqlalchemy_shop_runs_end_to_end_and_checks_itself(app_dsn: str) -> None:
    out = run_shop(app_dsn)
    assert "placed orders [1, 2, 3], each with its confirmation job and event" in out
    assert "order 3: not wrapped (no tartan paper left): no wrapping row, no wrapping job" in out
    assert "mallory's order rolled back (card of mallory declined for 999.00)" in out
    assert "confirmations waiting: [1, 2, 3]; events published: 3" in out
    assert "wrapping jobs: [2]" in out
    assert "order status: {1: 'confirmed', 2: 'confirmed', 3: 'confirmed'}" in out
    assert "FAILED" not in out
    assert out.strip().endswith("all as expected")


def test_a_second_run_on_the_same_database_carries_on(app_dsn: str) -> None:
    run_shop(app_dsn)
    out = run_shop(app_dsn)  # the orders of the first run stay, confirmed
    assert "FAILED" not in out
    assert out.strip().endswith("all as expected")


def test_with_no_target_it_runs_on_a_sqlite_file_of_its_own() -> None:
    out = run_shop()
    assert "shop on <SQLiteStore" in out
    assert out.strip().endswith("all as expected")
