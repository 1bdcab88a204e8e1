"""The asyncio web service example runs for real on each engine: uvicorn, HTTP, a worker.

The service (``examples/web_service``) is started as a user starts it, in
a subprocess on a free port, and driven over HTTP only; its business table
and alkstore's rows are then checked through a store of the test's own. On
PostgreSQL each test gets a fresh schema for alkstore's tables (``schema=``)
and for the business table (libpq's ``options=-csearch_path=``), dropped after.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import alkstore

SERVICE = Path(__file__).parents[1] / "examples" / "web_service"
START_TIMEOUT_S = 30.0
WORK_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
HTTP_TIMEOUT_S = 10.0


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store: a new SQLite file, or a new PostgreSQL schema for everything."""
    if request.param == "sqlite":
        yield str(tmp_path / "orders.db")
        return
    server: str = request.getfixturevalue("server_dsn")
    schema = f"alkstore_service_{uuid.uuid4().hex[:12]}"
    search_path = urllib.parse.quote(f"-csearch_path={schema}")
    yield f"{server}{'&' if '?' in server else '?'}schema={schema}&options={search_path}"
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


class Process:
    """A subprocess whose output goes to a file (no pipe to fill), stopped by SIGTERM."""

    def __init__(self, arguments: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.popen = subprocess.Popen(
                arguments, cwd=SERVICE, env=env, stdout=out, stderr=subprocess.STDOUT
            )

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def check_alive(self) -> None:
        if self.popen.poll() is not None:
            raise AssertionError(f"exited with {self.popen.returncode}:\n{self.output()}")

    def stop(self) -> int:
        """SIGTERM, then the exit code (killed, and a failure, past STOP_TIMEOUT_S)."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(STOP_TIMEOUT_S)
            raise AssertionError(f"did not stop on SIGTERM:\n{self.output()}") from None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def environment(target: str, *, worker: bool) -> dict[str, str]:
    return {**os.environ, "ALKSTORE_TARGET": target, "ALKSTORE_WORKER": "on" if worker else "off"}


class Service:
    """The web service under uvicorn on a free port, talked to over HTTP."""

    def __init__(self, target: str, log: Path, *, worker: bool) -> None:
        self.base = f"http://127.0.0.1:{free_port()}"
        port = self.base.rpartition(":")[2]
        self.process = Process(
            [sys.executable, "-m", "uvicorn", "orders_service:app", "--host", "127.0.0.1",
             "--port", port, "--log-level", "info"],
            environment(target, worker=worker),
            log,
        )  # fmt: skip
        self._await_up()

    def _await_up(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            self.process.check_alive()
            try:
                if self.call("GET", "/stats")[0] == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.process.stop()
                raise AssertionError(f"no answer in {START_TIMEOUT_S} s:\n{self.process.output()}")
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

    def place(self, customer: str, total_cents: int) -> dict[str, Any]:
        status, answer = self.call(
            "POST", "/orders", {"customer": customer, "total_cents": total_cents}
        )
        assert status == 201, answer
        assert isinstance(answer, dict)
        return answer

    def order(self, order_id: str) -> dict[str, Any]:
        status, answer = self.call("GET", f"/orders/{order_id}")
        assert status == 200, answer
        assert isinstance(answer, dict)
        return answer

    def stop(self) -> None:
        """Stop as a deployment does; the app's lifespan must finish its shutdown."""
        code = self.process.stop()
        output = self.process.output()
        # uvicorn shuts down gracefully, then re-raises the signal it caught
        assert code in (0, -signal.SIGTERM), output
        assert "Application shutdown complete" in output, output
        assert "Traceback" not in output, output


@pytest.fixture
def start_service(tmp_path: Path) -> Iterator[Callable[..., Service]]:
    started: list[Service] = []

    def start(target: str, *, worker: bool = True) -> Service:
        service = Service(target, tmp_path / f"service-{len(started)}.log", worker=worker)
        started.append(service)
        return service

    yield start
    for service in started:
        if service.process.popen.poll() is None:
            service.process.stop()


def await_confirmed(service: Service, order_ids: list[str]) -> None:
    deadline = time.monotonic() + WORK_TIMEOUT_S
    waiting = set(order_ids)
    while waiting:
        waiting = {o for o in waiting if service.order(o)["status"] != "confirmed"}
        if waiting and time.monotonic() > deadline:
            raise AssertionError(f"{len(waiting)} orders unconfirmed after {WORK_TIMEOUT_S} s")
        time.sleep(0.05)


def stored_state(target: str) -> tuple[int, list[alkstore.QueueStats]]:
    """The business rows and the queues, through a store of the test's own."""
    with alkstore.open(target) as store, store.transaction() as tx:
        (rows,) = tx.execute("SELECT count(*) FROM service_orders")[0]
        return rows, store.inspect().queues()


def test_an_order_commits_with_its_job_and_the_worker_in_the_app_confirms_it(
    target: str, start_service: Callable[..., Service]
) -> None:
    service = start_service(target)
    placed = [service.place(customer, 1_500 + n) for n, customer in enumerate("abcde")]
    assert len({answer["job"] for answer in placed}) == 5

    status, declined = service.call("POST", "/orders", {"customer": "m", "total_cents": 10**7})
    assert status == 402, declined
    status, refused = service.call("POST", "/orders", {"customer": "m"})
    assert status == 422, refused
    assert service.call("GET", "/orders/nope")[0] == 404

    await_confirmed(service, [answer["id"] for answer in placed])
    confirmed = service.order(placed[0]["id"])
    assert confirmed["customer"] == "a"
    assert confirmed["total_cents"] == 1_500
    assert confirmed["confirmed_at"] >= 0
    status, stats = service.call("GET", "/stats")
    assert (status, stats) == (
        200,
        {"queue": "confirmations", "ready": 0, "scheduled": 0, "processing": 0, "dead": 0},
    )
    service.stop()

    rows, queues = stored_state(target)
    assert rows == 5  # the declined order left no row, and (below) no job
    assert sum(stats.total for stats in queues) == 0


def test_workers_may_run_in_processes_of_their_own(
    target: str, start_service: Callable[..., Service], tmp_path: Path
) -> None:
    web = start_service(target, worker=False)
    placed = [web.place("ada", 2_000 + n)["id"] for n in range(3)]
    assert {web.order(order_id)["status"] for order_id in placed} == {"placed"}
    assert web.call("GET", "/stats")[1]["ready"] == 3

    worker = Process(
        [sys.executable, "orders_service.py", "worker", target],
        environment(target, worker=True),
        tmp_path / "worker.log",
    )
    try:
        await_confirmed(web, placed)
        worker.check_alive()
    finally:
        code = worker.stop()
    assert code == 0, worker.output()
    assert "worker stopped" in worker.output()
    assert web.call("GET", "/stats")[1]["ready"] == 0
    web.stop()
