"""The release tools (.ci/bump.py, .ci/release_check.py, .ci/check_dists.py),
the release workflow, and the distributions' published metadata.

The scripts run as CI runs them, in a subprocess, on copies of the real
pyproject.toml and CHANGELOG.md files under a temporary root.
"""

from __future__ import annotations

import datetime
import fnmatch
import io
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
CI = ROOT / ".ci"
DISTRIBUTIONS = ("alkstore-core", "alkstore-sqlite", "alkstore-postgres", "alkstore-contract-tests")
PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")
DATE = "2026-12-04"


def run(script: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run one of the .ci scripts with this Python; return its result."""
    return subprocess.run(
        [sys.executable, str(CI / script), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A workspace root holding copies of every distribution's release files."""
    for name in DISTRIBUTIONS:
        (tmp_path / name).mkdir()
        for file in ("pyproject.toml", "CHANGELOG.md"):
            shutil.copy(ROOT / name / file, tmp_path / name / file)
    return tmp_path


def version_of(tree: Path, name: str) -> str:
    """The version a copied pyproject declares, read by a TOML parser."""
    with (tree / name / "pyproject.toml").open("rb") as file:
        version: str = tomllib.load(file)["project"]["version"]
    return version


def headings(tree: Path, name: str) -> list[str]:
    """The second-level headings of a copied changelog."""
    text = (tree / name / "CHANGELOG.md").read_text()
    return re.findall(r"^## .*$", text, re.MULTILINE)


# --- bump ---------------------------------------------------------------------


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_bump_sets_the_version_and_dates_the_unreleased_section(tree: Path, name: str) -> None:
    before_pyproject = (tree / name / "pyproject.toml").read_text().splitlines()
    before_changelog = (tree / name / "CHANGELOG.md").read_text()
    unreleased = before_changelog.split("## [Unreleased]\n", 1)[1]

    result = run("bump.py", name, "0.2.0", "--date", DATE, "--root", tree)

    assert result.returncode == 0, result.stderr
    assert f"tag {name}-v0.2.0" in result.stdout
    assert version_of(tree, name) == "0.2.0"
    after_pyproject = (tree / name / "pyproject.toml").read_text().splitlines()
    changed = [(a, b) for a, b in zip(before_pyproject, after_pyproject, strict=True) if a != b]
    assert changed == [(f'version = "{project(name)["version"]}"', 'version = "0.2.0"')]
    assert headings(tree, name)[:2] == ["## [Unreleased]", f"## [0.2.0] - {DATE}"]
    after = (tree / name / "CHANGELOG.md").read_text()
    assert after.split(f"## [0.2.0] - {DATE}\n", 1)[1] == unreleased
    assert after.split("## [Unreleased]", 1)[1].startswith(f"\n\n## [0.2.0] - {DATE}\n")


def test_bump_defaults_to_todays_date(tree: Path) -> None:
    result = run("bump.py", "alkstore-sqlite", "0.1.0", "--root", tree)

    assert result.returncode == 0, result.stderr
    today = datetime.datetime.now(datetime.timezone.utc).date()
    # a run across midnight UTC may see either day
    assert headings(tree, "alkstore-sqlite")[1] in {
        f"## [0.1.0] - {day.isoformat()}" for day in (today, today - datetime.timedelta(days=1))
    }


def test_a_second_release_needs_something_unreleased(tree: Path) -> None:
    assert run("bump.py", "alkstore-core", "0.2.0", "--root", tree).returncode == 0
    before = snapshot(tree)

    result = run("bump.py", "alkstore-core", "0.3.0", "--root", tree)

    assert result.returncode == 1
    assert "nothing under '## [Unreleased]'" in result.stderr
    assert snapshot(tree) == before
    changelog = tree / "alkstore-core" / "CHANGELOG.md"
    text = changelog.read_text().replace("## [Unreleased]\n", "## [Unreleased]\n\n- More.\n", 1)
    changelog.write_text(text)
    assert run("bump.py", "alkstore-core", "0.3.0", "--root", tree).returncode == 0
    assert headings(tree, "alkstore-core")[1].startswith("## [0.3.0] - ")
    assert headings(tree, "alkstore-core")[2].startswith("## [0.2.0] - ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("alkstore-core", "0.1.0.dev0"),
            "0.1.0.dev0 is not newer",
        ),
        (("alkstore-core", "0.0.9"), "0.0.9 is not newer"),
        (("alkstore-core", "v0.2.0"), "'v0.2.0' is not in normal form: write '0.2.0'"),
        (("alkstore-core", "0.2.0-rc1"), "write '0.2.0rc1'"),
        (("alkstore-core", "soon"), "'soon' is not a version"),
        (("alkstore-redis", "0.2.0"), "unknown distribution 'alkstore-redis'"),
    ],
)
def test_bump_refuses_bad_requests_and_changes_nothing(
    tree: Path, args: tuple[str, str], message: str
) -> None:
    before = snapshot(tree)

    result = run("bump.py", *args, "--root", tree)

    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert snapshot(tree) == before


