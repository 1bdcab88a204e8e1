"""The site's configuration and the pages that mirror the code.

``hatch run docs:build`` (mkdocs --strict) refuses broken links and anchors;
what it lets through by design is checked here: every nav entry but the
dashboard's names a page that exists (the dashboard page arrives with the
dashboard, so mkdocs.yml reports a missing nav page as information only),
and the pytest plugin's options page says what the real parser says.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
ARRIVES_LATER = {"dashboard.md"}  # docs/dashboard.md comes with the dashboard (issue 17)


class _ConfigLoader(yaml.SafeLoader):
    """mkdocs.yml names Python objects (``!!python/name:...``): read them as their names."""


_ConfigLoader.add_multi_constructor(
    "tag:yaml.org,2002:python/", lambda loader, suffix, node: f"{suffix}:{node.value}"
)


def nav_pages(entries: Any) -> Iterator[str]:
    if isinstance(entries, str):
        yield entries
    elif isinstance(entries, list):
        for entry in entries:
            yield from nav_pages(entry)
    elif isinstance(entries, dict):
        for value in entries.values():
            yield from nav_pages(value)


def config() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.load((ROOT / "mkdocs.yml").read_text(), _ConfigLoader)
    return loaded


def test_every_nav_entry_is_a_page() -> None:
    pages = list(nav_pages(config()["nav"]))
    assert len(pages) >= 30
    missing = [page for page in pages if not (DOCS / page).is_file()]
    assert set(missing) <= ARRIVES_LATER, f"nav entries without a page: {missing}"


def test_every_page_is_in_the_nav() -> None:
    listed = set(nav_pages(config()["nav"]))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert pages - listed == set(), "pages the site builds but no menu reaches"


def plugin_help(cwd: Path) -> dict[str, str]:
    """``pytest --help``'s alkstore group: each option as shown, with its help text."""
    shown = subprocess.run(
        [sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
        cwd=cwd, capture_output=True, text=True,
        timeout=60, check=True,
    ).stdout  # fmt: skip
    section = shown.split("alkstore conformance suite:\n", 1)[1].split("\n\n", 1)[0]
    options: dict[str, str] = {}
    for line in section.splitlines():
        if line.startswith("  --"):
            name, _, text = line.strip().partition("  ")
            options[name] = text.strip()
        else:
            options[name] = f"{options[name]} {line.strip()}".strip()
    return options


def normalized(text: str) -> str:
    return " ".join(text.split())


def test_the_plugin_page_lists_exactly_the_real_options(tmp_path: Path) -> None:
    options = plugin_help(tmp_path)  # a folder with no conftest or pytest configuration
    assert len(options) >= 4
    page = (DOCS / "api" / "pytest-plugin.md").read_text()
    documented = re.findall(r"^## `(--alkstore-[^`]+)`$", page, re.M)
    assert documented == list(options)
    for name, text in options.items():
        assert normalized(text) in normalized(page), f"{name}: the page lacks its help text"
