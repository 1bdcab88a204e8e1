"""The cron guide's examples (docs/cron.md) run unchanged on both engines."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import alkstore

ROOT = Path(__file__).parents[1]
GUIDE = ROOT / "docs" / "cron.md"


def guide_examples() -> list[str]:
    return [str(block) for block in re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)]


def run_example(code: str, app_dsn: str) -> str:
    assert '"cron-example.db"' in code, "the example's target is what the test swaps"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(code.replace('"cron-example.db"', repr(app_dsn)), {})  # the guide's own code
    return printed.getvalue()


def test_the_guides_first_example_makes_a_schedule_in_berlin(app_dsn: str) -> None:
    first, _ = guide_examples()
    assert run_example(first, app_dsn) == "30 2 * * * Europe/Berlin\n"


def test_the_guides_full_example_lists_refuses_and_fires(app_dsn: str) -> None:
    _, full = guide_examples()
    lines = run_example(full, app_dsn).splitlines()
    assert [line.split()[:2] for line in lines[:3]] == [
        ["heartbeat", "@every"], ["nightly-report", "30"], ["weekly-digest", "0"],
    ]  # fmt: skip
    assert re.fullmatch(r"nightly-report +30 2 \* \* \* +next \S+ 02:30 CES?T", lines[1])
    assert re.fullmatch(r"weekly-digest +0 8 \* \* MON +next \S+ 08:00 E[SD]T", lines[2])
    assert lines[3].startswith("refused: schedule spec '30 2 * *' has 4 fields")
    assert lines[4] in ("heartbeats: 1", "heartbeats: 2")
    with alkstore.open(app_dsn) as store:
        assert [s.tz for s in store.inspect().schedules()] == [
            None, "Europe/Berlin", "America/New_York",
        ]  # fmt: skip
