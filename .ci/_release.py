"""A distribution's release metadata: its version and its changelog.

Shared by ``release_check.py`` (does a tag agree with the tree?) and
``bump.py`` (make the tree agree with a new version). Both read and edit the
files as text, so a bump changes two lines of ``pyproject.toml`` and one
heading of ``CHANGELOG.md`` and leaves every comment and blank line alone.

The changelogs follow Keep a Changelog 1.1: ``## [Unreleased]`` on top, then
one ``## [VERSION] - YYYY-MM-DD`` heading per release, newest first.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTIONS = ("alkstore-core", "alkstore-sqlite", "alkstore-postgres", "alkstore-contract-tests")

UNRELEASED = "## [Unreleased]"
_PROJECT_TABLE = re.compile(r"^\[project\]$", re.MULTILINE)
_ANY_TABLE = re.compile(r"^\[", re.MULTILINE)
_VERSION_LINE = re.compile(r'^version = "([^"\n]*)"$', re.MULTILINE)
_HEADING = re.compile(r"^## \[([^\]\n]+)\](.*)$", re.MULTILINE)
_RELEASED = re.compile(r" - (\d{4}-\d{2}-\d{2})")


class ReleaseError(Exception):
    """The tree (or the request) is not fit for a release; the message says why."""


@dataclass(frozen=True)
class Release:
    """One ``## [VERSION] - DATE`` heading of a changelog."""

    version: str
    date: datetime.date


@dataclass(frozen=True)
class Distribution:
    """One of the workspace's distributions, found under ``root``."""

    name: str
    root: Path = ROOT

    @property
    def folder(self) -> Path:
        """The distribution's folder."""
        return self.root / self.name

    @property
    def pyproject(self) -> Path:
        """Its ``pyproject.toml``."""
        return self.folder / "pyproject.toml"

    @property
    def changelog(self) -> Path:
        """Its ``CHANGELOG.md``."""
        return self.folder / "CHANGELOG.md"

    def version(self) -> str:
        """The ``[project]`` version its ``pyproject.toml`` declares."""
        return _version_match(self.pyproject).group(1)

    def set_version(self, version: str) -> None:
        """Write ``version`` into its ``pyproject.toml``."""
        match = _version_match(self.pyproject)
        text = self.pyproject.read_text(encoding="utf-8")
        replaced = f"{text[: match.start(1)]}{version}{text[match.end(1) :]}"
        self.pyproject.write_text(replaced, encoding="utf-8")

    def releases(self) -> list[Release]:
        """The released versions its changelog lists, newest first."""
        return [release for release in _headings(self.changelog) if release is not None]

    def release_changelog(self, version: str, date: datetime.date) -> None:
        """Turn the changelog's unreleased section into ``version``'s, on ``date``.

        A fresh, empty ``## [Unreleased]`` section goes on top.

        Raises:
            ReleaseError: the changelog has no unreleased section on top, or
                nothing under it.
        """
        text = self.changelog.read_text(encoding="utf-8")
        headings = list(_HEADING.finditer(text))
        if not headings or headings[0].group(0) != UNRELEASED:
            raise ReleaseError(f"{self.changelog}: its first section is not {UNRELEASED!r}")
        end = headings[1].start() if len(headings) > 1 else len(text)
        if not text[headings[0].end() : end].strip():
            raise ReleaseError(
                f"{self.changelog}: nothing under {UNRELEASED!r}: a release says what changed"
            )
        released = f"{UNRELEASED}\n\n## [{version}] - {date.isoformat()}"
        text = f"{text[: headings[0].start()]}{released}{text[headings[0].end() :]}"
        self.changelog.write_text(text, encoding="utf-8")


def distribution(name: str, root: Path = ROOT) -> Distribution:
    """The distribution called ``name``.

    Raises:
        ReleaseError: no such distribution in this workspace.
    """
    if name not in DISTRIBUTIONS:
        raise ReleaseError(
            f"unknown distribution {name!r}; the workspace has {', '.join(DISTRIBUTIONS)}"
        )
    found = Distribution(name, root)
    if not found.pyproject.is_file():
        raise ReleaseError(f"{found.pyproject} does not exist")
    return found


def parse_version(text: str) -> Version:
    """``text`` as a PEP 440 version, in its normal form only.

    Raises:
        ReleaseError: not a version, or not written as PyPI would write it
            (``v1.0``, ``1.0.0-rc1``), which would make a tag, a file name and
            a heading disagree in spelling.
    """
    try:
        version = Version(text)
    except InvalidVersion:
        raise ReleaseError(f"{text!r} is not a version (PEP 440, e.g. 0.2.0 or 0.2.0rc1)") from None
    if str(version) != text:
        raise ReleaseError(f"{text!r} is not in normal form: write {str(version)!r}")
    return version


def _version_match(pyproject: Path) -> re.Match[str]:
    text = pyproject.read_text(encoding="utf-8")
    table = _PROJECT_TABLE.search(text)
    if table is not None:
        following = _ANY_TABLE.search(text, table.end())
        end = following.start() if following else len(text)
        match = _VERSION_LINE.search(text, table.end(), end)
        if match is not None:
            return match
    raise ReleaseError(f'{pyproject}: no version = "..." line in its [project] table')


def _headings(changelog: Path) -> list[Release | None]:
    """Every ``## [...]`` heading: a ``Release``, or ``None`` for the unreleased one."""
    text = changelog.read_text(encoding="utf-8")
    found: list[Release | None] = []
    for match in _HEADING.finditer(text):
        name, rest = match.group(1), match.group(2)
        if name == "Unreleased" and not rest.strip():
            found.append(None)
            continue
        dated = _RELEASED.fullmatch(rest)
        if dated is None:
            raise ReleaseError(
                f"{changelog}: heading {match.group(0)!r} is not '## [VERSION] - YYYY-MM-DD'"
            )
        try:
            date = datetime.date.fromisoformat(dated.group(1))
        except ValueError:
            raise ReleaseError(f"{changelog}: {match.group(0)!r} has no real date") from None
        found.append(Release(name, date))
    return found
