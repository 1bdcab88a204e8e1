"""The Django example (``examples/django_shop``) runs for real on each engine, as its users run it.

First its own tests, by Django's own runner (``manage.py test``), which makes
and destroys a test database of its own. Then a deployment's shape:
``migrate``, the web server (``runserver``) taking orders over HTTP, and a
worker process (``manage.py run_worker``) confirming them. Every run is a
subprocess of this Python, pointed at a fresh database: a SQLite file in the
test's folder, or on PostgreSQL a database (and test database) whose name is
unique to the test, dropped after, whatever happened.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

import alkstore

PROJECT = Path(__file__).parents[1] / "examples" / "django_shop"
RUN_TIMEOUT_S = 120.0
START_TIMEOUT_S = 30.0
HTTP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Database:
    """Where the example is pointed: its database and the test database its runner makes."""

    url: str
    """``DJANGO_SHOP_DATABASE``."""
    name: str
    """The database it names: a file on SQLite, a database name on PostgreSQL."""
    test_name: str
    """``DJANGO_SHOP_TEST_DATABASE``: a file on SQLite, a database name on PostgreSQL."""
    store_target: str
    """The database, as the test's own store opens it."""
    server: str | None = None
    """PostgreSQL: the server's DSN."""

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "shopsite.settings",
            "DJANGO_SHOP_DATABASE": self.url,
            "DJANGO_SHOP_TEST_DATABASE": self.test_name,
        }

    def exists(self, name_or_path: str) -> bool:
        if self.server is None:
            return Path(name_or_path).exists()
        with psycopg.connect(self.server, autocommit=True) as connection:
            found = connection.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (name_or_path,)
            )
            return found.fetchone() is not None


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        path = tmp_path / "shop.db"
        yield Database(f"sqlite:///{path}", str(path), str(tmp_path / "shop-test.db"), str(path))
        return
    server: str = request.getfixturevalue("server_dsn")
    # Unique names: two Pythons of the test matrix run this at once on one server.
    name = f"django_shop_{uuid.uuid4().hex[:12]}"
    url = urlunsplit(urlsplit(server)._replace(path=f"/{name}"))
    try:
        yield Database(url, name, f"test_{name}", url, server)
    finally:
        with psycopg.connect(server, autocommit=True) as connection:
            for leftover in (name, f"test_{name}"):  # a killed run may leave either
                connection.execute(f'DROP DATABASE IF EXISTS "{leftover}" WITH (FORCE)')