def test_bump_refuses_the_current_version(tree: Path) -> None:
    current = project("alkstore-core")["version"]

    result = run("bump.py", "alkstore-core", current, "--root", tree)

    assert result.returncode == 1
    assert f"alkstore-core is at {current}: {current} is not newer" in result.stderr


def test_bump_refuses_a_changelog_without_an_unreleased_section(tree: Path) -> None:
    changelog = tree / "alkstore-postgres" / "CHANGELOG.md"
    changelog.write_text(changelog.read_text().replace("## [Unreleased]", "## Next", 1))
    before = snapshot(tree)

    result = run("bump.py", "alkstore-postgres", "0.2.0", "--root", tree)

    assert result.returncode == 1
    assert "its first section is not '## [Unreleased]'" in result.stderr
    assert snapshot(tree) == before


def snapshot(tree: Path) -> dict[str, bytes]:
    """Every file under ``tree``, by relative path."""
    return {str(p.relative_to(tree)): p.read_bytes() for p in tree.rglob("*") if p.is_file()}


# --- release_check ----------------------------------------------------------------


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_the_check_passes_once_bumped_and_names_the_distribution(tree: Path, name: str) -> None:
    assert run("bump.py", name, "0.2.0", "--date", DATE, "--root", tree).returncode == 0

    result = run("release_check.py", f"{name}-v0.2.0", "--root", tree)

    assert result.returncode == 0, result.stderr
    assert result.stdout == f"distribution={name}\nversion=0.2.0\n"


def test_the_check_refuses_a_tag_ahead_of_the_tree(tree: Path) -> None:
    result = run("release_check.py", "alkstore-core-v0.2.0", "--root", tree)

    assert result.returncode == 1
    assert (
        f"declares version '{project('alkstore-core')['version']}', the tag '0.2.0'"
        in result.stderr
    )
    assert "lists no release; the newest should be [0.2.0]" in result.stderr
    assert "hatch run release:bump alkstore-core 0.2.0" in result.stderr
    assert result.stdout == ""


def test_the_check_refuses_a_pyproject_that_disagrees_with_the_changelog(tree: Path) -> None:
    assert run("bump.py", "alkstore-sqlite", "0.2.0", "--root", tree).returncode == 0
    pyproject = tree / "alkstore-sqlite" / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('version = "0.2.0"', 'version = "0.2.1"'))

    assert run("release_check.py", "alkstore-sqlite-v0.2.1", "--root", tree).returncode == 1
    result = run("release_check.py", "alkstore-sqlite-v0.2.0", "--root", tree)

    assert result.returncode == 1
    assert "declares version '0.2.1', the tag '0.2.0'" in result.stderr
    assert "newest release is" not in result.stderr


def test_the_check_refuses_a_changelog_whose_newest_release_is_another(tree: Path) -> None:
    assert run("bump.py", "alkstore-postgres", "0.2.0", "--root", tree).returncode == 0
    pyproject = tree / "alkstore-postgres" / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('version = "0.2.0"', 'version = "0.2.1"'))

    result = run("release_check.py", "alkstore-postgres-v0.2.1", "--root", tree)

    assert result.returncode == 1
    assert "newest release is [0.2.0], the tag's '0.2.1'" in result.stderr


def test_the_check_refuses_another_distributions_tag(tree: Path) -> None:
    assert run("bump.py", "alkstore-core", "0.2.0", "--root", tree).returncode == 0

    result = run("release_check.py", "alkstore-sqlite-v0.2.0", "--root", tree)

    assert result.returncode == 1
    assert "alkstore-sqlite" in result.stderr


