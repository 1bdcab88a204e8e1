"""The ``alkstore`` command on each engine, run as operators and scripts run it.

Every test starts the real command in a subprocess (the console script, else
``python -m alkstore._cli``) against a fresh store named by the ``dsn``
fixture, and checks what it prints: tables for people, JSON for scripts, exit
codes, one-line errors. The Python API sets up state and checks results where
that is clearer than going through the command.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

import alkstore
from alkstore import EnqueueOpts, QueueOpts

T = TypeVar("T")

_SCRIPT = shutil.which(
    "alkstore", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
)
ALKSTORE = [_SCRIPT] if _SCRIPT else [sys.executable, "-m", "alkstore._cli"]
UNREACHABLE = "postgresql://nobody@127.0.0.1:1/x"

HANDLERS = '''
"""Handlers for the worker tests: each notes the job in its process's file."""

import os
import time


def handle(job):
    with open(f"handled-{os.getpid()}.txt", "a") as file:
        file.write(f"{job.id}\\n")
    time.sleep(job.payload.get("sleep", 0))
    if job.payload.get("fail"):
        raise RuntimeError(f"job {job.id} refused")
    if job.payload.get("say"):
        raise RuntimeError(job.payload["say"])
'''


@pytest.fixture
def dsn(dsn: str) -> str:
    """conftest's fresh store, made: commands that only look refuse a SQLite
    file that does not exist."""
    alkstore.open(dsn).close()
    return dsn


# Running the command


def environment(dsn: str | None = None) -> dict[str, str]:
    """This process's environment with ``ALKSTORE_DSN`` set to ``dsn``, or unset."""
    env = {name: value for name, value in os.environ.items() if name != "ALKSTORE_DSN"}
    if dsn is not None:
        env["ALKSTORE_DSN"] = dsn
    return env


def run(
    *arguments: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the command to completion and capture what it prints."""
    return subprocess.run(
        [*ALKSTORE, *arguments], capture_output=True, text=True, timeout=60, check=False,
        cwd=cwd, env=environment() if env is None else env,
    )  # fmt: skip


def ok(*arguments: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run the command, check it succeeded quietly on stderr, and return its stdout."""
    result = run(*arguments, cwd=cwd, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


def tail(*arguments: str) -> str:
    """Run ``tail`` to completion: its one status line on stderr, the events on stdout."""
    result = run("tail", *arguments)
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(
        r"alkstore: tailing '\w+' after offset \d+ \(Ctrl-C to stop\)\n", result.stderr
    )
    return result.stdout


def ok_json(*arguments: str) -> Any:
    """Run the command with ``--json`` and return the parsed output."""
    return json.loads(ok(*arguments, "--json"))


def one_line_error(result: subprocess.CompletedProcess[str], command: str, code: int) -> str:
    """Check that ``result`` failed with ``code`` and one clear line; return it."""
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"alkstore {command}: "), lines[0]
    return lines[0]


@contextlib.contextmanager
def started(
    *arguments: str, cwd: Path | None = None, stderr: int = subprocess.PIPE
) -> Iterator[subprocess.Popen[bytes]]:
    """Start a long-running command; kill it if the test leaves it running."""
    process = subprocess.Popen(
        [*ALKSTORE, *arguments], stdout=subprocess.PIPE, stderr=stderr, cwd=cwd,
        env=environment(),
    )  # fmt: skip
    with process:
        try:
            yield process
        finally:
            if process.poll() is None:
                process.kill()


def finish(process: subprocess.Popen[bytes], *, stop: bool = False) -> tuple[str, str]:
    """Wait for ``process`` (first sending SIGTERM if ``stop``); return its stdout and stderr."""
    if stop:
        process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=30)
    return out.decode(), (err or b"").decode()


def read_until(fd: int, text: str, timeout: float = 15.0) -> bytes:
    """Read ``fd`` until what was read contains ``text``; return all of it."""
    seen = b""
    deadline = time.monotonic() + timeout
    while text.encode() not in seen:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pytest.fail(f"no {text!r} within {timeout}s: {seen!r}")
        if select.select([fd], [], [], remaining)[0]:
            chunk = read_some(fd)
            if not chunk:
                pytest.fail(f"the output ended without {text!r}: {seen!r}")
            seen += chunk
    return seen


def read_some(fd: int) -> bytes:
    """One read of ``fd``; b"" at its end (a pty whose other side closed says EIO)."""
    try:
        return os.read(fd, 65536)
    except OSError as exc:
        if exc.errno == errno.EIO:
            return b""
        raise


def poll(check: Callable[[], T | None], timeout: float = 15.0, what: str = "") -> T:
    """Call ``check`` until it returns something other than None; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while (found := check()) is None:
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what or check}")
        time.sleep(0.05)
    return found


def table(text: str, headers: Sequence[str]) -> list[dict[str, str]]:
    """Parse an aligned table printed under exactly ``headers`` into one dict per row."""
    header, *rows = text.splitlines()
    assert re.split(r"\s{2,}", header.strip()) == list(headers), header
    starts, position = [], 0
    for name in headers:
        position = header.index(name, position)
        starts.append(position)
        position += len(name)
    ends: list[int | None] = [*starts[1:], None]
    return [
        {
            name: row[start:end].strip()
            for name, start, end in zip(headers, starts, ends, strict=True)
        }
        for row in rows
    ]


def write_handlers(directory: Path) -> None:
    (directory / "cli_test_handlers.py").write_text(HANDLERS)


def handled_ids(directory: Path) -> dict[str, list[int]]:
    """The job ids each worker process's handler noted, by file name."""
    return {
        path.name: [int(line) for line in path.read_text().split()]
        for path in sorted(directory.glob("handled-*.txt"))
    }


# Looking: engines, queues, jobs, streams, locks, schedules


def test_engines_runs_as_a_module_too() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "alkstore._cli", "engines"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = table(result.stdout, ("ENGINE", "SCHEMES", "DISTRIBUTION", "VERSION", "CONTRACT"))
    by_name = {row["ENGINE"]: row for row in rows}
    assert by_name["postgres"]["SCHEMES"] == "postgres, postgresql"
    assert by_name["sqlite"]["DISTRIBUTION"] == "alkstore-sqlite"


def test_queues_and_jobs_count_and_list_every_state(dsn: str) -> None:
    assert ok("queues", "--dsn", dsn) == "no queues hold jobs\n"
    with alkstore.open(dsn) as store:
        work = store.queue("work")
        for _ in range(3):
            work.enqueue({"kind": "claimed"}, EnqueueOpts(priority=10))
        for _ in range(2):
            work.enqueue({"kind": "doomed"}, EnqueueOpts(priority=5, max_attempts=1))
        long_payload = {"text": "x" * 100}
        ready = [work.enqueue(long_payload)] + [work.enqueue({"n": n}) for n in range(4)]
        for _ in range(4):
            work.enqueue({"kind": "later"}, EnqueueOpts(delay=600))
        work.enqueue({"kind": "stale"}, EnqueueOpts(expires=0.05))
        store.queue("other").enqueue(None)
        assert {job.payload["kind"] for job in work.claim_batch("inspector", 3)} == {"claimed"}
        for job in work.claim_batch("inspector", 2):
            assert job.retry(RuntimeError("disk full"))
        poll(lambda: store.inspect().queues()[1].expired or None, what="the job to expire")

    headers = ("QUEUE", "READY", "SCHEDULED", "PROCESSING", "DEAD", "EXPIRED", "OLDEST READY")
    other, counted = table(ok("queues", "--dsn", dsn), headers)  # sorted by name
    assert other["QUEUE"] == "other"
    assert counted.pop("QUEUE") == "work"
    assert re.fullmatch(r"\d+\.\ds", counted.pop("OLDEST READY"))
    assert counted == {
        "READY": "5", "SCHEDULED": "4", "PROCESSING": "3", "DEAD": "2", "EXPIRED": "1",
    }  # fmt: skip

    other_stats, work_stats = ok_json("queues", "--dsn", dsn)
    assert work_stats.pop("name") == "work"
    assert 0 <= work_stats.pop("oldest_ready_age_s") < 60
    assert work_stats == {
        "ready": 5, "scheduled": 4, "expired": 1, "processing": 3, "dead": 2, "total": 15,
    }  # fmt: skip
    assert (other_stats["name"], other_stats["ready"], other_stats["total"]) == ("other", 1, 1)

    job_headers = ("ID", "STATE", "ATTEMPTS", "PRIORITY", "RUN AT", "WORKER", "ERROR", "PAYLOAD")
    dead = table(ok("jobs", "work", "--state", "dead", "--dsn", dsn), job_headers)
    assert [(row["STATE"], row["ATTEMPTS"], row["PRIORITY"]) for row in dead] == [
        ("dead", "1/1", "5")
    ] * 2
    assert {row["ERROR"] for row in dead} == {"RuntimeError: disk full"}
    assert {row["WORKER"] for row in dead} == {"inspector"}
    assert re.fullmatch(r"\d+\.\ds ago", dead[0]["RUN AT"])

    first_ready = table(
        ok("jobs", "work", "--state", "pending", "--limit", "1", "--dsn", dsn), job_headers
    )
    assert [row["ID"] for row in first_ready] == [str(ready[0])]
    assert first_ready[0]["PAYLOAD"] == json.dumps(long_payload)[:59] + "…"
    assert first_ready[0]["WORKER"] == first_ready[0]["ERROR"] == "-"

    processing = ok_json("jobs", "work", "--state", "processing", "--dsn", dsn)
    assert [(job["state"], job["worker_id"], job["priority"]) for job in processing] == [
        ("processing", "inspector", 10)
    ] * 3
    assert all(job["payload"] == {"kind": "claimed"} and job["deadline"] for job in processing)

    assert ok("jobs", "nosuch", "--dsn", dsn) == "no jobs in 'nosuch'\n"


def test_jobs_clips_a_long_error_to_one_line_like_payloads(dsn: str) -> None:
    error = "RuntimeError: the mail server said:\n  " + "no " * 40 + "\nand more"
    with alkstore.open(dsn) as store:
        store.queue("q").enqueue({"text": "x" * 100})
        job = store.queue("q").claim_one("w")
        assert job is not None
        assert job.fail(error)
    headers = ("ID", "STATE", "ATTEMPTS", "PRIORITY", "RUN AT", "WORKER", "ERROR", "PAYLOAD")
    printed = ok("jobs", "q", "--dsn", dsn)
    assert len(printed.splitlines()) == 2  # the header and one row: no line feed leaks
    (row,) = table(printed, headers)
    assert row["ERROR"] == ("RuntimeError: the mail server said: " + "no " * 40)[:59] + "…"
    assert len(row["ERROR"]) == len(row["PAYLOAD"]) == 60
    (listed,) = ok_json("jobs", "q", "--dsn", dsn)
    assert listed["last_error"] == error  # scripts get it whole


def test_streams_lists_heads_and_consumer_lag(dsn: str) -> None:
    assert ok("streams", "--dsn", dsn) == "no streams\n"
    assert ok("publish", "orders", '{"order": 1}', "--dsn", dsn) == "1\n"
    assert ok_json("publish", "orders", '{"order": 2}', "--key", "k-2", "--dsn", dsn) == {
        "offset": 2
    }
    with alkstore.open(dsn) as store:
        store.stream("orders").publish({"order": 3})
        store.stream("orders").save_offset("billing", 1)
        assert [(e.key, e.payload) for e in store.stream("orders").read_since(0)] == [
            (None, {"order": 1}), ("k-2", {"order": 2}), (None, {"order": 3}),
        ]  # fmt: skip

    rows = table(ok("streams", "--dsn", dsn), ("STREAM", "HEAD", "CONSUMER", "OFFSET", "LAG"))
    assert [list(row.values()) for row in rows] == [
        ["orders", "3", "-", "-", "-"],
        ["", "", "billing", "1", "2"],
    ]
    assert ok_json("streams", "--dsn", dsn) == [
        {"name": "orders", "head": 3, "consumers": [{"name": "billing", "offset": 1, "lag": 2}]}
    ]


def test_locks_lists_the_held_ones(dsn: str) -> None:
    assert ok("locks", "--dsn", dsn) == "no locks held\n"
    with alkstore.open(dsn) as store:
        acquired = time.time()
        assert store.try_lock("nightly-report", "alice", 60) is not None
        assert store.try_lock("lapsed", "bob", 0.01) is not None
        time.sleep(0.02)
    rows = table(ok("locks", "--dsn", dsn), ("LOCK", "OWNER", "EXPIRES"))
    assert len(rows) == 1
    assert (rows[0]["LOCK"], rows[0]["OWNER"]) == ("nightly-report", "alice")
    shown = re.fullmatch(r"in (\d+\.\d)s", rows[0]["EXPIRES"])
    assert shown, rows[0]["EXPIRES"]
    # What is left when the command looked: at most the TTL, and no less than
    # the TTL minus the time since (a loaded machine starts a process slowly).
    assert 60 - (time.time() - acquired) - 1 <= float(shown[1]) <= 60
    (held,) = ok_json("locks", "--dsn", dsn)
    assert (held["name"], held["owner"]) == ("nightly-report", "alice")
    assert 59 < held["expires_at"] - acquired <= 61  # the server's clock may differ a little


# Writing: enqueue, publish, notify, schedule, unschedule, sweep


def test_enqueue_prints_the_id_and_applies_every_option(dsn: str) -> None:
    plain = int(ok("enqueue", "emails", '{"to": "ada"}', "--dsn", dsn))
    later = ok_json(
        "enqueue", "emails", '{"to": "bob"}', "--delay", "60", "--priority", "7",
        "--max-attempts", "5", "--expires", "3600", "--dsn", dsn,
    )["id"]  # fmt: skip
    dated = int(
        ok("enqueue", "emails", '"digest"', "--run-at", "2030-01-01T00:00:00+00:00", "--dsn", dsn)
    )
    with alkstore.open(dsn) as store:
        jobs = {job.id: job for job in store.inspect().jobs("emails")}
    assert sorted(jobs) == sorted([plain, later, dated])
    assert jobs[plain].payload == {"to": "ada"}
    assert (jobs[plain].priority, jobs[plain].max_attempts, jobs[plain].expires_at) == (0, 3, None)
    job = jobs[later]
    assert (job.payload, job.priority, job.max_attempts) == ({"to": "bob"}, 7, 5)
    assert job.run_at - job.created_at == pytest.approx(60, abs=1)
    assert job.expires_at is not None
    assert job.expires_at - job.created_at == pytest.approx(3600, abs=1)
    assert (jobs[dated].payload, jobs[dated].run_at) == ("digest", 1893456000.0)


def test_schedule_schedules_unschedule_and_run_schedules(dsn: str) -> None:
    made = ok(
        "schedule", "nightly", "@every 5m", "reports", '{"kind": "daily"}', "--priority", "3",
        "--dsn", dsn,
    )  # fmt: skip
    assert re.fullmatch(r"nightly: @every 5m into 'reports', next in [45]\.\dm\n", made)
    before = time.time()
    tick = ok_json("schedule", "tick", "@every 1s", "ticks", "{}", "--dsn", dsn)
    assert before < tick.pop("next_fire_at") <= time.time() + 1
    assert tick == {
        "name": "tick", "spec": "@every 1s", "queue": "ticks", "payload": {}, "tz": None,
        "last_fire_at": None,
    }  # fmt: skip

    headers = ("SCHEDULE", "SPEC", "TZ", "QUEUE", "NEXT FIRE", "LAST FIRE", "PAYLOAD")
    nightly, _ = table(ok("schedules", "--dsn", dsn), headers)
    assert nightly["NEXT FIRE"].startswith("in ")
    assert {k: v for k, v in nightly.items() if k != "NEXT FIRE"} == {
        "SCHEDULE": "nightly", "SPEC": "@every 5m", "TZ": "-", "QUEUE": "reports",
        "LAST FIRE": "-", "PAYLOAD": '{"kind": "daily"}',
    }  # fmt: skip

    with started("run-schedules", "--owner", "cli-runner", "--dsn", dsn) as runner:
        assert runner.stderr is not None
        read_until(runner.stderr.fileno(), "running schedules")
        with alkstore.open(dsn) as store:
            poll(lambda: store.inspect().jobs("ticks") or None, what="the schedule to fire")
        (lock,) = ok_json("locks", "--dsn", dsn)
        assert (lock["name"], lock["owner"]) == (alkstore.SCHEDULER_LOCK, "cli-runner")
        _, err = finish(runner, stop=True)
    assert runner.returncode == 0, err
    with alkstore.open(dsn) as store:
        fired = store.inspect().jobs("ticks")
        assert fired
        assert all(job.payload == {} for job in fired)
        assert store.inspect().jobs("reports") == []  # five minutes have not passed
    [ticked] = [s for s in ok_json("schedules", "--dsn", dsn) if s["name"] == "tick"]
    assert before < ticked["last_fire_at"] < ticked["next_fire_at"]
    _, ticking = table(ok("schedules", "--dsn", dsn), headers)
    assert (ticking["SCHEDULE"], ticking["LAST FIRE"][-4:]) == ("tick", " ago")

    assert ok("unschedule", "tick", "--dsn", dsn) == ""
    assert [s["name"] for s in ok_json("schedules", "--dsn", dsn)] == ["nightly"]
    again = run("unschedule", "tick", "--dsn", dsn)
    assert (again.returncode, again.stdout) == (3, "no schedule named 'tick'\n")
    gone = run("unschedule", "tick", "--json", "--dsn", dsn)
    assert (gone.returncode, json.loads(gone.stdout)) == (3, {"removed": False})


def test_sweep_dead_letters_expired_jobs(dsn: str) -> None:
    with alkstore.open(dsn) as store:
        stale = store.queue("q").enqueue("stale", EnqueueOpts(expires=0.05))
        store.queue("q").enqueue("fresh")
        store.queue("r").enqueue("fresh")
        poll(lambda: store.inspect().queues()[0].expired or None, what="the job to expire")
    assert ok_json("sweep", "--dsn", dsn) == {"q": 1, "r": 0}
    rows = table(ok("sweep", "q", "--dsn", dsn), ("QUEUE", "EXPIRED → DEAD"))
    assert rows == [{"QUEUE": "q", "EXPIRED → DEAD": "0"}]
    (dead,) = ok_json("jobs", "q", "--state", "dead", "--dsn", dsn)
    assert (dead["id"], dead["payload"], dead["died_at"] is not None) == (stale, "stale", True)


# Running: listen, tail, worker


def test_listen_prints_wakes_that_notify_sends(dsn: str) -> None:
    with (
        started("listen", "wakeups", "--count", "1", "--dsn", dsn) as plain,
        started("listen", "wakeups", "--count", "1", "--json", "--dsn", dsn) as scripted,
    ):
        for listener in (plain, scripted):
            assert listener.stderr is not None
            read_until(listener.stderr.fileno(), "listening on 'wakeups'")
        before = time.time()
        assert ok("notify", "wakeups", '{"n": 1}', "--dsn", dsn) == ""
        plain_out, _ = finish(plain)
        scripted_out, _ = finish(scripted)
    assert (plain.returncode, plain_out) == (0, "wake wakeups\n")
    assert scripted.returncode == 0
    wake = json.loads(scripted_out)
    assert wake["channel"] == "wakeups"
    assert before <= wake["at"] <= time.time()


def test_tail_prints_events_from_an_offset_a_consumer_or_the_head(dsn: str) -> None:
    with alkstore.open(dsn) as store:
        orders = store.stream("orders")
        orders.publish({"order": 1})
        orders.publish_with_key("k-2", {"order": 2})
        orders.publish({"order": 3})
        orders.save_offset("billing", 2)
    tailed = tail("orders", "--from", "0", "--count", "3", "--dsn", dsn)
    assert tailed == '1 {"order": 1}\n2 [k-2] {"order": 2}\n3 {"order": 3}\n'
    scripted = tail("orders", "--from", "1", "--count", "2", "--json", "--dsn", dsn)
    events = [json.loads(line) for line in scripted.splitlines()]
    assert [(e["offset"], e["key"], e["payload"]) for e in events] == [
        (2, "k-2", {"order": 2}), (3, None, {"order": 3}),
    ]  # fmt: skip
    assert all(isinstance(e["created_at"], float) for e in events)
    after_billing = tail("orders", "--consumer", "billing", "--count", "1", "--dsn", dsn)
    assert after_billing == '3 {"order": 3}\n'

    with started("tail", "orders", "--count", "1", "--dsn", dsn) as live:
        assert live.stderr is not None
        read_until(live.stderr.fileno(), "tailing 'orders' after offset 3")
        with alkstore.open(dsn) as store:
            store.stream("orders").publish({"order": 4})
        out, _ = finish(live)
    assert (live.returncode, out) == (0, '4 {"order": 4}\n')


def test_worker_handles_jobs_and_prints_a_summary_when_stopped(dsn: str, tmp_path: Path) -> None:
    write_handlers(tmp_path)
    with alkstore.open(dsn) as store:
        ids = [store.queue("q").enqueue({"n": n}) for n in range(3)]
        doomed = store.queue("q").enqueue({"fail": True}, EnqueueOpts(max_attempts=1))
    with started(
        "worker", "q", "cli_test_handlers:handle", "--concurrency", "2", "--dsn", dsn, cwd=tmp_path
    ) as worker:
        poll(lambda: sum(map(len, handled_ids(tmp_path).values())) == 4 or None, what="4 jobs")
        with alkstore.open(dsn) as store:
            poll(lambda: not store.inspect().jobs("q", "pending") or None, what="no pending job")
        out, err = finish(worker, stop=True)
    assert worker.returncode == 0, err
    assert out == "handled 4: 3 succeeded, 1 failed, 0 released, 0 lost\n"
    assert err.startswith("alkstore: worker ")
    assert " on 'q' (Ctrl-C to stop)\n" in err.splitlines(keepends=True)[0]
    assert (
        f"alkstore: job {doomed} of 'q' failed on its last attempt (1 of 1) and went to dead "
        f"letters: RuntimeError: job {doomed} refused\n"
    ) in err  # once: the traceback's error is not repeated after the message
    assert "Traceback" not in err  # only with --debug
    assert "/s" not in err
    assert "\r" not in err
    (noted,) = handled_ids(tmp_path).values()
    assert sorted(noted) == sorted([*ids, doomed])
    (dead,) = ok_json("jobs", "q", "--dsn", dsn)
    assert (dead["id"], dead["state"]) == (doomed, "dead")
    assert dead["last_error"] == f"RuntimeError: job {doomed} refused"


def test_worker_shows_live_progress_on_a_terminal(dsn: str, tmp_path: Path) -> None:
    write_handlers(tmp_path)
    with alkstore.open(dsn) as store:
        for n in range(3):
            store.queue("q").enqueue({"n": n})
    controller, terminal = pty.openpty()
    try:
        with started(
            "worker", "q", "cli_test_handlers:handle", "--dsn", dsn, cwd=tmp_path, stderr=terminal
        ) as worker:
            os.close(terminal)
            terminal = -1
            shown = read_until(controller, "handled 3 (0 failed)")
            shown += read_until(controller, "/s")
            out, _ = finish(worker, stop=True)
            while chunk := read_some(controller):
                shown += chunk
    finally:
        os.close(controller)
        if terminal >= 0:
            os.close(terminal)
    assert worker.returncode == 0
    assert out == "handled 3: 3 succeeded, 0 failed, 0 released, 0 lost\n"
    text = shown.decode()
    assert "\r\x1b[2Khandled" in text  # one status line, rewritten in place
    assert re.search(
        r"handled 3 \(0 failed\) · \d+\.\d/s \(last 10 s\) · in flight 0\r?\n", text
    ), text


def test_two_workers_and_the_queues_view_agree_on_counts(dsn: str, tmp_path: Path) -> None:
    total, concurrency, batch = 200, 2, 4
    write_handlers(tmp_path)
    with alkstore.open(dsn) as store, store.transaction() as tx:
        # 5 s of work for the two workers: a loaded machine's CLI snapshots see it in flight.
        enqueued = {tx.enqueue_tx("q", None, {"sleep": 0.1}) for _ in range(total)}
    assert ok_json("queues", "--dsn", dsn)[0]["ready"] == total

    worker_command = ("worker", "q", "cli_test_handlers:handle", "--concurrency", str(concurrency),
                      "--batch-size", str(batch), "--json", "--dsn", dsn)  # fmt: skip
    snapshots: list[tuple[int, dict[str, Any]]] = []
    with (
        started(*worker_command, cwd=tmp_path) as first,
        started(*worker_command, cwd=tmp_path) as second,
    ):
        poll(lambda: handled_ids(tmp_path) or None, what="a first handled job")
        deadline = time.monotonic() + 60
        # Each snapshot is (jobs handled by the time it was taken, the queue's row).
        while (views := ok_json("queues", "--dsn", dsn)) and time.monotonic() < deadline:
            snapshots.append((sum(map(len, handled_ids(tmp_path).values())), *views))
        assert views == [], "the workers did not get through the jobs"
        summaries = []
        for worker in (first, second):
            out, err = finish(worker, stop=True)
            assert worker.returncode == 0, err
            summaries.append((worker.pid, json.loads(out)))

    assert any(0 < view["total"] < total for _, view in snapshots), snapshots
    previous = total
    for done, view in snapshots:
        assert view["name"] == "q"
        assert (view["scheduled"], view["expired"], view["dead"]) == (0, 0, 0), view
        assert view["ready"] + view["processing"] == view["total"] <= previous, view
        assert view["processing"] <= 2 * batch, view  # each worker holds a batch at most
        assert total - view["total"] <= done, (done, view)  # acked only after handled
        previous = view["total"]

    handled = handled_ids(tmp_path)
    union = [job_id for ids in handled.values() for job_id in ids]
    assert len(union) == len(set(union)) == total
    assert set(union) == enqueued
    for pid, summary in summaries:
        assert summary["handled"] == summary["succeeded"] == len(handled[f"handled-{pid}.txt"]) > 0
        assert summary["failed"] == summary["released"] == summary["lost"] == 0
        assert summary["in_flight"] == 0
    assert ok("queues", "--dsn", dsn) == "no queues hold jobs\n"
    assert ok_json("queues", "--dsn", dsn) == []


# Bad input, errors and exit codes


def test_an_invalid_json_payload_is_one_line_and_exit_2(dsn: str) -> None:
    line = one_line_error(run("enqueue", "q", "{bad", "--dsn", dsn), "enqueue", 2)
    assert "not valid JSON" in line
    assert "'{bad'" in line
    one_line_error(run("publish", "s", "nope", "--dsn", dsn), "publish", 2)
    one_line_error(
        run("enqueue", "q", "1", "--delay", "1", "--run-at", "5", "--dsn", dsn), "enqueue", 2
    )
    line = one_line_error(
        run("enqueue", "q", "1", "--run-at", "2030-01-01T00:00", "--dsn", dsn), "enqueue", 2
    )
    assert "UTC offset" in line
    one_line_error(run("jobs", "q", "--limit", "0", "--dsn", dsn), "jobs", 2)
    one_line_error(run("tail", "s", "--from", "0", "--consumer", "c", "--dsn", dsn), "tail", 2)
    with alkstore.open(dsn) as store:
        assert store.inspect().queues() == []


def test_a_cron_schedule_in_a_zone_is_made_and_listed_with_its_zone(dsn: str) -> None:
    made = ok(
        "schedule", "berlin", "30 2 * * *", "reports", "{}", "--tz", "Europe/Berlin",
        "--dsn", dsn,
    )  # fmt: skip
    assert made.startswith("berlin: 30 2 * * * (Europe/Berlin) into 'reports', next in ")
    utc = ok_json("schedule", "utc", "@daily", "reports", "{}", "--dsn", dsn)
    assert (utc["spec"], utc["tz"], utc["next_fire_at"] % 86_400) == ("@daily", None, 0)
    headers = ("SCHEDULE", "SPEC", "TZ", "QUEUE", "NEXT FIRE", "LAST FIRE", "PAYLOAD")
    berlin, daily = table(ok("schedules", "--dsn", dsn), headers)
    assert (berlin["SCHEDULE"], berlin["SPEC"], berlin["TZ"]) == (
        "berlin", "30 2 * * *", "Europe/Berlin",
    )  # fmt: skip
    assert (daily["SCHEDULE"], daily["TZ"]) == ("utc", "UTC")
    assert [s["tz"] for s in ok_json("schedules", "--dsn", dsn)] == ["Europe/Berlin", None]


def test_an_unknown_time_zone_is_one_clear_line(dsn: str) -> None:
    result = run("schedule", "s", "0 3 * * *", "q", "{}", "--tz", "Europe/Berln", "--dsn", dsn)
    line = one_line_error(result, "schedule", 2)
    assert "'Europe/Berln' is not an IANA time zone" in line
    assert "did you mean 'Europe/Berlin'" in line


def test_a_bad_schedule_spec_is_one_clear_line(dsn: str) -> None:
    line = one_line_error(run("schedule", "s", "every 5", "q", "{}", "--dsn", dsn), "schedule", 2)
    assert "'every 5'" in line
    assert "@every <n><unit>" in line
    assert ok_json("schedules", "--dsn", dsn) == []


def test_an_unknown_handler_is_exit_2(dsn: str, tmp_path: Path) -> None:
    write_handlers(tmp_path)
    line = one_line_error(
        run("worker", "q", "no_such_module:handle", "--dsn", dsn, cwd=tmp_path), "worker", 2
    )
    assert "cannot import 'no_such_module:handle'" in line
    assert "ModuleNotFoundError" in line
    line = one_line_error(
        run("worker", "q", "cli_test_handlers:nope", "--dsn", dsn, cwd=tmp_path), "worker", 2
    )
    assert "AttributeError" in line
    one_line_error(run("worker", "q", "cli_test_handlers", "--dsn", dsn, cwd=tmp_path), "worker", 2)


def test_an_unreachable_store_is_exit_1_and_debug_shows_the_traceback() -> None:
    line = one_line_error(run("queues", "--dsn", UNREACHABLE), "queues", 1)
    assert "cannot connect to PostgreSQL at 127.0.0.1:1" in line
    assert "\t" not in line
    debugged = run("--debug", "queues", "--dsn", UNREACHABLE)
    assert debugged.returncode == 1
    assert "Traceback (most recent call last)" in debugged.stderr
    assert "alkstore._errors.Database: cannot connect" in debugged.stderr


def test_nothing_there_is_exit_3(dsn: str) -> None:
    for arguments in (("unschedule", "nosuch"), ("listen", "quiet", "--timeout", "0.2"),
                      ("tail", "quiet", "--timeout", "0.2")):  # fmt: skip
        result = run(*arguments, "--dsn", dsn)
        assert result.returncode == 3, (arguments, result.stderr)
        assert "Traceback" not in result.stderr
    assert run("notify", "quiet", "--dsn", dsn).returncode == 0
    assert run("listen", "quiet", "--count", "1", "--timeout", "0.2", "--dsn", dsn).returncode == 3


def test_log_level_debug_shows_each_job_a_worker_starts_and_settles(
    dsn: str, tmp_path: Path
) -> None:
    write_handlers(tmp_path)
    with alkstore.open(dsn) as store:
        job_id = store.queue("q").enqueue({"n": 1})
    arguments = ("worker", "q", "cli_test_handlers:handle", "--dsn", dsn, "--log-level", "DEBUG")
    with started(*arguments, cwd=tmp_path) as worker:
        poll(lambda: handled_ids(tmp_path) or None, what="the job handled")
        with alkstore.open(dsn) as store:
            poll(lambda: not store.inspect().jobs("q") or None, what="the job acked")
        out, err = finish(worker, stop=True)
    assert worker.returncode == 0, err
    assert out == "handled 1: 1 succeeded, 0 failed, 0 released, 0 lost\n"
    assert f"alkstore: job {job_id} of 'q' started (attempt 1 of 3)\n" in err
    assert re.search(rf"alkstore: job {job_id} of 'q' succeeded in [0-9.]+ s \(attempt 1", err)


def test_a_handlers_error_reaches_the_log_as_one_line_that_shows_its_escapes(
    dsn: str, tmp_path: Path
) -> None:
    """A terminal is not told what to do by an error's text: escape sequences,
    carriage returns and line feeds are written as escapes, one line a record."""
    write_handlers(tmp_path)
    said = "boom\x1b]0;OWNED\x07\x1b[2J\rfake: all jobs succeeded\nline two"
    with alkstore.open(dsn) as store:
        store.queue("q").enqueue({"say": said}, EnqueueOpts(max_attempts=1))
    with started("worker", "q", "cli_test_handlers:handle", "--dsn", dsn, cwd=tmp_path) as worker:
        with alkstore.open(dsn) as store:
            poll(lambda: store.inspect().jobs("q", "dead") or None, what="the job dead")
        _, err = finish(worker, stop=True)
    assert worker.returncode == 0, err
    assert not {"\x1b", "\x07", "\r"} & set(err)
    (line,) = [line for line in err.splitlines() if "went to dead letters" in line]
    assert line.endswith(
        "RuntimeError: boom\\x1b]0;OWNED\\x07\\x1b[2J\\rfake: all jobs succeeded\\nline two"
    )


def test_json_lists_payloads_as_deep_as_the_codec_takes(dsn: str) -> None:
    deep: Any = "x"
    for _ in range(500):
        deep = [deep]
    with alkstore.open(dsn) as store:
        store.queue("d").enqueue(deep)
        store.schedule("deep", "@every 1h", "d", deep)
    (job,) = ok_json("jobs", "d", "--dsn", dsn)
    assert job["payload"] == deep
    (schedule,) = ok_json("schedules", "--dsn", dsn)
    assert schedule["payload"] == deep
    made = ok_json("schedule", "deeper", "@every 1h", "d", json.dumps(deep), "--dsn", dsn)
    assert made["payload"] == deep


def test_names_that_would_forge_rows_or_move_the_terminal_show_as_escapes(dsn: str) -> None:
    forged = "x\nemails   0 0 0 0 0 -\npayments"
    with alkstore.open(dsn) as store:
        store.queue(forged).enqueue(1)
        store.queue("t\x1b]0;PWNED\x07\x1b[2J").enqueue(1)
        lock = store.try_lock("deploy", "alice\rbob", 60)
        assert lock is not None
    printed = ok("queues", "--dsn", dsn)
    assert len(printed.splitlines()) == 3
    assert "\x1b" not in printed
    assert "x\\nemails   0 0 0 0 0 -\\npayments" in printed
    assert "t\\x1b]0;PWNED\\x07\\x1b[2J" in printed
    assert "alice\\rbob" in ok("locks", "--dsn", dsn)


def test_log_level_takes_only_a_known_level(dsn: str) -> None:
    result = run("--log-level", "loud", "queues", "--dsn", dsn)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "--log-level: invalid choice: 'loud'" in result.stderr
    assert ok("queues", "--log-level", "error", "--dsn", dsn) == ok("queues", "--dsn", dsn)


def test_the_common_options_work_before_and_after_the_command(dsn: str) -> None:
    ok("enqueue", "q", "1", "--dsn", dsn)
    before = ok("--json", "--dsn", dsn, "queues")
    after = ok("queues", "--json", "--dsn", dsn)
    assert json.loads(before)[0]["ready"] == json.loads(after)[0]["ready"] == 1
    assert "Traceback" in run("--debug", "jobs", "q", "--limit", "0", "--dsn", dsn).stderr


def test_alkstore_dsn_names_the_store_when_dsn_is_not_given(dsn: str, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    job_id = int(ok("enqueue", "q", '{"via": "env"}', cwd=elsewhere, env=environment(dsn)))
    listed = json.loads(ok("jobs", "q", "--json", cwd=elsewhere, env=environment(dsn)))
    assert [row["id"] for row in listed] == [job_id]
    assert not (elsewhere / "alkstore.db").exists()
    # --dsn wins over the environment.
    assert ok("queues", "--json", "--dsn", dsn, env=environment(UNREACHABLE)) != "[]\n"
    with alkstore.open(dsn) as store:
        (job,) = store.inspect().jobs("q")
    assert (job.id, job.payload) == (job_id, {"via": "env"})


def test_the_default_store_is_refused_for_reading_until_written(tmp_path: Path) -> None:
    for arguments in (("queues",), ("jobs", "q"), ("locks",), ("unschedule", "x"), ("tail", "s")):
        line = one_line_error(run(*arguments, cwd=tmp_path), arguments[0], 1)
        assert "no store at ./alkstore.db" in line
    assert not (tmp_path / "alkstore.db").exists()
    job_id = ok("enqueue", "q", '{"n": 1}', cwd=tmp_path)
    assert (tmp_path / "alkstore.db").exists()
    (row,) = table(
        ok("jobs", "q", cwd=tmp_path),
        ("ID", "STATE", "ATTEMPTS", "PRIORITY", "RUN AT", "WORKER", "ERROR", "PAYLOAD"),
    )
    assert (row["ID"], row["STATE"], row["PAYLOAD"]) == (job_id.strip(), "pending", '{"n": 1}')


def test_a_mistyped_store_path_is_refused_for_reading_not_created(tmp_path: Path) -> None:
    """Looking through a path that names no file must not create an empty store
    there and report that nothing is in it (a metrics scrape would look healthy)."""
    for dsn in ("typo.db", "sqlite:///typo.db"):
        for arguments in (("queues",), ("jobs", "q"), ("metrics",), ("streams",)):
            line = one_line_error(run(*arguments, "--dsn", dsn, cwd=tmp_path), arguments[0], 1)
            assert f"no store at {dsn!r}" in line
    assert not (tmp_path / "typo.db").exists()
    ok("enqueue", "q", "1", "--dsn", "typo.db", cwd=tmp_path)  # a write creates it
    assert "q" in ok("queues", "--dsn", "sqlite:///typo.db", cwd=tmp_path)


def test_ctrl_c_while_a_command_waits_on_the_database_is_one_line_and_exit_130(
    tmp_path: Path,
) -> None:
    path = tmp_path / "locked.db"
    alkstore.open(path).close()
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as holder:
        holder.execute("BEGIN EXCLUSIVE")  # the enqueue waits out its busy timeout
        waiting = subprocess.Popen(
            [*ALKSTORE, "--dsn", str(path), "enqueue", "q", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment(),
        )  # fmt: skip
        time.sleep(1.5)
        waiting.send_signal(signal.SIGINT)
        _, stderr = waiting.communicate(timeout=30)
        holder.execute("ROLLBACK")
    result = subprocess.CompletedProcess(waiting.args, waiting.returncode, "", stderr)
    assert one_line_error(result, "enqueue", 130) == "alkstore enqueue: interrupted"


def test_a_reader_that_goes_away_ends_the_command_quietly(dsn: str) -> None:
    ok("enqueue", "q", "1", "--dsn", dsn)
    reader, writer = os.pipe()
    os.close(reader)
    try:
        result = subprocess.run(
            [*ALKSTORE, "jobs", "q", "--json", "--dsn", dsn], stdout=writer,
            stderr=subprocess.PIPE, text=True, timeout=60, check=False, env=environment(),
        )  # fmt: skip
    finally:
        os.close(writer)
    assert (result.returncode, result.stderr) == (1, "")


# Long-running commands: what ends them, and what must not


EXITING_HANDLER = '''
"""A handler that ends the process the way scripts do: sys.exit, here with code 0."""

