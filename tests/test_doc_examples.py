"""The feature pages' Python examples run as they are written, on SQLite.

Each ```python block of a page below runs in a fresh process, in a folder of
its own (the examples open relative SQLite files), and must succeed: a page
cannot drift from the code it shows.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).parent.parent / "docs"
PAGES = ("unique-jobs.md", "dead-letters.md", "tracing.md")


def python_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S)


EXAMPLES = [
    pytest.param(code, id=f"{page}-{n}")
    for page in PAGES
    for n, code in enumerate(python_blocks(page), start=1)
]


def test_every_page_shows_an_example() -> None:
    assert all(python_blocks(page) for page in PAGES)


@pytest.mark.parametrize("code", EXAMPLES)
def test_the_example_runs(code: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
