"""The workspace's four distributions build as wheels that carry their entry points."""

from __future__ import annotations

import configparser
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).parents[2]

EXPECTED = {
    "alkstore-core": ("alkstore", {"console_scripts": {"alkstore": "alkstore._cli:main"}}),
    "alkstore-sqlite": (
        "alkstore_sqlite",
        {"alkstore.engines": {"sqlite": "alkstore_sqlite:SQLiteEngine"}},
    ),
    "alkstore-postgres": (
        "alkstore_postgres",
        {"alkstore.engines": {"postgres": "alkstore_postgres:PostgresEngine"}},
    ),
    "alkstore-contract-tests": (
        "alkstore_contract_tests",
        {"pytest11": {"alkstore": "alkstore_contract_tests.plugin"}},
    ),
}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, zipfile.ZipFile]:
    out = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [
            sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
            "--no-build-isolation", "--no-index", "--disable-pip-version-check",
            "--wheel-dir", str(out), *(str(REPOSITORY / name) for name in EXPECTED),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    found = {}
    for wheel in out.glob("*.whl"):
        distribution = wheel.name.split("-")[0].replace("_", "-")
        found[distribution] = zipfile.ZipFile(wheel)
    return found


@pytest.mark.parametrize("distribution", sorted(EXPECTED))
def test_each_wheel_carries_its_entry_points_and_type_marker(
    wheels: dict[str, zipfile.ZipFile], distribution: str
) -> None:
    package, entry_points = EXPECTED[distribution]
    wheel = wheels[distribution]
    names = wheel.namelist()
    assert f"{package}/py.typed" in names
    assert f"{package}/__init__.py" in names
    assert not any("/tests/" in name or name.startswith("tests/") for name in names)
    metadata_file = next(name for name in names if name.endswith(".dist-info/entry_points.txt"))
    parser = configparser.ConfigParser()
    parser.read_string(wheel.read(metadata_file).decode())
    found = {section: dict(parser[section]) for section in parser.sections()}
    assert found == entry_points


@pytest.mark.parametrize(
    ("distribution", "lowest"),
    [
        ("alkstore-sqlite", "0.1.0.dev4"),
        ("alkstore-postgres", "0.1.0.dev6"),  # wait_budget
        # its suite pins fixes of core itself (error texts, portable parameters,
        # transactional consumer batches, cancelled run_async, stores closed
        # in a forked child, an async store refusing another event loop, a
        # store closed while threads use its transactions)
        ("alkstore-contract-tests", "0.1.0.dev10"),
    ],
)
def test_engines_and_plugin_depend_on_a_range_of_core(
    wheels: dict[str, zipfile.ZipFile], distribution: str, lowest: str
) -> None:
    wheel = wheels[distribution]
    metadata = wheel.read(
        next(name for name in wheel.namelist() if name.endswith(".dist-info/METADATA"))
    ).decode()
    assert f"Requires-Dist: alkstore-core<0.2,>={lowest}" in metadata


def test_core_depends_only_on_the_cron_parser_zone_data_and_its_extras(
    wheels: dict[str, zipfile.ZipFile],
) -> None:
    wheel = wheels["alkstore-core"]
    metadata = wheel.read(
        next(name for name in wheel.namelist() if name.endswith(".dist-info/METADATA"))
    ).decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist")]
    assert requires == [
        "Requires-Dist: cronsim<3,>=2.7",
        "Requires-Dist: tzdata>=2024.1",
        "Requires-Dist: opentelemetry-api>=1.27; extra == 'otel'",
        "Requires-Dist: jinja2>=3.1; extra == 'web'",
        "Requires-Dist: starlette>=0.40; extra == 'web'",
        "Requires-Dist: uvicorn>=0.30; extra == 'web'",
    ]
    assert "Provides-Extra: otel" in metadata
    assert "Provides-Extra: web" in metadata
