"""Check what the sdists and wheels in a folder contain.

``twine check`` reads metadata; this reads the archives. Every sdist holds
its distribution's ``pyproject.toml``, ``PKG-INFO``, ``README.md``,
``CHANGELOG.md``, ``LICENSE``, a package under ``src/`` with ``py.typed``,
and its ``tests/``; every wheel holds its package with ``py.typed`` and the
``LICENSE`` under ``.dist-info/licenses/``. Neither holds what a working tree
collects (virtual environments, caches, bytecode, databases, build output).
Exits 1 naming every problem, 0 after listing what it checked.

Usage: ``python .ci/check_dists.py [FOLDER]`` (default ``dist``)
"""

from __future__ import annotations

import argparse
import re
import sys
import tarfile
import zipfile
from pathlib import Path

_UNWANTED = re.compile(
    r"(^|/)(\.venv|venv|\.tox|\.nox|__pycache__|\.mypy_cache|\.ruff_cache|\.pytest_cache|"
    r"\.hypothesis|build|dist|\.git)(/|$)|\.py[cod]$|\.db(-wal|-shm)?$|\.egg-info(/|$)"
)
_SDIST_FILES = ("pyproject.toml", "PKG-INFO", "README.md", "CHANGELOG.md", "LICENSE")


def sdist_problems(path: Path) -> list[str]:
    """What is missing from, or should not be in, the sdist at ``path``."""
    with tarfile.open(path) as archive:
        names = archive.getnames()
    top = path.name.removesuffix(".tar.gz")
    inside = [name.removeprefix(f"{top}/") for name in names if name.startswith(f"{top}/")]
    found = [
        f"{path.name}: {name} is outside {top}/"
        for name in names
        if name != top and not name.startswith(f"{top}/")
    ]
    found += [f"{path.name}: no {wanted}" for wanted in _SDIST_FILES if wanted not in inside]
    if not any(re.fullmatch(r"src/[a-z_]+/py\.typed", name) for name in inside):
        found.append(f"{path.name}: no src/PACKAGE/py.typed")
    if not any(name.startswith("tests/") for name in inside):
        found.append(f"{path.name}: no tests/")
    return found + [f"{path.name}: holds {name}" for name in inside if _UNWANTED.search(name)]


def wheel_problems(path: Path) -> list[str]:
    """What is missing from, or should not be in, the wheel at ``path``."""
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    info = next((name.split("/")[0] for name in names if ".dist-info/" in name), None)
    found = [] if info else [f"{path.name}: no .dist-info"]
    if info and f"{info}/licenses/LICENSE" not in names:
        found.append(f"{path.name}: no {info}/licenses/LICENSE")
    if not any(re.fullmatch(r"[a-z_]+/py\.typed", name) for name in names):
        found.append(f"{path.name}: no PACKAGE/py.typed")
    return found + [f"{path.name}: holds {name}" for name in names if _UNWANTED.search(name)]


def main(argv: list[str] | None = None) -> int:
    """Check every archive in the folder; see the module's docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, nargs="?", default=Path("dist"))
    options = parser.parse_args(argv)
    sdists = sorted(options.folder.glob("*.tar.gz"))
    wheels = sorted(options.folder.glob("*.whl"))
    found = [problem for sdist in sdists for problem in sdist_problems(sdist)]
    found += [problem for wheel in wheels for problem in wheel_problems(wheel)]
    if not sdists or not wheels:
        found.append(
            f"{options.folder}: expected sdists and wheels, found {len(sdists)} and {len(wheels)}"
        )
    for problem in found:
        print(f"check_dists: {problem}", file=sys.stderr)
    if found:
        return 1
    for archive in [*sdists, *wheels]:
        print(f"check_dists: {archive.name}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
