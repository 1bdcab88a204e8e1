"""Engine discovery, exercised with real installed distributions.

Each scenario pip-installs distributions into a fresh folder and runs a
separate interpreter with ``-S`` (no site-packages) and only that folder on
its path, so exactly the installed distributions are visible.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from alkstore._discovery import engine_name_for, redact

TESTS = Path(__file__).parent
CORE = TESTS.parent
DUMMY = TESTS / "distributions" / "dummy-engine"
BROKEN = TESTS / "distributions" / "broken-engine"


def pip_install(target: Path, *projects: Path) -> None:
    subprocess.run(
        [
            sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
            "--no-build-isolation", "--no-index", "--disable-pip-version-check",
            "--target", str(target), *map(str, projects),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip


def run_python(site: Path, code: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, "-S", "-c", textwrap.dedent(code)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def core_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("core-only")
    pip_install(site, CORE)
    return site


@pytest.fixture(scope="module")
def with_engines(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("with-engines")
    pip_install(site, CORE, DUMMY, BROKEN)
    return site


def test_core_alone_imports_and_names_the_sqlite_distribution(core_only: Path) -> None:
    result = run_python(
        core_only,
        """
        import alkstore
        try:
            alkstore.open("x.db")
        except alkstore.EngineNotFound as exc:
            assert isinstance(exc, LookupError)
            print(exc)
        print(alkstore.engines())
        """,
    )
    assert result.returncode == 0, result.stderr
    message, engines = result.stdout.splitlines()
    assert "pip install alkstore-sqlite" in message
    assert "'x.db'" in message
    assert engines == "{}"


def test_core_alone_names_the_postgres_distribution_without_the_password(
    core_only: Path,
) -> None:
    result = run_python(
        core_only,
        """
        import alkstore
        try:
            alkstore.open("postgresql://ada:s3cret@db.example:5432/app")
        except alkstore.EngineNotFound as exc:
            print(exc)
        """,
    )
    assert result.returncode == 0, result.stderr
    assert "pip install alkstore-postgres" in result.stdout
    assert "s3cret" not in result.stdout


def test_installed_engine_is_listed_with_its_distribution(with_engines: Path) -> None:
    result = run_python(
        with_engines,
        """
        import json, alkstore
        print(json.dumps({n: [i.name, list(i.schemes), i.distribution, i.version]
                          for n, i in alkstore.engines().items()}))
        """,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "dummy": ["dummy", ["dummy", "dummy+mem", "otherscheme"], "alkstore-dummy-engine", "1.2.3"]
    }
    assert "skipping a broken alkstore engine" in result.stderr
    assert "broken" in result.stderr


def test_open_routes_by_scheme_and_passes_target_and_options(with_engines: Path) -> None:
    result = run_python(
        with_engines,
        """
        import alkstore
        store = alkstore.open("dummy://somewhere?x=1", flavour="plain")
        print(type(store).__name__, store.location, store.options)
        store = alkstore.open("otherscheme://elsewhere")
        print(type(store).__name__, store.location)
        try:
            alkstore.open("dummy://somewhere", colour="red")
        except TypeError as exc:
            print("TypeError", exc)
        """,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "DummyStore dummy://somewhere?x=1 {'flavour': 'plain'}",
        "DummyStore otherscheme://elsewhere",
        "TypeError unknown option colour",
    ]


def test_an_engine_that_fails_to_import_is_reported_when_asked_for(with_engines: Path) -> None:
    result = run_python(
        with_engines,
        """
        import alkstore
        try:
            alkstore.open("broken://x")
        except alkstore.EngineNotFound as exc:
            print(type(exc.__cause__).__name__)
            print(exc)
        """,
    )
    assert result.returncode == 0, result.stderr
    cause, message = result.stdout.splitlines()
    assert cause == "ModuleNotFoundError"
    assert "'broken'" in message
    assert "alkstore-broken-engine" in message
    assert "failed to import" in message


def test_unknown_scheme_names_the_entry_point_group(with_engines: Path) -> None:
    result = run_python(
        with_engines,
        """
        import alkstore
        try:
            alkstore.open("nosuch://x")
        except alkstore.EngineNotFound as exc:
            print(exc)
        """,
    )
    assert result.returncode == 0, result.stderr
    assert "'nosuch' engine" in result.stdout
    assert "alkstore.engines" in result.stdout
    assert "installed engines: broken, dummy" in result.stdout


def test_discovery_is_cached_after_the_first_open(with_engines: Path, tmp_path: Path) -> None:
    # Copy the installation, open once, then uninstall the engine's metadata:
    # a second open that still works never went back to the installed metadata.
    site = tmp_path / "site"
    subprocess.run(["cp", "-r", str(with_engines), str(site)], check=True)
    result = run_python(
        site,
        f"""
        import shutil, glob, alkstore
        alkstore.open("dummy://first")
        for info in glob.glob({str(site)!r} + "/alkstore_dummy_engine-*.dist-info"):
            shutil.rmtree(info)
        print(alkstore.open("dummy://second").location)
        """,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "dummy://second"


@pytest.mark.parametrize(
    ("target", "engine"),
    [
        ("app.db", "sqlite"),
        ("/var/lib/app/app.db", "sqlite"),
        (":memory:", "sqlite"),
        ("file:app.db?mode=rwc", "sqlite"),
        ("sqlite:///abs/path.db", "sqlite"),
        ("SQLITE:///abs/path.db", "sqlite"),
        ("postgres://u@host/db", "postgres"),
        ("postgresql://u@host/db", "postgres"),
        ("PostgreSQL://u@host/db", "postgres"),
        ("myengine://anything", "myengine"),
        ("my+engine://anything", "my+engine"),
        # SQLAlchemy's dialect+driver form, as users copy it from their settings
        ("postgresql+psycopg://u@host/db", "postgres"),
        ("postgres+psycopg2://u@host/db", "postgres"),
        ("sqlite+pysqlite:///app.db", "sqlite"),
        # a first-party scheme without "//": its engine refuses it, no file is made
        ("sqlite:", "sqlite"),
        ("sqlite:/x.db", "sqlite"),
        ("postgresql:db", "postgres"),
        # libpq key=value connection strings
        ("host=localhost dbname=app password=s3cret", "postgres"),
        ("host=/var/run/postgresql", "postgres"),
        ("  dbname = 'my app'  user=ada ", "postgres"),
        # malformed after a libpq keyword: libpq says what is wrong, not the SQLite engine
        ("host=127.0.0.1 nonsense", "postgres"),
        ("dbname=app user=", "postgres"),
        # ... but not every file name with "=" in it
        ("a=b.db", "sqlite"),
        ("weights=2 x.db", "sqlite"),
        ("C:/data/app.db", "sqlite"),
    ],
)
def test_target_scheme_names_the_engine(target: str, engine: str) -> None:
    assert engine_name_for(target) == engine


@pytest.mark.parametrize(
    ("target", "shown"),
    [
        ("mysql://root:pa/ss@h/db", "mysql://root:***@h/db"),
        ("mysql://root:p@ss:w0rd@h/db", "mysql://root:***@h/db"),
        ("x://u:secret@h/db?password=again&sslmode=off", "x://u:***@h/db?password=***&sslmode=off"),
        ("x://u@h/db", "x://u@h/db"),
        ("host=h password=secret dbname=d", "host=h password=*** dbname=d"),
        ("host=h password='se cret' dbname=d", "host=h password=*** dbname=d"),
        ("app.db", "app.db"),
    ],
)
def test_redact_hides_every_password(target: str, shown: str) -> None:
    assert redact(target) == shown


def test_engine_not_found_never_shows_a_password_even_with_a_slash() -> None:
    import alkstore

    with pytest.raises(alkstore.EngineNotFound) as raised:
        alkstore.open("mysql://root:pa/ss@h/db")
    assert "pa/ss" not in str(raised.value)
    assert "ss@" not in str(raised.value)


def test_open_refuses_what_is_not_a_target() -> None:
    import alkstore

    with pytest.raises(TypeError, match="target must be a str"):
        alkstore.open(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must not be empty"):
        alkstore.open("")


@pytest.mark.parametrize("blank", [" ", "\t", " \n "])
def test_a_blank_target_is_refused_and_creates_no_file(
    blank: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import alkstore

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="empty or blank"):
        alkstore.open(blank)
    with pytest.raises(ValueError, match="empty or blank"):
        alkstore.open(Path(blank))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "target",
    ["app.db\n", " app.db", "postgresql://u:secret@db.internal/app\r\n", "\tsqlite:///app.db"],
)
def test_a_target_with_white_space_around_it_is_refused_and_creates_no_file(
    target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import alkstore

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="begins or ends with white space") as raised:
        alkstore.open(target)
    assert "secret" not in str(raised.value)

    async def open_async() -> None:
        await alkstore.open_async(target)

    with pytest.raises(ValueError, match="begins or ends with white space"):
        asyncio.run(open_async())
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "target", ["app\x00.db", "postgresql://u:secret@db.internal/app\x00", "sqlite:///a\x00"]
)
def test_a_target_holding_a_nul_is_refused_in_words(
    target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import alkstore

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="holds a NUL character") as raised:
        alkstore.open(target)
    assert "secret" not in str(raised.value)
    with pytest.raises(ValueError, match="holds a NUL character"):
        alkstore.open(Path(target))
    assert list(tmp_path.iterdir()) == []


def test_a_path_object_names_a_file_with_a_space_at_the_end(tmp_path: Path) -> None:
    import alkstore

    with alkstore.open(tmp_path / "app.db ") as store:
        store.queue("q").enqueue("kept")
    assert (tmp_path / "app.db ").exists()


OTHER_CONTRACTS = TESTS / "distributions" / "other-contract-engines"


@pytest.fixture(scope="module")
def with_other_contracts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("other-contracts")
    pip_install(site, CORE, OTHER_CONTRACTS)
    return site


@pytest.mark.parametrize(
    ("engine", "upgrade"),
    [
        ("nextmajor", "upgrade alkstore-core"),
        ("nextminor", "upgrade alkstore-core"),
        ("lastmajor", "upgrade alkstore-other-contract-engines"),
        ("unversioned", "upgrade alkstore-other-contract-engines"),
    ],
)
def test_an_engine_for_another_contract_is_refused_naming_what_to_upgrade(
    with_other_contracts: Path, engine: str, upgrade: str
) -> None:
    result = run_python(
        with_other_contracts,
        f"""
        import alkstore, alkstore.engine
        print(alkstore.engine.CONTRACT_VERSION)
        try:
            alkstore.open("{engine}://x")
        except alkstore.EngineNotFound as exc:
            print(exc)
        """,
    )
    assert result.returncode == 0, result.stderr
    ours, message = result.stdout.splitlines()
    assert repr(engine) in message
    assert upgrade in message
    if engine != "unversioned":
        assert f"implements {ours}" in message


def test_engines_lists_the_contract_each_engine_was_written_for(with_engines: Path) -> None:
    result = run_python(
        with_engines,
        "import alkstore; print(alkstore.engines()['dummy'].contract_version)",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1.0"


MISBEHAVING = TESTS / "distributions" / "misbehaving-engines"


@pytest.fixture(scope="module")
def with_misbehaving(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("misbehaving")
    pip_install(site, CORE, DUMMY, MISBEHAVING)
    return site


def test_an_engine_that_raises_at_start_or_exits_on_import_hides_no_other(
    with_misbehaving: Path,
) -> None:
    result = run_python(
        with_misbehaving,
        """
        import alkstore
        print(sorted(alkstore.engines()))
        for target in ("raisesatstart://x", "exitsonimport://x"):
            try:
                alkstore.open(target)
            except alkstore.EngineNotFound as exc:
                print(type(exc.__cause__).__name__, exc)
        """,
    )
    assert result.returncode == 0, result.stderr
    listed, started, imported = result.stdout.splitlines()
    assert listed == "['dummy']"
    assert started.startswith("ValueError the alkstore engine 'raisesatstart'")
    assert "failed to start: ValueError('init explodes')" in started
    assert imported.startswith("SystemExit the alkstore engine 'exitsonimport'")
    assert "failed to import: SystemExit(3)" in imported
    assert result.stderr.count("skipping a broken alkstore engine") == 2
