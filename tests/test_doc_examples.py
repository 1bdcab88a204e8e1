"""Every Python example of the documentation runs as it is written.

Each runnable block of every page under docs/ runs in a fresh process, in a
folder of its own (the examples open relative SQLite files), and must exit 0:
a page cannot drift from the code it shows.

The convention, for whoever writes a page:

- A block fenced ```` ```python ```` is runnable. It runs on SQLite — unless
  it names PostgreSQL with the target ``"postgresql://localhost/app"``: then
  that target is replaced by a fresh database on the test server
  (``ALKSTORE_PG_DSN``, else a throwaway cluster), dropped after the block,
  and the block runs there. A database rather than a schema, as examples may
  connect with psycopg too and keep their own tables where it lands.
- A Python block that must not run — another library's code (the "Coming
  from" page), or a fragment of a larger program — is fenced
  ```` ```{.python .no-run} ````: the site highlights it as Python, this test
  only counts it.
- Blocks in any other language (``console``, ``shell``, ``text``, ``toml``,
  ``yaml``, ``ini``, ``mermaid``, ...) are not Python and never run.

No block is skipped silently: every page with a Python block has at least
one that runs, unless :data:`NOTHING_RUNS` names it with the reason.
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

DOCS = Path(__file__).parent.parent / "docs"
PG_TARGET = "postgresql://localhost/app"
RUNNABLE, NO_RUN = "python", "{.python .no-run}"

# An opening fence (possibly indented, in a list), its info string, the body,
# and the closing fence at the same indentation.
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<info>[^`\n]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S
)

NOTHING_RUNS: dict[str, str] = {
    "pgbouncer.md": "its example needs a PgBouncer: alkstore-postgres/tests/test_pg_pgbouncer.py "
    "and the suite (--alkstore-option pooler=pgbouncer) run the same options through a real one",
}


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    info: str
    code: str

    @property
    def on_postgres(self) -> bool:
        return PG_TARGET in self.code


def pages() -> list[str]:
    return sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))


def blocks(page: str) -> list[Block]:
    text = (DOCS / page).read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        indent = match["indent"]
        body = "".join(
            line.removeprefix(indent) for line in match["body"].splitlines(keepends=True)
        )
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(page, line, match["info"].strip(), body))
    return found


def runnable(page: str) -> list[Block]:
    return [block for block in blocks(page) if block.info == RUNNABLE]


EXAMPLES = [block for page in pages() for block in runnable(page)]


def test_python_blocks_are_fenced_by_the_convention() -> None:
    odd = [
        f"{block.page}:{block.line}: ```{block.info}"
        for page in pages()
        for block in blocks(page)
        if "python" in block.info.lower() and block.info not in (RUNNABLE, NO_RUN)
    ]
    assert not odd, (
        "Python blocks fenced neither ```python nor ```{.python .no-run}:\n" + "\n".join(odd)
    )


def test_every_page_with_python_runs_some() -> None:
    counts = {
        page: (len(runnable(page)), sum(b.info == NO_RUN for b in blocks(page))) for page in pages()
    }
    silent = [
        f"{page}: all {no_run} Python blocks are marked no-run"
        for page, (runs, no_run) in counts.items()
        if no_run and not runs and page not in NOTHING_RUNS
    ]
    assert not silent, "\n".join(silent)
    stale = [page for page in NOTHING_RUNS if counts.get(page, (1, 0))[0]]
    assert not stale, f"NOTHING_RUNS names pages that run examples now: {stale}"


def test_the_docs_show_runnable_examples() -> None:
    # The parametrization below must not collapse to nothing if the parser broke.
    assert len(EXAMPLES) >= 50
    assert any(block.on_postgres for block in EXAMPLES)


@pytest.fixture
def pg_target(request: pytest.FixtureRequest) -> Iterator[str]:
    server: str = request.getfixturevalue("server_dsn")
    name = f"alkstore_docs_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    yield make_conninfo(server, dbname=name)
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.parametrize("block", EXAMPLES, ids=lambda block: f"{block.page}:{block.line}")
def test_the_example_runs(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    code = block.code
    if block.on_postgres:
        code = code.replace(PG_TARGET, request.getfixturevalue("pg_target"))
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, f"{block.page}:{block.line}\n{result.stderr}"
