"""The README's main job runs end to end on the SQLite default and finishes by itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

QUICKSTART = Path(__file__).parents[2] / "examples" / "quickstart.py"


def test_the_quickstart_runs_every_mechanism_and_says_all_went_as_expected() -> None:
    result = subprocess.run(
        [sys.executable, str(QUICKSTART)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "order 4 rolled back" in result.stdout
    assert "confirmations sent for orders [1, 2, 3]" in result.stdout
    assert result.stdout.strip().endswith("all as expected")
