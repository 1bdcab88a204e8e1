"""Check that a release tag, its distribution's version and its changelog agree.

A release is a tag ``DISTRIBUTION-vVERSION`` (``alkstore-core-v0.2.0``). It
may be published only if ``VERSION`` is the ``version`` in that
distribution's ``pyproject.toml`` and the newest release its ``CHANGELOG.md``
lists (``## [VERSION] - YYYY-MM-DD``). On success this prints
``distribution=NAME`` and ``version=VERSION`` (GitHub Actions' output format:
the release workflow appends them to ``$GITHUB_OUTPUT``) and exits 0; on any
disagreement it says every one it found on stderr and exits 1.

Usage: ``python .ci/release_check.py TAG [--root PATH]``
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from _release import DISTRIBUTIONS, ROOT, ReleaseError, distribution, parse_version

_TAG = re.compile(r"(?P<name>alkstore-[a-z-]+)-v(?P<version>[^\s]+)")


def problems(tag: str, root: Path) -> tuple[str, str, list[str]]:
    """The distribution and version ``tag`` names, and every disagreement found."""
    match = _TAG.fullmatch(tag)
    if match is None:
        raise ReleaseError(
            f"tag {tag!r} is not DISTRIBUTION-vVERSION (e.g. alkstore-core-v0.2.0); "
            f"distributions: {', '.join(DISTRIBUTIONS)}"
        )
    name, version = match["name"], match["version"]
    dist = distribution(name, root)
    parse_version(version)
    found: list[str] = []
    declared = dist.version()
    if declared != version:
        found.append(f"{dist.pyproject} declares version {declared!r}, the tag {version!r}")
    releases = dist.releases()
    if not releases:
        found.append(f"{dist.changelog} lists no release; the newest should be [{version}]")
    elif releases[0].version != version:
        found.append(
            f"{dist.changelog}'s newest release is [{releases[0].version}], the tag's {version!r}"
        )
    return name, version, found


def main(argv: list[str] | None = None) -> int:
    """Run the check; see the module's docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tag", help="the release tag, e.g. alkstore-core-v0.2.0")
    parser.add_argument("--root", type=Path, default=ROOT, help="the workspace (default: this one)")
    options = parser.parse_args(argv)
    try:
        name, version, found = problems(options.tag, options.root)
    except ReleaseError as error:
        print(f"release_check: {error}", file=sys.stderr)
        return 1
    for problem in found:
        print(f"release_check: {problem}", file=sys.stderr)
    if found:
        print(
            f"release_check: not releasing {options.tag}: tag a commit where they agree "
            f"(`hatch run release:bump {name} {version}` makes one)",
            file=sys.stderr,
        )
        return 1
    print(f"distribution={name}\nversion={version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