import sys


def handle(job):
    sys.exit(0)
'''


def test_worker_exits_1_when_a_handler_raises_system_exit_releasing_its_claims(
    dsn: str, tmp_path: Path
) -> None:
    (tmp_path / "exiting_handler.py").write_text(EXITING_HANDLER)
    with alkstore.open(dsn) as store:
        job_id = store.queue("q").enqueue("last words")
    with started("worker", "q", "exiting_handler:handle", "--dsn", dsn, cwd=tmp_path) as worker:
        out, err = worker.communicate(timeout=20)  # it must end by itself, not stall
    assert worker.returncode == 1, err  # not the handler's 0: the worker did not finish its work
    assert out.decode() == "handled 0: 0 succeeded, 0 failed, 1 released, 0 lost\n"
    assert (
        f"alkstore: job {job_id} of 'q': the handler raised SystemExit: 0; "
        "the worker stops and releases its claims\n"
    ) in err.decode()
    with alkstore.open(dsn) as store:
        job = store.queue("q").get_job(job_id)
    assert job is not None
    assert (job.state, job.attempts) == ("pending", 0)


def test_worker_exits_1_when_its_sqlite_file_is_deleted_under_it(tmp_path: Path) -> None:
    # No retry reaches the new file (or none): retrying for ever would be a
    # process that looks alive and works for no one. A supervisor restarts it.
    (tmp_path / "quiet_handler.py").write_text("def handle(job):\n    pass\n")
    path = tmp_path / "store.db"
    with alkstore.open(str(path)) as store:
        store.queue("q").enqueue("before")
    with started("worker", "q", "quiet_handler:handle", "--dsn", str(path), cwd=tmp_path) as worker:
        assert worker.stderr is not None
        read_until(worker.stderr.fileno(), "Ctrl-C to stop")
        path.unlink()
        _, err = worker.communicate(timeout=20)  # it must end by itself
    said = err.decode()
    assert worker.returncode == 1, said
    assert "trying again cannot help; stopping" in said
    assert said.rstrip().endswith("is gone (deleted or moved away) while the store had it open; "
                                  "what this store writes would reach no other process: "
                                  "reopen the store")  # fmt: skip


def test_run_schedules_stands_by_again_after_losing_leadership(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    dsn = f"sqlite:///{path}?scheduler_lease_s=0.6"
    with alkstore.open(dsn) as store:
        store.schedule("tick", "@every 1s", "ticks", {})
    with started("run-schedules", "--owner", "cli-runner", "--dsn", dsn) as runner:
        assert runner.stderr is not None
        read_until(runner.stderr.fileno(), "running schedules")
        with alkstore.open(dsn) as store:
            poll(lambda: _scheduler_owner(store) == "cli-runner" or None, what="the CLI to lead")
            # Its lease lapses (as after a long stall) and another runner takes over.
            with contextlib.closing(sqlite3.connect(path)) as connection, connection:
                connection.execute("UPDATE __alkstore_locks SET expires_at = 0")
            usurping = threading.Event()
            usurper = threading.Thread(
                target=store.run_schedules, args=(usurping,), kwargs={"owner": "usurper"}
            )
            usurper.start()
            try:
                said = read_until(runner.stderr.fileno(), "standing by to lead again").decode()
            finally:
                usurping.set()  # the usurper stops and releases leadership
                usurper.join(10)
            poll(lambda: _scheduler_owner(store) == "cli-runner" or None, what="the CLI to lead")
        assert runner.poll() is None, "run-schedules ended when it lost leadership"
        _, err = finish(runner, stop=True)
    assert runner.returncode == 0, err
    # It finds out on renewing, or on firing a boundary (which renews too).
    lost = r"alkstore: 'cli-runner' (failed to renew|no longer holds) '__alkstore_scheduler'"
    assert re.search(lost + "; standing by to lead again", said), said


def _scheduler_owner(store: alkstore.Store) -> str | None:
    held = [lock for lock in store.inspect().locks() if lock.name == alkstore.SCHEDULER_LOCK]
    return held[0].owner if held else None


# Acting on dead letters and single jobs


def _dead_jobs(dsn: str, queue: str, count: int) -> list[int]:
    """``count`` dead letters in ``queue``, oldest first."""
    with alkstore.open(dsn) as store:
        handle = store.queue(queue)
        ids = []
        for n in range(count):
            ids.append(handle.enqueue({"n": n}, EnqueueOpts(key=f"k{n}")))
            job = handle.claim_one("w")
            assert job is not None
            assert job.fail("boom")
        return ids


def _states(dsn: str, queue: str, ids: Sequence[int]) -> list[str | None]:
    with alkstore.open(dsn) as store:
        infos = [store.queue(queue).get_job(job_id) for job_id in ids]
    return [None if info is None else info.state for info in infos]


def test_requeue_dead_moves_the_given_ids_or_all_of_them_back(dsn: str) -> None:
    first, second, third = _dead_jobs(dsn, "q", 3)
    assert ok("requeue-dead", "q", str(first), "--dsn", dsn) == "requeued 1 of 1 dead job of 'q'\n"
    assert _states(dsn, "q", [first, second, third]) == ["pending", "dead", "dead"]
    assert ok_json("requeue-dead", "q", "--all", "--dsn", dsn) == {"requeued": 2}
    assert _states(dsn, "q", [first, second, third]) == ["pending"] * 3
    with alkstore.open(dsn) as store:
        back = store.queue("q").get_job(second)
    assert back is not None
    assert (back.payload, back.key, back.attempts) == ({"n": 1}, "k1", 0)
    nothing = run("requeue-dead", "q", "--all", "--dsn", dsn)
    assert (nothing.returncode, nothing.stdout) == (3, "requeued 0 dead jobs of 'q'\n")


def test_requeue_dead_keep_attempts_leaves_the_count(dsn: str) -> None:
    [job_id] = _dead_jobs(dsn, "q", 1)
    ok("requeue-dead", "q", str(job_id), "--keep-attempts", "--dsn", dsn)
    with alkstore.open(dsn) as store:
        info = store.queue("q").get_job(job_id)
    assert info is not None
    assert (info.state, info.attempts) == ("pending", 1)


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (("requeue-dead", "q"), "give the ids of the dead jobs to requeue, or --all"),
        (("requeue-dead", "q", "1", "--all"), "give the ids of the dead jobs to requeue, or --all"),
        (("requeue-dead", "q", "x1"), "not a job id"),
        (("requeue-dead", "q", "0"), "not a job id"),
        (("cancel", "q", "-3"), "not a job id"),
        (("purge-dead", "q", "--older-than", "-1"), "older_than_s must be >= 0"),
    ],
)  # fmt: skip
def test_bad_operator_commands_are_one_line_and_exit_2(
    dsn: str, arguments: tuple[str, ...], says: str
) -> None:
    _dead_jobs(dsn, "q", 1)
    result = run(*arguments, "--dsn", dsn)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert says in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (("tail", "orders", "--timeout", "-1"), "finite number of seconds, 0 or more"),
        (("tail", "orders", "--timeout", "nan"), "finite number of seconds, 0 or more"),
        (("tail", "orders", "--count", "0"), "must be 1 or more, not 0"),
        (("tail", "orders", "--from", "-5"), "offset must be in"),
        (("listen", "c", "--count", "-1"), "must be 1 or more, not -1"),
        (("listen", "c", "--timeout", "inf"), "finite number of seconds, 0 or more"),
        (("run-schedules", "--owner", ""), "owner must not be empty"),
    ],
)  # fmt: skip
def test_bad_long_running_commands_are_one_line_and_exit_2_before_they_start(
    dsn: str, arguments: tuple[str, ...], says: str
) -> None:
    """Refused before the banner that says the command is running, never run
    for no time or a negative count."""
    result = run(*arguments, "--dsn", dsn)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert says in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr


def test_purge_dead_deletes_dead_jobs_all_or_the_old_ones(dsn: str) -> None:
    old = _dead_jobs(dsn, "q", 2)
    time.sleep(1.0)
    recent = _dead_jobs(dsn, "other", 1)
    with alkstore.open(dsn) as store:
        store.queue("q").enqueue("live")
    none_old = run("purge-dead", "other", "--older-than", "600", "--json", "--dsn", dsn)
    assert (none_old.returncode, json.loads(none_old.stdout)) == (3, {"purged": 0})
    assert ok("purge-dead", "q", "--older-than", "0.5", "--dsn", dsn) == (
        "deleted 2 dead jobs of 'q'\n"
    )
    assert _states(dsn, "q", old) == [None, None]
    assert _states(dsn, "other", recent) == ["dead"]
    with alkstore.open(dsn) as store:
        assert [s.ready for s in store.inspect().queues() if s.name == "q"] == [1]
    assert run("purge-dead", "q", "--dsn", dsn).returncode == 3


def test_cancel_deletes_one_job_and_says_when_there_is_none(dsn: str) -> None:
    [dead] = _dead_jobs(dsn, "q", 1)
    with alkstore.open(dsn) as store:
        live = store.queue("q").enqueue("live")
    assert ok_json("cancel", "q", str(live), "--dsn", dsn) == {"cancelled": True}
    assert ok("cancel", "q", str(dead), "--dsn", dsn) == ""
    assert _states(dsn, "q", [live, dead]) == [None, None]
    gone = run("cancel", "q", str(live), "--dsn", dsn)
    assert (gone.returncode, gone.stdout) == (3, f"no job {live} in 'q'\n")


def _at_a_terminal(arguments: Sequence[str], answer: bytes | None) -> tuple[int, str]:
    """Run the command with a terminal for stdin and stderr, typing ``answer`` when
    it asks; its exit code and what the terminal showed."""
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [*ALKSTORE, *arguments], stdin=terminal, stdout=subprocess.PIPE, stderr=terminal,
            env=environment(),
        )  # fmt: skip
        os.close(terminal)
        terminal = -1
        shown = b""
        if answer is not None:
            shown = read_until(controller, "[y/N] ")
            os.write(controller, answer)
        process.communicate(timeout=30)
        while select.select([controller], [], [], 0.2)[0] and (chunk := read_some(controller)):
            shown += chunk
    finally:
        os.close(controller)
        if terminal >= 0:
            os.close(terminal)
    return process.returncode, shown.decode()


def test_requeue_all_and_purge_ask_first_at_a_terminal(dsn: str) -> None:
    ids = _dead_jobs(dsn, "q", 2)
    code, shown = _at_a_terminal(["requeue-dead", "q", "--all", "--dsn", dsn], b"n\n")
    assert code == 1
    assert "Requeue all 2 dead jobs of 'q'? [y/N]" in shown
    assert "not confirmed: nothing was changed" in shown
    assert _states(dsn, "q", ids) == ["dead", "dead"]
    code, shown = _at_a_terminal(["requeue-dead", "q", "--all", "--dsn", dsn], b"y\n")
    assert code == 0, shown
    assert _states(dsn, "q", ids) == ["pending", "pending"]
    more = _dead_jobs(dsn, "r", 1)
    code, shown = _at_a_terminal(["purge-dead", "r", "--dsn", dsn], b"\n")
    assert (code, _states(dsn, "r", more)) == (1, ["dead"])
    assert "Delete the 1 dead job of 'r'? [y/N]" in shown
    code, _ = _at_a_terminal(["purge-dead", "r", "--yes", "--dsn", dsn], None)
    assert (code, _states(dsn, "r", more)) == (0, [None])


# Trimming streams


def _published(dsn: str, stream: str, count: int) -> list[int]:
    with alkstore.open(dsn) as store:
        return [store.stream(stream).publish({"n": n}) for n in range(count)]


def test_trim_up_to_an_offset_or_by_retention(dsn: str) -> None:
    offsets = _published(dsn, "orders", 6)
    said = ok("trim", "orders", "--up-to", str(offsets[1]), "--dsn", dsn)
    assert said == f"trimmed 2 events of 'orders'; it is trimmed through offset {offsets[1]}\n"
    with alkstore.open(dsn) as store:
        store.stream("orders").save_offset("billing", offsets[2])
    spared = ok_json("trim", "orders", "--keep-last", "1", "--dsn", dsn)
    assert spared == {"trimmed": 1, "trimmed_through": offsets[2]}, "billing read only that far"
    forced = ok_json("trim", "orders", "--keep-last", "1", "--force", "--dsn", dsn)
    assert forced == {"trimmed": 2, "trimmed_through": offsets[4]}
    nothing = run("trim", "orders", "--max-age", "3600", "--json", "--dsn", dsn)
    assert (nothing.returncode, json.loads(nothing.stdout)["trimmed"]) == (3, 0)


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (("trim", "orders"), "give --up-to, or --max-age and/or --keep-last"),
        (("trim", "orders", "--up-to", "3", "--keep-last", "1"), "(not both)"),
        (("trim", "orders", "--up-to", "3", "--force"), "--force goes with"),
        (("trim", "orders", "--up-to", "-3"), "not a whole number"),
        (("trim", "orders", "--keep-last", "x"), "not a whole number"),
        (("trim", "orders", "--max-age", "nan"), "max_age_s must be finite"),
        (("trim", "orders", "--up-to", str(2**63)), "offset must be in"),
    ],
)  # fmt: skip
def test_bad_trim_commands_are_one_line_and_exit_2(
    dsn: str, arguments: tuple[str, ...], says: str
) -> None:
    _published(dsn, "orders", 1)
    result = run(*arguments, "--dsn", dsn)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert says in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr


def test_trim_asks_first_at_a_terminal(dsn: str) -> None:
    offsets = _published(dsn, "orders", 2)
    arguments = ["trim", "orders", "--keep-last", "0", "--dsn", dsn]
    code, shown = _at_a_terminal(arguments, b"n\n")
    assert code == 1
    assert "Delete the events before the newest 0 that every consumer has read" in shown
    with alkstore.open(dsn) as store:
        assert store.stream("orders").trimmed_through() == 0
    code, _ = _at_a_terminal([*arguments, "--yes"], None)
    with alkstore.open(dsn) as store:
        assert (code, store.stream("orders").trimmed_through()) == (0, offsets[-1])


def test_schedule_takes_a_key_and_refuses_an_empty_one(dsn: str) -> None:
    ok("schedule", "tick", "@every 1h", "ticks", '"t"', "--key", "tick", "--dsn", dsn)
    result = run("schedule", "tock", "@every 1h", "ticks", '"t"', "--key", "", "--dsn", dsn)
    assert "key must not be empty" in one_line_error(result, "schedule", 2)


def test_enqueue_with_a_key_prints_the_live_jobs_id(dsn: str) -> None:
    first = ok("enqueue", "q", '{"n": 1}', "--key", "invoice-42", "--dsn", dsn)
    assert ok("enqueue", "q", '{"n": 2}', "--key", "invoice-42", "--dsn", dsn) == first
    assert ok("enqueue", "q", '{"n": 3}', "--key", "invoice-43", "--dsn", dsn) != first


# Metrics: printed once, and served over HTTP (parsed by Prometheus' own parser)

ODD = 'we"ird \\ name\nwith a line feed'
"""A queue and stream name the format must escape: quote, backslash, line feed."""

FAMILIES = (
    "alkstore_queue_jobs",
    "alkstore_queue_oldest_ready_age_seconds",
    "alkstore_stream_head_offset",
    "alkstore_stream_consumer_offset",
    "alkstore_stream_consumer_lag",
    "alkstore_schedule_next_fire_timestamp_seconds",
    "alkstore_inspect_duration_seconds",
)
# name{labels} value — label values quoted, with only \\, \" and \n escapes inside.
_SAMPLE = re.compile(
    r'[a-z_]+(\{[a-z_]+="(?:[^"\\\n]|\\[\\"n])*"(,[a-z_]+="(?:[^"\\\n]|\\[\\"n])*")*\})? '
    r"(-?[0-9.e+]+|NaN|[+-]Inf)"
)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition by (name, sorted labels), parsed by Prometheus' parser."""
    found = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge", family
        for sample in family.samples:
            found[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return found


def queue_jobs(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], queue: str
) -> dict[str, float]:
    return {
        dict(labels)["state"]: value
        for (name, labels), value in found.items()
        if name == "alkstore_queue_jobs" and dict(labels)["queue"] == queue
    }


def assert_well_formed(text: str) -> None:
    """Each metric's HELP, then TYPE gauge, then its samples; one line each; a final line feed."""
    assert text.endswith("\n")
    lines = text.splitlines()
    families = [line.split()[2] for line in lines if line.startswith("# HELP ")]
    assert tuple(families) == FAMILIES
    current = None
    for number, line in enumerate(lines):
        if line.startswith("# HELP "):
            current = line.split()[2]
            assert lines[number + 1] == f"# TYPE {current} gauge"
        elif not line.startswith("# TYPE "):
            assert current is not None
            assert line.startswith((current + "{", current + " ")), line
            assert _SAMPLE.fullmatch(line), line


def fill(dsn: str) -> None:
    """A queue with a job in each state, one with only dead letters, a stream, a schedule."""
    with alkstore.open(dsn) as store:
        work = store.queue(ODD, QueueOpts(max_attempts=1))
        work.enqueue("old", EnqueueOpts(run_at=time.time() - 30))
        work.enqueue("ready")
        work.enqueue("later", EnqueueOpts(delay=600))
        work.enqueue("claimed", EnqueueOpts(priority=9))
        work.enqueue("doomed", EnqueueOpts(priority=8))
        _, doomed = work.claim_batch("w", 2)  # the first stays claimed
        assert doomed.fail("no")
        only_dead = store.queue("only-dead")
        only_dead.enqueue("x")
        job = only_dead.claim_one("w")
        assert job is not None
        assert job.fail("no")
        stream = store.stream(ODD)
        for n in range(5):
            stream.publish(n)
        stream.save_offset("billing", 2)
        stream.save_offset("audit", 5)
        store.schedule("nightly", "@every 1d", "reports", {})


def test_metrics_prints_every_queue_stream_and_schedule_in_the_text_format(dsn: str) -> None:
    fill(dsn)
    text = ok("metrics", "--dsn", dsn)
    assert_well_formed(text)
    found = samples(text)
    assert queue_jobs(found, ODD) == {
        "ready": 2, "scheduled": 1, "processing": 1, "dead": 1, "expired": 0,
    }  # fmt: skip
    assert queue_jobs(found, "only-dead") == {
        "ready": 0, "scheduled": 0, "processing": 0, "dead": 1, "expired": 0,
    }  # fmt: skip
    age = found["alkstore_queue_oldest_ready_age_seconds", (("queue", ODD),)]
    assert 29 <= age < 90
    assert found["alkstore_queue_oldest_ready_age_seconds", (("queue", "only-dead"),)] == 0
    assert found["alkstore_stream_head_offset", (("stream", ODD),)] == 5
    for consumer, offset, lag in (("billing", 2, 3), ("audit", 5, 0)):
        labels = (("consumer", consumer), ("stream", ODD))
        assert found["alkstore_stream_consumer_offset", labels] == offset
        assert found["alkstore_stream_consumer_lag", labels] == lag
    fires = found[
        "alkstore_schedule_next_fire_timestamp_seconds",
        (("queue", "reports"), ("schedule", "nightly")),
    ]
    assert fires == pytest.approx(time.time() + 86_400, abs=60)
    assert 0 < found["alkstore_inspect_duration_seconds", ()] < 5
    # The escapes as written: the odd name on one line, its quote, backslash and line feed escaped.
    assert (
        'alkstore_queue_jobs{queue="we\\"ird \\\\ name\\nwith a line feed",state="ready"} 2\n'
        in text
    )


def test_metrics_always_exports_the_queues_named_with_zeros_while_they_are_empty(dsn: str) -> None:
    with alkstore.open(dsn) as store:
        store.queue("emails").enqueue("x")
    found = samples(ok("metrics", "--queue", "emails", "--queue", "reports", "--dsn", dsn))
    assert queue_jobs(found, "emails")["ready"] == 1
    assert queue_jobs(found, "reports") == dict.fromkeys(
        ("ready", "scheduled", "processing", "dead", "expired"), 0
    )
    assert found["alkstore_queue_oldest_ready_age_seconds", (("queue", "reports"),)] == 0
    # Not named and empty: no series at all (a queue is only a name).
    assert queue_jobs(samples(ok("metrics", "--dsn", dsn)), "reports") == {}


def test_metrics_json_lists_the_same_samples(dsn: str) -> None:
    fill(dsn)
    listed = ok_json("metrics", "--dsn", dsn)
    text_samples = samples(ok("metrics", "--dsn", dsn))
    by_key = {(s["name"], tuple(sorted(s["labels"].items()))): s["value"] for s in listed}
    assert by_key.keys() == text_samples.keys()
    key = ("alkstore_queue_jobs", (("queue", ODD), ("state", "scheduled")))
    assert by_key[key] == text_samples[key] == 1


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("9464", "give HOST:PORT or :PORT"),
        (":http", "the port must be a number from 0 to 65535"),
        (":65536", "the port must be a number from 0 to 65535"),
        ("::1:9464", "IPv6 address in brackets"),
        ("a b:9464", "not a host name or address"),
        ("nosuch.invalid:9464", "cannot listen on 'nosuch.invalid'"),
    ],
)
def test_metrics_serve_refuses_a_bad_address_in_one_line(
    tmp_path: Path, value: str, says: str
) -> None:
    dsn = str(tmp_path / "store.db")
    ok("enqueue", "q", "1", "--dsn", dsn)
    line = one_line_error(run("metrics", "--serve", value, "--dsn", dsn), "metrics", 2)
    assert says in line, line


def test_metrics_serve_refuses_json(tmp_path: Path) -> None:
    dsn = str(tmp_path / "store.db")
    ok("enqueue", "q", "1", "--dsn", dsn)
    line = one_line_error(run("metrics", "--serve", ":0", "--json", "--dsn", dsn), "metrics", 2)
    assert "--json" in line


# Serving


@contextlib.contextmanager
def serving(dsn: str) -> Iterator[tuple[subprocess.Popen[bytes], int, str]]:
    """``alkstore metrics --serve 127.0.0.1:0``; yield it, its port and what it said at start."""
    process = subprocess.Popen(
        [*ALKSTORE, "metrics", "--serve", "127.0.0.1:0", "--dsn", dsn],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment(),
    )  # fmt: skip
    with process:
        try:
            assert process.stderr is not None
            said = read_until(process.stderr.fileno(), "(Ctrl-C to stop)").decode()
            match = re.search(r"on http://127\.0\.0\.1:(\d+)/metrics", said)
            assert match, said
            yield process, int(match.group(1)), said
        finally:
            if process.poll() is None:
                process.kill()


def get(port: int, path: str = "/metrics", method: str = "GET") -> tuple[int, str, str]:
    """One request to the server: status, Content-Type and body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read().decode()
    finally:
        connection.close()


def stop_server(process: subprocess.Popen[bytes]) -> str:
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    return err.decode()


def test_a_scraper_that_resets_its_connection_leaves_no_traceback(dsn: str) -> None:
    with serving(dsn) as (process, port, said):
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", port)) as scraper:
                scraper.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                scraper.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        time.sleep(1.0)  # the server writes its answers to the reset connections
        assert get(port)[0] == 200
        err = said + stop_server(process)
    assert "Traceback" not in err, err
    assert err.count("\n") == 1, err


def test_metrics_serve_reads_the_store_afresh_for_each_scrape(dsn: str) -> None:
    with alkstore.open(dsn) as store:
        store.queue("q").enqueue(1)
    with serving(dsn) as (process, port, said):
        status, content_type, text = get(port)
        assert (status, content_type) == (200, "text/plain; version=0.0.4; charset=utf-8")
        assert_well_formed(text)
        assert queue_jobs(samples(text), "q")["ready"] == 1
        with alkstore.open(dsn) as store:
            store.queue("q").enqueue(2)
        assert queue_jobs(samples(get(port)[2]), "q")["ready"] == 2
        assert get(port, "/metrics?format=text")[0] == 200
        assert get(port, "/metrics", "HEAD")[:2] == (200, content_type)
        status, _, body = get(port, "/")
        assert (status, body) == (404, "not found: try /metrics\n")
        assert get(port, "/metrics/extra")[0] == 404
        err = said + stop_server(process)
    assert err.count("\n") == 1, err  # the one line saying where it serves; no access log


@contextlib.contextmanager
def tables_away(dsn: str, server_dsn: str) -> Iterator[None]:
    """The store's tables out of reach for a while, behind the store's back: a table
    renamed away (SQLite) or the schema (PostgreSQL), so every read fails, then back."""
    if dsn.startswith("postgresql"):
        (schema,) = parse_qs(urlsplit(dsn).query)["schema"]
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f'ALTER SCHEMA "{schema}" RENAME TO "{schema}_away"')
            try:
                yield
            finally:
                admin.execute(f'ALTER SCHEMA "{schema}_away" RENAME TO "{schema}"')
        return
    file = sqlite3.connect(dsn, isolation_level=None)
    try:
        file.execute("ALTER TABLE __alkstore_jobs RENAME TO away")
        try:
            yield
        finally:
            file.execute("ALTER TABLE away RENAME TO __alkstore_jobs")
    finally:
        file.close()


def test_metrics_serve_answers_503_while_the_database_fails_and_serves_on(
    dsn: str, request: pytest.FixtureRequest
) -> None:
    server_dsn = request.getfixturevalue("server_dsn") if dsn.startswith("postgresql") else ""
    with alkstore.open(dsn) as store:
        store.queue("q").enqueue(1)
    with serving(dsn) as (process, port, said):
        assert get(port)[0] == 200
        with tables_away(dsn, server_dsn):
            status, content_type, body = get(port)
            assert (status, content_type) == (503, "text/plain; charset=utf-8")
            assert body.startswith("cannot read the store: "), body
            assert body.count("\n") == 1, body
            assert get(port)[0] == 503
        status, _, text = get(port)
        assert status == 200
        assert queue_jobs(samples(text), "q")["ready"] == 1
        err = said + stop_server(process)
    # One warning for the failing spell, however many scrapes failed; no traceback.
    assert "alkstore: metrics: cannot read the store: " in err
    assert err.count("cannot read the store") == 1, err
    assert "Traceback" not in err


def test_metrics_serve_starts_while_the_database_is_down_and_never_shows_its_password() -> None:
    password = "metrics-pa55word-never-shown"
    dsn = f"postgresql://nobody:{password}@127.0.0.1:1/x?connect_timeout_s=1"
    with serving(dsn) as (process, port, said):
        status, _, body = get(port)
        assert status == 503
        assert body.startswith("cannot read the store: "), body
        assert password not in body
        assert get(port, "/")[0] == 404  # still serving
        err = said + stop_server(process)
    assert password not in err
    assert "serving metrics of postgresql://nobody:***@127.0.0.1:1/x" in err
    assert "alkstore: metrics: cannot read the store: " in err
    printed = run("metrics", "--dsn", dsn)
    assert printed.returncode == 1
    assert password not in printed.stdout + printed.stderr
