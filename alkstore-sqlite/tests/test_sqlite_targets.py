"""Targets: which file each accepted form opens, and that refused forms create none.

Every test runs in a fresh working directory and names its file with a
token of its own, so a stray file is found wherever it lands: in the working
directory, at the filesystem root (where ``sqlite:///app.db`` used to go), or
anywhere else under the test's folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import alkstore
from alkstore_sqlite import SQLiteEngine, SQLiteStore


@pytest.fixture
def token() -> Iterator[str]:
    """A unique file name stem; anything left at ``/`` under it is removed afterwards."""
    value = f"alkstore-target-{uuid.uuid4().hex[:12]}"
    yield value
    for name in _root_entries(value):  # only ever there when a test fails
        os.remove(os.path.join("/", name))


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cwd"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def _root_entries(token: str) -> list[str]:
    return [name for name in os.listdir("/") if token in name]


def _files_under(folder: Path) -> set[Path]:
    """Every file under ``folder``, SQLite's -wal and -shm companions folded into their database."""
    found = set()
    for root, _, names in os.walk(folder):
        for name in names:
            found.add(Path(root) / name.removesuffix("-wal").removesuffix("-shm"))
    return found


def _open_and_close(target: str) -> str:
    store = alkstore.open(target)
    try:
        assert isinstance(store, SQLiteStore)
        store.queue("q").enqueue("written")  # the file really is used, not just named
        return store.path
    finally:
        store.close()


@pytest.mark.parametrize(
    ("form", "where"),
    [
        ("{name}", "cwd"),
        ("./{name}", "cwd"),
        ("sqlite:///{name}", "cwd"),
        ("sqlite:///sub/{name}", "cwd/sub"),
        ("SQLite:///{name}", "cwd"),
        ("sqlite+pysqlite:///{name}", "cwd"),
        ("sqlite+aiosqlite:///{name}", "cwd"),
        ("{abs}/{name}", "elsewhere"),
        ("sqlite:///{abs}/{name}", "elsewhere"),  # "sqlite:///" + "/abs": four slashes
        ("sqlite+pysqlite:///{abs}/{name}", "elsewhere"),
        ("sqlite:///{name}?durability=full", "cwd"),
    ],
)
def test_each_accepted_form_opens_the_file_it_names_and_no_other(
    form: str, where: str, cwd: Path, tmp_path: Path, token: str
) -> None:
    (cwd / "sub").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = {"cwd": cwd, "cwd/sub": cwd / "sub", "elsewhere": elsewhere}[where]
    expected = folder / f"{token}.db"
    opened = _open_and_close(form.format(name=f"{token}.db", abs=elsewhere))
    assert opened == str(expected)
    assert _files_under(tmp_path) == {expected}
    assert _root_entries(token) == []


def test_url_options_and_escaped_characters_reach_the_file(cwd: Path, token: str) -> None:
    store = alkstore.open(f"sqlite:///{token}%20copy.db?durability=full&busy_timeout_s=2")
    try:
        assert isinstance(store, SQLiteStore)
        assert store.path == str(cwd / f"{token} copy.db")
        with store.transaction() as tx:
            assert tx.execute("PRAGMA synchronous") == [(2,)]
    finally:
        store.close()


def test_a_file_named_like_a_connection_string_is_reached_through_its_folder(cwd: Path) -> None:
    assert _open_and_close("./dbname=orders.db") == str(cwd / "dbname=orders.db")


@pytest.mark.parametrize(
    "form",
    [
        "sqlite:",
        "sqlite:/{name}",
        "sqlite:{name}",
        "SQLITE:{name}",
        "sqlite://",
        "sqlite:///",
        "sqlite:///?durability=full",
        "sqlite://{name}",
        "sqlite://localhost/{name}",
        "sqlite+pysqlite://localhost/{name}",
        "sqlite+pysqlite:{name}",
    ],
)
def test_every_other_sqlite_form_is_refused_naming_the_accepted_ones_and_creates_nothing(
    form: str, cwd: Path, tmp_path: Path, token: str
) -> None:
    with pytest.raises(ValueError, match=r"'sqlite:///relative.db' .* 'sqlite:////abs/path.db'"):
        alkstore.open(form.format(name=f"{token}.db"))
    assert _files_under(tmp_path) == set()
    assert _root_entries(token) == []


@pytest.mark.parametrize(
    "form", ["{name}/", "./{name}/", ".", "..", "{name}/..", "sqlite:///{name}/"]
)
def test_a_path_written_as_a_folder_is_refused_and_creates_nothing(
    form: str, cwd: Path, tmp_path: Path, token: str
) -> None:
    with pytest.raises(ValueError, match="names a folder, not a file"):
        alkstore.open(form.format(name=token))
    assert _files_under(tmp_path) == set()


def test_a_url_with_a_host_never_shows_its_password(cwd: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="names no host") as raised:
        alkstore.open("sqlite://admin:pa/ss-word@db.example/app.db")
    assert "pa/ss-word" not in str(raised.value)
    assert _files_under(tmp_path) == set()


@pytest.mark.parametrize(
    "target",
    [
        "host=127.0.0.1 dbname=app user=alk password=s3cret-{name}",
        "  dbname=app password=s3cret-{name}",
        "user=alk password='s3cret-{name}' host=db",
        "sqlite:///host=db password=s3cret-{name}",
        "app password=s3cret-{name}",
    ],
)
def test_a_libpq_connection_string_is_refused_without_showing_its_password(
    target: str, cwd: Path, tmp_path: Path, token: str
) -> None:
    # Core sends key=value strings to the postgres engine; these reach the
    # SQLite engine directly, as a misrouted or hand-built target would.
    with pytest.raises(ValueError, match="PostgreSQL key=value connection string") as raised:
        SQLiteEngine().open(target.format(name=token))
    assert "s3cret" not in str(raised.value)
    assert token not in str(raised.value)
    assert _files_under(tmp_path) == set()
    assert _root_entries(token) == []


@pytest.mark.parametrize(
    ("target", "says"),
    [
        (":memory:", "in-memory database cannot back"),
        ("sqlite:///:memory:", "in-memory database cannot back"),
        ("file::memory:?cache=shared", "in-memory database cannot back"),
        ("file:{name}.db?mode=rwc", "'file:' URIs are not accepted"),
        ("sqlite:///{name}.db?mode=memory", "in-memory database cannot back"),
    ],
)
def test_in_memory_databases_and_file_uris_are_refused_and_create_nothing(
    target: str, says: str, cwd: Path, tmp_path: Path, token: str
) -> None:
    with pytest.raises(ValueError, match=says):
        alkstore.open(target.format(name=token))
    assert _files_under(tmp_path) == set()


_OPEN_AND_SAY = """
import sys, alkstore
try:
    alkstore.open(sys.argv[1]).close()
except alkstore.Database as exc:
    print(exc)
"""


def test_a_new_file_in_a_folder_it_cannot_write_is_refused_saying_so(tmp_path: Path) -> None:
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    command = [sys.executable, "-c", _OPEN_AND_SAY, str(folder / "app.db")]
    if os.geteuid() == 0:  # root writes anywhere: give up that power first
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: every folder is writable")
        caps = "--bounding-set=-dac_override,-dac_read_search,-fowner"
        command = [setpriv, "--inh-caps=-all", caps, *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "is not writable, so it cannot be created there" in done.stdout
    assert not (folder / "app.db").exists()
