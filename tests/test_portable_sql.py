"""Business SQL written once runs on both engines: the README's first example and
the quickstart, unchanged, on each (the shop runs in ``test_example_app``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import alkstore

ROOT = Path(__file__).parents[1]
QUICKSTART = ROOT / "examples" / "quickstart.py"


def readme_first_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    return str(blocks[0])


def test_the_readmes_first_example_runs_unchanged(app_dsn: str) -> None:
    code = readme_first_example()
    assert 'alkstore.open("app.db")' in code, "the example's target is what the test swaps"
    with alkstore.open(app_dsn) as setup, setup.transaction() as tx:
        tx.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
    sent: list[int] = []
    namespace = {"send_confirmation": sent.append}
    exec(code.replace('"app.db"', repr(app_dsn)), namespace)  # the README's own code
    assert sent == [42]
    with alkstore.open(app_dsn) as store, store.transaction() as tx:
        assert tx.execute("SELECT id, total FROM orders") == [(42, 99.5)]
        assert [event.payload for event in store.stream("orders").read_since(0)] == [
            {"id": 42, "total": 99.5}
        ]


def test_the_quickstart_runs_unchanged(app_dsn: str) -> None:
    result = subprocess.run(
        [sys.executable, str(QUICKSTART), app_dsn],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all as expected" in result.stdout
