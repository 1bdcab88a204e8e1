"""Run the conformance suite against the lowest alkstore-core the engines allow, and the newest.

An engine's ``alkstore-core>=X`` is a promise to whoever installs it next to
an older core. This keeps it: for each engine it reads the core requirement
of the engine and of the contract-test plugin, finds in this repository's
history the lowest core version both allow, and the first commit that
carried it (the oldest code calling itself that version), builds that core,
installs it in a fresh virtual environment with the engine and the plugin
from this tree, and runs the plugin's suite (``pytest --alkstore-engine=NAME``).
Then the same with the newest core, this tree's. When the lowest core is
this tree's core unchanged it says so and runs once.

Installs use ``uv`` (hatch's own) when found, else ``venv`` and ``pip``; the
suite runs outside the repository, so only what the distributions ship is
tested. PostgreSQL uses ``ALKSTORE_PG_DSN``, else a throwaway cluster of the
machine's binaries.

Usage: ``python .ci/compat.py [--engine sqlite] [--engine postgres] [-- PYTEST ARGS]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _release import ROOT, Distribution, ReleaseError
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

CORE = "alkstore-core"
PLUGIN = "alkstore-contract-tests"
ENGINES = {"sqlite": "alkstore-sqlite", "postgres": "alkstore-postgres[binary]"}
# what a suite run needs beside the distributions: two workers, as CI runs it
RUNNER = ("pytest-xdist>=3.6",)


@dataclass(frozen=True)
class Core:
    """An alkstore-core to test against: its version and where its source comes from."""

    label: str
    version: Version
    commit: str | None
    """``None``: this working tree's core."""

    def __repr__(self) -> str:
        where = self.commit[:10] if self.commit else "this tree"
        return f"<Core {self.label} {self.version} ({where})>"


def core_requirement(project: str) -> SpecifierSet:
    """The versions of alkstore-core a distribution's ``pyproject.toml`` allows."""
    with (ROOT / project / "pyproject.toml").open("rb") as file:
        dependencies = tomllib.load(file)["project"]["dependencies"]
    found = [Requirement(d) for d in dependencies if Requirement(d).name == CORE]
    if len(found) != 1:
        raise ReleaseError(f"{project} should require {CORE} exactly once, not {len(found)} times")
    return found[0].specifier


def git(*args: str) -> str:
    """A git command's output, run in the repository."""
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def core_history() -> list[tuple[str, Version]]:
    """Each version alkstore-core had and the first commit that carried it, oldest first.

    Raises:
        ReleaseError: the clone is shallow, so the first commit it has would
            pass for the first to carry its version.
    """
    if git("rev-parse", "--is-shallow-repository").strip() == "true":
        raise ReleaseError(
            "a shallow clone has no history to find the lowest core in: fetch it all "
            "(git fetch --unshallow; actions/checkout with fetch-depth: 0)"
        )
    seen: dict[Version, str] = {}
    for commit in git("log", "--reverse", "--format=%H", "--", f"{CORE}/pyproject.toml").split():
        text = git("show", f"{commit}:{CORE}/pyproject.toml")
        version = Version(tomllib.loads(text)["project"]["version"])
        seen.setdefault(version, commit)
    return [(commit, version) for version, commit in seen.items()]


def cores_for(allowed: SpecifierSet) -> list[Core]:
    """The lowest core of this repository's history that ``allowed`` admits, and the newest.

    Raises:
        ReleaseError: this tree's core is outside the range (an upper bound
            the engines forgot to raise), or the clone is shallow.
    """
    newest = Version(Distribution(CORE).version())
    if not allowed.contains(newest, prereleases=True):
        raise ReleaseError(f"this tree's {CORE} {newest} is outside the engines' range {allowed}")
    # this tree comes last: a version not yet committed is first carried here
    candidates: list[tuple[str | None, Version]] = [*core_history(), (None, newest)]
    allowed_ones = [(c, v) for c, v in candidates if allowed.contains(v, prereleases=True)]
    commit, lowest = min(allowed_ones, key=lambda pair: pair[1])
    # what goes into the wheel; a changelog or test edit changes no install
    shipped = (f"{CORE}/src", f"{CORE}/pyproject.toml")
    if commit is None or not git("diff", "--name-only", commit, "--", *shipped).strip():
        where = "this tree" if commit is None else commit[:10]
        print(f"compat: the lowest {CORE} in {allowed}, {lowest} of {where}, is this tree's")
        return [Core("lowest=newest", newest, None)]
    return [Core("lowest", lowest, commit), Core("newest", newest, None)]