@pytest.mark.parametrize(
    ("tag", "message"),
    [
        ("v0.2.0", "is not DISTRIBUTION-vVERSION"),
        ("alkstore-core-0.2.0", "is not DISTRIBUTION-vVERSION"),
        ("alkstore-redis-v0.2.0", "unknown distribution 'alkstore-redis'"),
        ("alkstore-core-v0.2.0-rc1", "write '0.2.0rc1'"),
    ],
)
def test_the_check_refuses_malformed_tags(tree: Path, tag: str, message: str) -> None:
    result = run("release_check.py", tag, "--root", tree)

    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_the_check_refuses_a_heading_it_cannot_read(tree: Path) -> None:
    assert run("bump.py", "alkstore-core", "0.2.0", "--date", DATE, "--root", tree).returncode == 0
    changelog = tree / "alkstore-core" / "CHANGELOG.md"
    changelog.write_text(changelog.read_text().replace(f"[0.2.0] - {DATE}", "[0.2.0] (soon)"))

    result = run("release_check.py", "alkstore-core-v0.2.0", "--root", tree)

    assert result.returncode == 1
    assert "is not '## [VERSION] - YYYY-MM-DD'" in result.stderr


def test_the_real_tree_has_no_release_yet() -> None:
    result = run("release_check.py", f"alkstore-core-v{project('alkstore-core')['version']}")

    assert result.returncode == 1
    assert "lists no release" in result.stderr


# --- the release workflow ---------------------------------------------------------


def workflow(name: str) -> dict[str, Any]:
    """A workflow under .github/workflows, parsed."""
    data: dict[Any, Any] = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    # YAML 1.1 reads the key `on` as True
    data["on"] = data.pop(True, data.get("on"))
    return data


def test_the_release_workflow_runs_on_each_distributions_tags_only() -> None:
    patterns = workflow("release.yml")["on"]["push"]["tags"]

    for name in DISTRIBUTIONS:
        assert any(fnmatch.fnmatchcase(f"{name}-v0.2.0", p) for p in patterns)
    assert not any(fnmatch.fnmatchcase("v0.2.0", p) for p in patterns)
    assert not any(fnmatch.fnmatchcase("alkstore-core-0.2.0", p) for p in patterns)


def test_the_release_workflow_checks_builds_once_then_publishes_by_trust() -> None:
    jobs = workflow("release.yml")["jobs"]
    steps = {
        job: [step.get("run", step.get("uses", "")) for step in jobs[job]["steps"]] for job in jobs
    }

    assert any('release_check.py "$GITHUB_REF_NAME"' in step for step in steps["check"])
    assert jobs["build"]["needs"] == "check"
    builds = [step for job in steps.values() for step in job if "python -m build" in step]
    assert builds == ['python -m build --outdir dist "${{ needs.check.outputs.distribution }}"']
    assert "twine check --strict dist/*" in steps["build"]
    assert any(step.startswith("actions/upload-artifact") for step in steps["build"])
    publish = jobs["publish"]
    assert set(publish["needs"]) == {"check", "build"}
    assert publish["environment"]["name"] == "pypi"
    assert publish["permissions"] == {"id-token": "write"}
    assert steps["publish"][0].startswith("actions/download-artifact")
    assert steps["publish"][-1] == "pypa/gh-action-pypi-publish@release/v1"
    assert "actions/checkout@v4" not in steps["publish"]
    assert workflow("release.yml")["permissions"] == {"contents": "read"}


def test_ci_tests_every_python_the_classifiers_name() -> None:
    matrix = workflow("ci.yml")["jobs"]["test"]["strategy"]["matrix"]["python"]

    assert tuple(matrix) == PYTHONS


# --- check_dists ------------------------------------------------------------------


def make_sdist(folder: Path, extra: tuple[str, ...] = (), drop: tuple[str, ...] = ()) -> Path:
    """A small sdist in ``folder`` with the usual files, plus ``extra``, minus ``drop``."""
    top = "alkstore_core-0.2.0"
    files = (
        "pyproject.toml",
        "PKG-INFO",
        "README.md",
        "CHANGELOG.md",
        "LICENSE",
        "src/alkstore/__init__.py",
        "src/alkstore/py.typed",
        "tests/test_it.py",
        *extra,
    )
    path = folder / f"{top}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for name in files:
            if name not in drop:
                info = tarfile.TarInfo(f"{top}/{name}")
                info.size = 1
                archive.addfile(info, io.BytesIO(b"x"))
    return path


