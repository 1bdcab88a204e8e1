"""The main job: the shop example runs end to end on each engine, by DSN only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SHOP = Path(__file__).parents[1] / "examples" / "shop" / "main.py"


def run_shop(dsn: str) -> str:
    result = subprocess.run(
        [sys.executable, str(SHOP), dsn], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_the_shop_runs_end_to_end_and_checks_itself(app_dsn: str) -> None:
    out = run_shop(app_dsn)
    assert "rolled back (card of mallory declined" in out
    assert "emails: 24 confirmations sent, 2 of them after a retry" in out
    assert "webhooks: 24 delivered through the outbox" in out
    assert "6 customers, 2,377.56 in sales, matches the orders" in out
    assert "every queue is empty" in out
    assert out.strip().endswith("all as expected")


def test_a_second_run_on_the_same_store_carries_on(app_dsn: str) -> None:
    run_shop(app_dsn)
    out = run_shop(app_dsn)
    assert "12 customers" not in out  # the same six customers, now with twice the orders
    assert "6 customers, 4,755.12 in sales, matches the orders" in out
    assert out.strip().endswith("all as expected")
