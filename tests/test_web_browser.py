"""The dashboard as an operator uses it: a real headless Chromium, a live server.

On each engine, ``alkstore web --allow-actions`` runs as a real subprocess on
a free port; the browser opens the overview and watches a queue's counts
change (without a reload) while another process enqueues; it opens a dead
job, requeues it through the confirmation, and sees a worker (``alkstore
worker``, another real subprocess) handle it.

The browser is Debian's ``chromium`` (``$ALKSTORE_CHROMIUM`` to name another),
driven by Playwright; Playwright's own browser download is not used. Without
it these tests fail under CI (``$CI`` set) and skip elsewhere. Each page's
screenshot is taken; with ``$ALKSTORE_WEB_SCREENSHOTS`` set to a folder
(``docs/images``), the SQLite run's are saved there.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

import alkstore
from alkstore import EnqueueOpts, QueueOpts

START_TIMEOUT_S = 30.0
STEP_TIMEOUT_MS = 15_000
# Every step and assertion waits this long: a loaded CI machine starts a worker
# process, and the overview rereads what wakes nothing (acks) every 2 s.
expect.set_options(timeout=STEP_TIMEOUT_MS)
TOKEN = "tok-3fa9-operators-only"
CHROMIUM = os.environ.get("ALKSTORE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
HANDLER = """
import os

def handle(job):
    with open(os.environ["HANDLED_LOG"], "a") as log:
        log.write(f"{job.id}\\n")
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).is_file():
        message = (
            f"no Chromium at {CHROMIUM}: the browser tests need Debian's chromium "
            "(apt-get install chromium) or $ALKSTORE_CHROMIUM"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Process:
    """A subprocess of the CLI, its output in a file, stopped by SIGTERM."""

    def __init__(self, arguments: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        with log.open("wb") as out:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "alkstore._cli", *arguments],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
            )  # fmt: skip

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


@contextlib.contextmanager
def web(dsn: str, log: Path, *options: str) -> Iterator[str]:
    """``alkstore web`` with ``options`` on a free port until it answers; its base URL."""
    port = free_port()
    process = Process(["web", "--dsn", dsn, "--port", str(port), *options], log)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{base}/static/style.css", timeout=5) as response:
                    assert response.status == 200
                    break
            except (urllib.error.URLError, ConnectionError):
                if process.popen.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"alkstore web did not start:\n{process.output()}")
                time.sleep(0.1)
        yield base
    finally:
        process.stop()
    assert "Traceback" not in process.output(), process.output()


@pytest.fixture
def server(dsn: str, tmp_path: Path) -> Iterator[str]:
    """``alkstore web --allow-actions`` on a free port; its base URL."""
    alkstore.open(dsn).close()  # the command only looks: it refuses a file not there
    with web(dsn, tmp_path / "web.log", "--allow-actions") as base:
        yield base


def cli(dsn: str, *arguments: str) -> None:
    """One CLI command as its own process (another writer than the dashboard)."""
    done = subprocess.run(
        [sys.executable, "-m", "alkstore._cli", "--dsn", dsn, *arguments],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def screenshot(page: Page, name: str, tmp_path: Path, dsn: str) -> None:
    shot = tmp_path / f"dashboard-{name}.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    keep = os.environ.get("ALKSTORE_WEB_SCREENSHOTS")
    if keep and not dsn.startswith("postgresql"):
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, Path(keep) / shot.name)


