"""Bump a distribution's version and release its changelog, together.

``python .ci/bump.py alkstore-core 0.2.0`` (``hatch run release:bump
alkstore-core 0.2.0``) sets ``version = "0.2.0"`` in
``alkstore-core/pyproject.toml`` and turns the ``## [Unreleased]`` section of
``alkstore-core/CHANGELOG.md`` into ``## [0.2.0] - TODAY`` under a fresh,
empty ``## [Unreleased]``. It refuses a version that is not newer than the
current one and a changelog with nothing unreleased, changing nothing. Then
commit, and tag ``alkstore-core-v0.2.0``: the release workflow does the rest.

Usage: ``python .ci/bump.py DISTRIBUTION VERSION [--date YYYY-MM-DD] [--root PATH]``
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

from _release import ROOT, ReleaseError, distribution, parse_version


def bump(name: str, version: str, date: datetime.date, root: Path) -> str:
    """Release ``version`` of ``name`` on ``date``; return the version it replaced."""
    dist = distribution(name, root)
    new = parse_version(version)
    current = dist.version()
    if new <= parse_version(current):
        raise ReleaseError(f"{name} is at {current}: {version} is not newer")
    released = {release.version for release in dist.releases()}
    if version in released:
        raise ReleaseError(f"{dist.changelog} already lists a release [{version}]")
    dist.release_changelog(version, date)
    dist.set_version(version)
    return current


def main(argv: list[str] | None = None) -> int:
    """Run the bump; see the module's docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("distribution", help="e.g. alkstore-core")
    parser.add_argument("version", help="the new version, e.g. 0.2.0")
    parser.add_argument("--date", type=datetime.date.fromisoformat, help="default: today (UTC)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the workspace (default: this one)")
    options = parser.parse_args(argv)
    date = options.date or datetime.datetime.now(datetime.timezone.utc).date()
    try:
        previous = bump(options.distribution, options.version, date, options.root)
    except ReleaseError as error:
        print(f"bump: {error}", file=sys.stderr)
        return 1
    print(
        f"{options.distribution}: {previous} -> {options.version} ({date.isoformat()}); "
        f"commit, then tag {options.distribution}-v{options.version}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