def copy_of(project: str, workdir: Path) -> Path:
    """A fresh copy of this tree's ``project`` under ``workdir``.

    uv rebuilds a local folder only when its ``pyproject.toml`` changes, so
    installing from the tree itself could test a wheel built before the last
    edit; a folder it has never seen is always built.
    """
    copy = workdir / "tree" / project
    shutil.copytree(ROOT / project, copy, ignore=shutil.ignore_patterns("__pycache__", "*.py[co]"))
    return copy


def core_source(core: Core, workdir: Path) -> Path:
    """A folder holding ``core``'s source: exported from its commit, or this tree's."""
    if core.commit is None:
        return copy_of(CORE, workdir)
    archive = workdir / "core.tar"
    git("archive", f"--output={archive}", core.commit, CORE)
    with tarfile.open(archive) as tar:
        # "data": nothing outside the folder, no special files (3.10.12+, 3.11.4+)
        tar.extractall(workdir / "src", filter="data")
    return workdir / "src" / CORE


def install(venv: Path, requirements: list[str]) -> None:
    """A fresh virtual environment at ``venv`` with ``requirements`` installed."""
    uv = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))
    if uv:
        subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
        python = str(venv / "bin" / "python")
        subprocess.run([uv, "pip", "install", "-q", "--python", python, *requirements], check=True)
    else:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "--disable-pip-version-check", *requirements], check=True)


def run_suite(engine: str, core: Core, pytest_args: list[str]) -> tuple[bool, float]:
    """Install and run the suite for ``engine`` on ``core``: (whether it passed, seconds)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"alkstore-compat-{engine}-") as tmp:
        workdir = Path(tmp)
        source = core_source(core, workdir)
        engine_dist = ENGINES[engine]
        name, _, extra = engine_dist.partition("[")
        requirements = [
            str(source),
            f"{copy_of(name, workdir)}{'[' + extra if extra else ''}",
            str(copy_of(PLUGIN, workdir)),
            *RUNNER,
        ]
        install(workdir / "venv", requirements)
        python = str(workdir / "venv" / "bin" / "python")
        shown = subprocess.run(
            [python, "-c", PROBE], check=True, capture_output=True, text=True
        ).stdout.strip()
        print(f"compat: {engine} on {core!r}: {shown}", flush=True)
        rundir = workdir / "run"
        rundir.mkdir()
        command = [
            python,
            "-m",
            "pytest",
            f"--alkstore-engine={engine}",
            "-n",
            "2",
            "-q",
            "-p",
            "no:cacheprovider",
            "-W",
            "error",
            f"--rootdir={rundir}",
            *pytest_args,
        ]
        code = subprocess.call(command, cwd=rundir, env={**os.environ, "PYTHONPATH": ""})
    return code == 0, time.monotonic() - started


# What the fresh environment really holds, read from inside it.
PROBE = """\
from importlib.metadata import version
from alkstore.engine import CONTRACT_VERSION
print(f"installed alkstore-core {version('alkstore-core')} (contract {CONTRACT_VERSION})")
"""


def main(argv: list[str] | None = None) -> int:
    """Run every combination asked for; see the module's docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--engine",
        action="append",
        choices=sorted(ENGINES),
        help="only these engines (default: both)",
    )
    parser.add_argument(
        "--plan", action="store_true", help="only print which cores each engine would run on"
    )
    parser.add_argument(
        "--allow",
        type=SpecifierSet,
        metavar="SPEC",
        help="plan with this core requirement instead of the engines' own",
    )
    parser.add_argument("pytest_args", nargs="*", help="passed to every pytest run")
    options = parser.parse_args(argv)
    if options.allow is not None and not options.plan:
        parser.error("--allow plans only (with --plan): the suite runs on the declared range")
    results: list[tuple[str, Core, bool, float]] = []
    try:
        for engine in options.engine or sorted(ENGINES):
            name = ENGINES[engine].partition("[")[0]
            allowed = options.allow or core_requirement(name) & core_requirement(PLUGIN)
            for core in cores_for(allowed):
                if options.plan:
                    print(f"plan: {engine} {core.label} {core.version} {core.commit or 'tree'}")
                    continue
                passed, seconds = run_suite(engine, core, options.pytest_args)
                results.append((engine, core, passed, seconds))
    except (ReleaseError, subprocess.CalledProcessError) as error:
        print(f"compat: {error}", file=sys.stderr)
        return 1
    for engine, core, passed, seconds in results:
        verdict = "ok" if passed else "FAILED"
        print(f"compat: {engine} on {core!r}: {verdict} in {seconds:.0f} s", flush=True)
    return 0 if all(passed for *_, passed, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