def make_wheel(folder: Path, extra: tuple[str, ...] = (), drop: tuple[str, ...] = ()) -> Path:
    """A small wheel in ``folder`` with the usual files, plus ``extra``, minus ``drop``."""
    info = "alkstore_core-0.2.0.dist-info"
    files = (
        "alkstore/__init__.py",
        "alkstore/py.typed",
        f"{info}/METADATA",
        f"{info}/licenses/LICENSE",
        *extra,
    )
    path = folder / "alkstore_core-0.2.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name in files:
            if name not in drop:
                archive.writestr(name, "x")
    return path


def test_check_dists_passes_complete_archives(tmp_path: Path) -> None:
    make_sdist(tmp_path)
    make_wheel(tmp_path)

    result = run("check_dists.py", tmp_path)

    assert result.returncode == 0, result.stderr
    assert "alkstore_core-0.2.0.tar.gz: ok" in result.stdout


@pytest.mark.parametrize(
    ("sdist", "wheel", "message"),
    [
        ({"drop": ("LICENSE",)}, {}, "alkstore_core-0.2.0.tar.gz: no LICENSE"),
        ({"drop": ("CHANGELOG.md",)}, {}, "no CHANGELOG.md"),
        ({"drop": ("tests/test_it.py",)}, {}, "no tests/"),
        ({"drop": ("src/alkstore/py.typed",)}, {}, "no src/PACKAGE/py.typed"),
        ({"extra": (".venv/bin/python",)}, {}, "holds .venv/bin/python"),
        (
            {"extra": ("src/alkstore/__pycache__/x.cpython-312.pyc",)},
            {},
            "holds src/alkstore/__pycache__",
        ),
        ({"extra": ("tests/app.db",)}, {}, "holds tests/app.db"),
        ({}, {"drop": ("alkstore_core-0.2.0.dist-info/licenses/LICENSE",)}, "licenses/LICENSE"),
        ({}, {"drop": ("alkstore/py.typed",)}, "no PACKAGE/py.typed"),
        ({}, {"extra": (".mypy_cache/3.12/x.json",)}, "holds .mypy_cache"),
    ],
)
def test_check_dists_names_what_is_wrong(
    tmp_path: Path,
    sdist: dict[str, tuple[str, ...]],
    wheel: dict[str, tuple[str, ...]],
    message: str,
) -> None:
    make_sdist(tmp_path, **sdist)
    make_wheel(tmp_path, **wheel)

    result = run("check_dists.py", tmp_path)

    assert result.returncode == 1
    assert message in result.stderr


def test_check_dists_wants_both_kinds(tmp_path: Path) -> None:
    make_wheel(tmp_path)

    result = run("check_dists.py", tmp_path)

    assert result.returncode == 1
    assert "expected sdists and wheels, found 0 and 1" in result.stderr


# --- what each distribution publishes ---------------------------------------------------


def project(name: str) -> dict[str, Any]:
    """The ``[project]`` table of a distribution's pyproject."""
    with (ROOT / name / "pyproject.toml").open("rb") as file:
        table: dict[str, Any] = tomllib.load(file)["project"]
    return table


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_each_distribution_publishes_its_license_urls_and_classifiers(name: str) -> None:
    meta = project(name)
    license_text = (ROOT / name / "LICENSE").read_text()

    assert meta["license"] == "Apache-2.0"
    assert meta["license-files"] == ["LICENSE"]
    assert "Apache License\n                           Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text
    urls = meta["urls"]
    assert {"Homepage", "Documentation", "Changelog", "Issues"} <= set(urls)
    assert urls["Changelog"].endswith(f"/blob/main/{name}/CHANGELOG.md")
    assert len({urls["Homepage"], urls["Issues"].removesuffix("/issues")}) == 1
    classifiers = set(meta["classifiers"])
    assert {f"Programming Language :: Python :: {python}" for python in PYTHONS} <= classifiers
    assert "License :: OSI Approved :: Apache Software License" in classifiers
    assert "Typing :: Typed" in classifiers
    assert list((ROOT / name / "src").glob("*/py.typed"))
    assert meta["requires-python"] == ">=3.10"