def test_an_operator_watches_a_queue_requeues_a_dead_job_and_a_worker_handles_it(
    browser: Browser, server: str, dsn: str, tmp_path: Path
) -> None:
    with alkstore.open(dsn) as store:
        work = store.queue("work", QueueOpts(max_attempts=1))
        dead = work.enqueue({"order": 1042, "note": "<script>alert('x')</script>"})
        job = work.claim_one("host-a:4242")
        assert job is not None
        assert job.fail("SMTP 550: mailbox unavailable")
        store.queue("mail").enqueue("later", EnqueueOpts(delay=3600))
        events = store.stream("orders")
        for n in range(12):
            events.publish({"n": n})
        assert events.save_offset("billing", 9)
        store.schedule("nightly-digest", "0 3 * * *", "mail", {"kind": "digest"})
        lock = store.try_lock("report-writer", "host-b:77", 300)
        assert lock is not None

        context = browser.new_context(viewport={"width": 1200, "height": 800})
        page = context.new_page()
        page.set_default_timeout(STEP_TIMEOUT_MS)
        try:
            page.goto(f"{server}/")
            row = page.locator('tr[data-queue="work"]')
            expect(row.locator("td.dead")).to_have_text("1")
            expect(row.locator("td.ready")).to_have_text("0")
            page.evaluate("window.stillTheSamePage = true")

            cli(dsn, "enqueue", "work", '{"order": 1043}')
            cli(dsn, "enqueue", "work", '{"order": 1044}')
            expect(row.locator("td.ready")).to_have_text("2")
            assert page.evaluate("window.stillTheSamePage") is True  # updated live, no reload
            # Two samples or more: reads a second apart, the next one on a wake or the period.
            expect(row.locator("svg.spark polyline")).to_have_count(1)
            screenshot(page, "overview", tmp_path, dsn)

            page.locator("nav a", has_text="Jobs").click()
            expect(page.locator("ul.queues li")).to_have_count(2)  # mail and work
            expect(page.locator("ul.queues li", has_text="work")).to_contain_text("1 dead")
            screenshot(page, "queues", tmp_path, dsn)
            page.go_back()

            row.locator("td.dead a").click()
            expect(page.locator("h1")).to_have_text("Jobs of work")
            expect(page.locator("#jobs tbody tr")).to_have_count(1)
            screenshot(page, "jobs", tmp_path, dsn)

            page.locator(f'#jobs a:text-is("{dead}")').click()
            expect(page.locator("#payload")).to_contain_text("<script>alert('x')</script>")
            expect(page.locator("pre.error")).to_have_text("SMTP 550: mailbox unavailable")
            screenshot(page, "job", tmp_path, dsn)

            page.locator("#requeue").click()
            expect(page.locator(".question")).to_contain_text(f"Requeue dead job {dead}")
            screenshot(page, "confirm", tmp_path, dsn)
            assert work.get_job(dead).state == "dead"  # type: ignore[union-attr]
            page.locator("#confirm").click()
            expect(page.locator("#outcome")).to_have_text(f"Requeued job {dead}.")
            screenshot(page, "done", tmp_path, dsn)
            assert work.get_job(dead).state == "pending"  # type: ignore[union-attr]

            handled = tmp_path / "handled.log"
            (tmp_path / "dashboard_handler.py").write_text(HANDLER)
            worker = Process(
                ["--dsn", dsn, "worker", "work", "dashboard_handler:handle"],
                tmp_path / "worker.log",
                env={"PYTHONPATH": str(tmp_path), "HANDLED_LOG": str(handled)},
            )
            try:
                page.goto(f"{server}/")
                expect(page.locator('tr[data-queue="work"]')).to_have_count(0)
            finally:
                worker.stop()
            assert str(dead) in handled.read_text().split(), worker.output()
            page.goto(f"{server}/job?queue=work&id={dead}")
            expect(page.locator("h1")).to_have_text("No such job")
        finally:
            context.close()
            lock.release()


def test_with_a_token_an_operator_logs_in_before_seeing_anything(
    browser: Browser, dsn: str, tmp_path: Path
) -> None:
    with alkstore.open(dsn) as store:
        store.queue("secret-queue").enqueue("p")
    with web(dsn, tmp_path / "web.log", "--token", TOKEN) as base:
        context = browser.new_context(viewport={"width": 900, "height": 500})
        page = context.new_page()
        page.set_default_timeout(STEP_TIMEOUT_MS)
        try:
            response = page.goto(f"{base}/")
            assert response is not None
            assert response.status == 401
            expect(page.locator("main.login")).to_be_visible()
            assert "secret-queue" not in page.content()
            screenshot(page, "login", tmp_path, dsn)

            page.locator('input[name="token"]').fill("not-the-token")
            page.locator('button[type="submit"]').click()
            expect(page.locator("p.detail")).to_have_text("That is not the token.")

            page.locator('input[name="token"]').fill(TOKEN)
            page.locator('button[type="submit"]').click()
            expect(page.locator('tr[data-queue="secret-queue"] td.ready')).to_have_text("1")
            cookies = context.cookies()
            assert all(TOKEN not in cookie["value"] for cookie in cookies)
        finally:
            context.close()


def test_an_action_reaches_exactly_the_queue_confirmed_and_long_names_wrap(
    browser: Browser, server: str, dsn: str
) -> None:
    """Names only a line break tells apart: the browser's form posts the one
    confirmed (a form field would have turned ``billing\\r`` into ``billing\\r\\n``).
    A 12,000-character name wraps in its cell instead of widening the page."""
    lookalikes = ("billing\r", "billing\r\n", "billing")
    with alkstore.open(dsn) as store:
        for queue in lookalikes:
            doomed = store.queue(queue, QueueOpts(max_attempts=1))
            doomed.enqueue("p")
            job = doomed.claim_one("w")
            assert job is not None
            assert job.fail("boom")
        store.queue("x" * 12_000).enqueue("p")

        context = browser.new_context(viewport={"width": 1200, "height": 800})
        page = context.new_page()
        page.set_default_timeout(STEP_TIMEOUT_MS)
        try:
            page.goto(f"{server}/")
            expect(page.locator("tr[data-queue]")).to_have_count(4)
            assert page.evaluate("document.documentElement.scrollWidth") <= 1200

            query = urllib.parse.urlencode({"action": "purge", "queue": "billing\r"})
            page.goto(f"{server}/confirm?{query}")
            page.locator("#confirm").click()
            expect(page.locator("#outcome")).to_have_text("Purged 1 dead jobs.")
        finally:
            context.close()
        left = {queue: len(store.inspect().jobs(queue, "dead")) for queue in lookalikes}
    assert left == {"billing\r": 0, "billing\r\n": 1, "billing": 1}