def manage(database: Database, *arguments: str) -> str:
    """Run ``manage.py`` to completion; its output, or a failure showing it."""
    try:
        done = subprocess.run(
            [sys.executable, "manage.py", *arguments],
            cwd=PROJECT,
            env=database.env(),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        raise AssertionError(
            f"manage.py {' '.join(arguments)} ran past {RUN_TIMEOUT_S} s:\n"
            f"{expired.stdout!s}\n{expired.stderr!s}"
        ) from None
    output = f"{done.stdout}\n{done.stderr}"
    assert done.returncode == 0, (
        f"manage.py {' '.join(arguments)} exited {done.returncode}:\n{output}"
    )
    return output


def test_the_example_s_own_tests_pass_under_djangos_runner(database: Database) -> None:
    output = manage(database, "test", "--noinput", "-v", "2")

    found = re.search(r"^Found (\d+) test", output, re.MULTILINE)
    ran = re.search(r"^Ran (\d+) tests? in ", output, re.MULTILINE)
    ok = re.search(r"^OK(?: \(skipped=(\d+)\))?$", output, re.MULTILINE)
    assert found is not None, output
    assert ran is not None, output
    assert ok is not None, output
    assert int(found[1]) >= 11, output
    # Python 3.12's unittest leaves skipped tests out of "Ran N tests"; 3.10's counts them.
    skipped = int(ok[1] or 0)
    assert int(ran[1]) in (int(found[1]), int(found[1]) - skipped), output
    assert skipped <= 1, output
    # The runner destroyed its test database (so the store had closed its
    # connections first), and neither Django nor the store touched the real one.
    assert not database.exists(database.test_name), output
    assert not database.exists(database.name), output


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Process:
    """``manage.py`` in the background, its output in a file (no pipe to fill)."""

    def __init__(self, database: Database, log: Path, *arguments: str) -> None:
        self.log = log
        with log.open("wb") as out:
            self.popen = subprocess.Popen(
                [sys.executable, "manage.py", *arguments],
                cwd=PROJECT, env=database.env(), stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def check_alive(self) -> None:
        if self.popen.poll() is not None:
            raise AssertionError(f"exited {self.popen.returncode}:\n{self.output()}")

    def stop(self) -> int:
        """SIGTERM, then the exit code (killed, and a failure, past RUN_TIMEOUT_S)."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(RUN_TIMEOUT_S)
            raise AssertionError(f"did not stop on SIGTERM:\n{self.output()}") from None


class WebServer(Process):
    """``manage.py runserver`` on a free port, talked to over HTTP."""

    def __init__(self, database: Database, log: Path) -> None:
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        super().__init__(database, log, "runserver", "--noreload", f"127.0.0.1:{port}")
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            self.check_alive()
            try:
                if self.call("GET", "/orders/0")[0] == 404:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"no answer in {START_TIMEOUT_S} s:\n{self.output()}")
            time.sleep(0.1)

    def call(self, method: str, path: str, body: object = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base + path, data=data, method=method, headers={"content-type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            with error:
                return error.code, json.loads(error.read())

    def await_confirmed(self, order_ids: list[int], worker: Process) -> None:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        waiting = set(order_ids)
        while waiting:
            worker.check_alive()
            waiting = {
                o for o in waiting if not self.call("GET", f"/orders/{o}")[1]["order"]["confirmed"]
            }
            if waiting and time.monotonic() > deadline:
                raise AssertionError(f"orders {sorted(waiting)} unconfirmed:\n{worker.output()}")
            time.sleep(0.05)


def test_orders_placed_over_http_are_confirmed_by_a_worker_process(
    database: Database, tmp_path: Path
) -> None:
    if database.server is not None:
        with psycopg.connect(database.server, autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{database.name}"')
    manage(database, "migrate", "--noinput")

    web = WebServer(database, tmp_path / "runserver.log")
    worker: Process | None = None
    try:
        placed = []
        for n, customer in enumerate(("ada", "bob", "cy")):
            status, answer = web.call("POST", "/orders", {"customer": customer, "total": 10 + n})
            assert status == 201, (answer, web.output())
            placed.append(answer["order"]["id"])
        status, declined = web.call("POST", "/orders", {"customer": "mallory", "total": -1})
        assert status == 402, declined

        # The worker as deployed: it runs until SIGTERM, then stops gracefully.
        worker = Process(database, tmp_path / "worker.log", "run_worker", "--concurrency", "2")
        web.await_confirmed(placed, worker)
        placed.append(
            web.call("POST", "/orders", {"customer": "dee", "total": 5})[1]["order"]["id"]
        )
        web.await_confirmed(placed, worker)  # woken by the new job
    finally:
        try:
            code = worker.stop() if worker is not None else 0
        finally:
            web.stop()
    assert worker is not None
    assert code == 0, worker.output()
    assert "worker stopped: 4 confirmed, 0 failed" in worker.output(), worker.output()
    assert "Traceback" not in web.output(), web.output()

    with alkstore.open(database.store_target) as store:
        assert [q for q in store.inspect().queues() if q.total] == []  # every job acked
        events = [e.payload for e in store.stream("orders").read_since(0)]
    assert sorted((e["event"], e["order_id"]) for e in events) == sorted(
        [("placed", o) for o in placed] + [("confirmed", o) for o in placed]
    )  # and none of the declined order