def test_the_plugin_is_classified_as_a_pytest_framework() -> None:
    assert "Framework :: Pytest" in project("alkstore-contract-tests")["classifiers"]
    assert "alkstore" in project("alkstore-contract-tests")["entry-points"]["pytest11"]


def test_postgres_leaves_the_psycopg_implementation_to_the_application() -> None:
    meta = project("alkstore-postgres")
    requirements = [re.split(r"[<>=!~ ;]", r, maxsplit=1)[0] for r in meta["dependencies"]]

    assert "psycopg" in requirements
    assert "psycopg-pool" in requirements
    assert not [r for r in requirements if r.startswith("psycopg[")]
    extras = meta["optional-dependencies"]
    assert [r.split(">=")[0] for r in extras["binary"]] == ["psycopg[binary]"]
    assert [r.split(">=")[0] for r in extras["c"]] == ["psycopg[c]"]
    readme = (ROOT / "alkstore-postgres" / "README.md").read_text()
    assert "alkstore-postgres[binary]" in readme
    assert "alkstore-postgres[c]" in readme


# --- compat: the lowest core the engines allow --------------------------------------


def lower_bound(name: str) -> Version:
    """The lowest alkstore-core a distribution's requirement names (its ``>=``)."""
    requirement = next(
        Requirement(r) for r in project(name)["dependencies"] if r.startswith("alkstore-core")
    )
    (bound,) = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
    return bound


def plan(*args: str) -> dict[str, list[tuple[str, str, str]]]:
    """What compat.py would run, by engine: (label, version, commit or 'tree')."""
    result = run("compat.py", "--plan", *args)
    assert result.returncode == 0, result.stderr
    found: dict[str, list[tuple[str, str, str]]] = {}
    for line in result.stdout.splitlines():
        if line.startswith("plan: "):
            engine, label, version, commit = line.removeprefix("plan: ").split()
            found.setdefault(engine, []).append((label, version, commit))
    return found


def core_version_at(commit: str) -> str | None:
    """alkstore-core's version at ``commit``, or None where it had none."""
    shown = subprocess.run(
        ["git", "show", f"{commit}:alkstore-core/pyproject.toml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if shown.returncode != 0:
        return None
    version: str = tomllib.loads(shown.stdout)["project"]["version"]
    return version


needs_history = pytest.mark.skipif(
    subprocess.run(
        ["git", "rev-parse", "--is-shallow-repository"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    != "false",
    reason="needs the repository's whole history (not a shallow clone)",
)


@needs_history
def test_the_engines_lower_bounds_name_a_core_this_repository_carried() -> None:
    tree_core = Version(project("alkstore-core")["version"])

    for engine, runs in plan().items():
        bound = max(lower_bound(f"alkstore-{engine}"), lower_bound("alkstore-contract-tests"))
        _, version, commit = runs[0]
        assert Version(version) == bound
        assert runs[-1][:2] in {("newest", str(tree_core)), ("lowest=newest", str(tree_core))}
        if commit != "tree":
            assert core_version_at(commit) == version
            assert core_version_at(f"{commit}~1") != version


@needs_history
def test_an_older_bound_plans_the_first_commit_that_carried_it() -> None:
    first = subprocess.run(
        ["git", "log", "--reverse", "--format=%H", "--", "alkstore-core/pyproject.toml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[0]

    runs = plan("--engine", "sqlite", "--allow", ">=0.1.0.dev0,<0.2")["sqlite"]

    assert runs == [
        ("lowest", "0.1.0.dev0", first),
        ("newest", project("alkstore-core")["version"], "tree"),
    ]


def test_compat_refuses_a_range_the_tree_is_outside_of() -> None:
    result = run("compat.py", "--plan", "--allow", ">=5")

    assert result.returncode == 1
    assert "outside the engines' range >=5" in result.stderr


def test_ci_runs_the_compatibility_matrix_for_each_engine_with_history() -> None:
    job = workflow("ci.yml")["jobs"]["compat"]

    assert set(job["strategy"]["matrix"]["engine"]) == {"sqlite", "postgres"}
    checkout = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout"))
    assert checkout["with"]["fetch-depth"] == 0
    assert job["steps"][-1]["run"] == "hatch run compat:run --engine ${{ matrix.engine }}"
