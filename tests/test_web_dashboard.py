"""The dashboard over HTTP on each engine: pages, keyset pages, actions, security.

Each test runs the real app (``alkstore_web_app``) through Starlette's
TestClient against a real store: a fresh SQLite file or a fresh PostgreSQL
schema (the ``dsn`` fixture). The browser tests are in test_web_browser.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import itertools
import re
import subprocess
import sys
import time
import urllib.parse
import warnings
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from typing import Any

import psycopg
import pytest
from starlette.applications import Starlette

import alkstore
from alkstore import EnqueueOpts, QueueOpts
from alkstore.web import alkstore_web_app

with warnings.catch_warnings():
    # Python 3.10 gets a Starlette whose TestClient runs on httpx, and warns that httpx2
    # (Python 3.11+) is preferred: either serves these tests.
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

httpx: Any = importlib.import_module("httpx2" if sys.version_info >= (3, 11) else "httpx")

ORIGIN = "http://testserver"
PASSWORD = "pw-Zq81-never-shown"
_PRIORITIES = itertools.count(1000)


@pytest.fixture
def store(dsn: str) -> Iterator[alkstore.Store]:
    with alkstore.open(dsn) as opened:
        yield opened


@contextlib.contextmanager
def client(store: alkstore.Store, **options: Any) -> Iterator[TestClient]:
    """The dashboard of ``store``, its first read ended: on a loaded machine a
    new dashboard's first page may say a read is under way (tested below)."""
    with TestClient(alkstore_web_app(store, **options), follow_redirects=False) as http:
        deadline = time.monotonic() + 30
        while "Reading the store" in http.get("/live").text and time.monotonic() < deadline:
            time.sleep(0.05)
        yield http


def dead_job(store: alkstore.Store, queue: str = "mail", payload: object = "p") -> int:
    """A job of ``queue`` moved to dead by a failing attempt; its id."""
    first = EnqueueOpts(priority=next(_PRIORITIES))  # claimed before the queue's other jobs
    job_id = store.queue(queue, QueueOpts(max_attempts=1)).enqueue(payload, first)
    job = store.queue(queue).claim_one("test-worker")
    assert job is not None
    assert job.id == job_id
    assert job.fail("boom: <b>bad</b>")
    return job_id


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, html
    return found[1]


def cells(html: str, queue: str) -> dict[str, str]:
    """The overview's counts for ``queue``, by column class."""
    row = re.search(rf'<tr data-queue="{re.escape(queue)}">(.*?)</tr>', html, re.S)
    assert row, html
    return dict(re.findall(r'<td class="n (\w+)">(?:<a [^>]*>)?(\d+)', row[1]))


# Pages


def test_the_overview_shows_queues_streams_locks_and_schedules(store: alkstore.Store) -> None:
    dead_job(store)
    mail = store.queue("mail")
    mail.enqueue(1)
    mail.enqueue(2, EnqueueOpts(delay=600))
    mail.enqueue(3)
    assert mail.claim_one("w1") is not None
    events = store.stream("orders")
    for n in range(5):
        events.publish({"n": n})
    assert events.save_offset("billing", 2)
    lock = store.try_lock("nightly-report", "host-a", 60)
    assert lock is not None
    store.schedule("digest", "@every 5m", "mail", {"kind": "digest"})
    with client(store) as http:
        page = http.get("/")
    assert page.status_code == 200
    assert cells(page.text, "mail") == {
        "ready": "1", "scheduled": "1", "expired": "0", "processing": "1", "dead": "1"
    }  # fmt: skip
    assert re.search(r"<td><bdi>orders</bdi></td><td class=\"n\">5</td>", page.text)
    assert "<bdi>billing</bdi> <small>2 · lag 3</small>" in page.text
    assert "nightly-report" in page.text
    assert "host-a" in page.text
    assert "digest" in page.text
    assert "@every 5m" in page.text
    lock.release()


def test_the_live_fragment_is_the_overview_tables_without_the_page(store: alkstore.Store) -> None:
    store.queue("mail").enqueue(1)
    with client(store) as http:
        fragment = http.get("/live").text
        store.queue("mail").enqueue(2)
        # Cheap reads are the page's own; on a loaded machine a read over the
        # dashboard's budget is shared instead, and the enqueue's wake brings the next.
        deadline = time.monotonic() + 30
        again = http.get("/live").text
        while cells(again, "mail")["ready"] == "1" and time.monotonic() < deadline:
            time.sleep(0.05)
            again = http.get("/live").text
    assert "<html" not in fragment
    assert cells(fragment, "mail")["ready"] == "1"
    assert cells(again, "mail")["ready"] == "2"


def test_a_first_page_says_a_slow_read_is_under_way_and_the_read_arrives_live(
    dsn: str, store: alkstore.Store
) -> None:
    if "://" not in dsn:
        pytest.skip("a SQLite reader cannot be held up by another connection (WAL)")
    store.queue("mail").enqueue(1)
    (schema,) = urllib.parse.parse_qs(urllib.parse.urlsplit(dsn).query)["schema"]
    server = dsn.split("?", 1)[0]
    app = alkstore_web_app(store)
    with TestClient(app) as http, psycopg.connect(server) as blocker:
        blocker.execute(f'LOCK TABLE "{schema}".jobs IN ACCESS EXCLUSIVE MODE')
        started = time.monotonic()
        page = http.get("/")
        waited = time.monotonic() - started
        picker = http.get("/jobs")
        blocker.rollback()  # the read goes on: it ends now, as the dashboard's first
        deadline = time.monotonic() + 30
        live = http.get("/live")
        while 'data-queue="mail"' not in live.text and time.monotonic() < deadline:
            time.sleep(0.1)
            live = http.get("/live")
    assert page.status_code == 200
    assert "Reading the store" in page.text
    assert 'data-queue="mail"' not in page.text
    assert waited < 5, "the page waited for the read it says is under way"
    assert 'http-equiv="refresh"' in picker.text
    assert cells(live.text, "mail")["ready"] == "1"


def test_the_jobs_pages_walk_every_job_by_keyset(store: alkstore.Store) -> None:
    queue = store.queue("mail")
    ids = [queue.enqueue(n) for n in range(7)]
    seen: list[int] = []
    url: str | None = "/jobs?queue=mail&limit=3"
    pages = 0
    with client(store) as http:
        while url:
            html = http.get(url).text
            seen += [int(n) for n in re.findall(r'<tr data-id="(\d+)">', html)]
            found = re.search(r'<a id="next" href="([^"]+)"', html)
            url = found[1].replace("&amp;", "&") if found else None
            assert url is None or f"after={seen[-1]}" in url
            pages += 1
    assert seen == ids
    assert pages == 3


def test_the_jobs_page_filters_by_state(store: alkstore.Store) -> None:
    store.queue("mail").enqueue("live")
    dead = dead_job(store)
    with client(store) as http:
        html = http.get("/jobs?queue=mail&state=dead").text
    assert re.findall(r'<tr data-id="(\d+)">', html) == [str(dead)]


def test_a_job_page_shows_the_fields_and_escapes_the_payload(store: alkstore.Store) -> None:
    job_id = dead_job(store, payload={"html": "<script>alert(1)</script>", "n": [1, 2]})
    with client(store) as http:
        page = http.get(f"/job?queue=mail&id={job_id}")
    assert page.status_code == 200
    assert "<script>alert" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "boom: &lt;b&gt;bad&lt;/b&gt;" in page.text
    assert "1 of 1" in page.text  # attempts
    assert "\n  &#34;n&#34;: [\n    1," in page.text  # pretty-printed


def test_a_queue_name_holding_markup_renders_as_text(store: alkstore.Store) -> None:
    store.queue("<img src=x onerror=alert(1)>").enqueue(1)
    with client(store) as http:
        html = http.get("/").text
    assert "<img src=x" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html


def test_names_are_shown_isolated_with_what_does_not_show_escaped(store: alkstore.Store) -> None:
    """A right-to-left override cannot reorder the text after a name, and names
    that differ by an invisible character do not look alike."""
    store.queue("emails").enqueue(1)
    store.queue("emails\u200b").enqueue(1)
    events = store.stream("orders")
    events.publish(1)
    assert events.save_offset("billing\u202e", 1)
    with client(store) as http:
        html = http.get("/").text
        jobs = http.get("/jobs?" + urllib.parse.urlencode({"queue": "emails\u200b"})).text
    assert "<bdi>emails</bdi>" in html
    assert "<bdi>emails\\u200b</bdi>" in html
    assert "<bdi>billing\\u202e</bdi> <small>1 · lag 0</small>" in html
    assert "<title>Jobs of emails\\u200b · alkstore</title>" in jobs


def test_a_name_keeps_its_carriage_returns_in_the_page(store: alkstore.Store) -> None:
    """An HTML parser reads a raw CR as a line feed: a name carries it as a reference."""
    store.queue("cr\r").enqueue(1)
    with client(store) as http:
        html = http.get("/").text
    assert '<tr data-queue="cr&#13;">' in html


def test_long_names_are_listed_and_opened(store: alkstore.Store) -> None:
    long_names = ["q" * 600, "\N{GRINNING FACE}" * 1_000]
    for name in long_names:
        store.queue(name).enqueue(name[:3])
    with client(store) as http:
        for name in long_names:
            page = http.get("/jobs?" + urllib.parse.urlencode({"queue": name}))
            assert page.status_code == 200
            assert len(re.findall(r'<tr data-id="(\d+)">', page.text)) == 1


LOOKALIKES = ("billing\r", "billing\r\n", "billing\n", "billing\u2028", "billing")


def test_a_confirmed_action_acts_on_exactly_the_queue_it_named(store: alkstore.Store) -> None:
    """The confirm page's form carries what it acts on in its URL, byte for byte:
    in a form field, a browser would have posted ``billing\\r`` as ``billing\\r\\n``."""
    for queue in LOOKALIKES:
        dead_job(store, queue)
    with client(store, allow_actions=True) as http:
        query = urllib.parse.urlencode({"action": "purge", "queue": "billing\r"})
        confirm = http.get(f"/confirm?{query}").text
        assert 'name="queue"' not in confirm
        form = re.search(r'<form method="post" action="([^"]+)"', confirm)
        assert form, confirm
        done = http.post(
            unescape(form[1]), data={"csrf": csrf_of(confirm)}, headers={"origin": ORIGIN}
        )
    assert done.status_code == 200, done.text
    assert "Purged 1 dead jobs" in done.text
    left = {queue: len(store.inspect().jobs(queue, "dead")) for queue in LOOKALIKES}
    assert left == {queue: int(queue != "billing\r") for queue in LOOKALIKES}


def test_an_action_whose_url_and_form_disagree_is_refused(store: alkstore.Store) -> None:
    dead_job(store, "a")
    dead_job(store, "b")
    with client(store, allow_actions=True) as http:
        csrf = csrf_of(http.get("/confirm?action=purge&queue=a").text)
        page = http.post(
            "/act?action=purge&queue=a", data={"queue": "b", "csrf": csrf},
            headers={"origin": ORIGIN},
        )  # fmt: skip
    assert page.status_code == 400
    assert "disagree" in page.text
    assert [len(store.inspect().jobs(q, "dead")) for q in "ab"] == [1, 1]


@pytest.mark.parametrize(
    "url",
    [
        "/jobs?queue=mail&state=finished",
        "/jobs?queue=mail&after=abc",
        "/jobs?queue=mail&after=-1",
        "/jobs?queue=mail&after=99999999999999999999999",
        "/jobs?queue=mail&limit=100000",
        "/jobs?queue=mail&limit=0",
        "/job?queue=mail&id=x",
        "/job?queue=mail",
        "/job?id=1",
    ],
)
def test_bad_parameters_give_a_400_page(store: alkstore.Store, url: str) -> None:
    with client(store) as http:
        page = http.get(url)
    assert page.status_code == 400
    assert page.headers["content-type"].startswith("text/html")
    assert "Bad request" in page.text
    assert "Traceback" not in page.text


def test_an_unknown_job_is_a_404_page(store: alkstore.Store) -> None:
    with client(store) as http:
        page = http.get("/job?queue=mail&id=12345")
    assert page.status_code == 404
    assert "No such job" in page.text


def test_every_response_carries_the_security_headers(store: alkstore.Store) -> None:
    with client(store) as http:
        for url in ("/", "/jobs?queue=mail&state=bad", "/static/style.css", "/nowhere"):
            headers = http.get(url).headers
            assert "frame-ancestors 'none'" in headers["content-security-policy"], url
            assert "script-src 'self'" in headers["content-security-policy"]
            assert "unsafe-inline" not in headers["content-security-policy"]
            assert headers["x-content-type-options"] == "nosniff"


def test_the_pages_load_no_inline_script_and_nothing_from_elsewhere(store: alkstore.Store) -> None:
    store.queue("mail").enqueue(1)
    with client(store) as http:
        html = http.get("/").text
        script = http.get("/static/live.js")
    assert re.findall(r"<script[^>]*>", html) == ['<script src="/static/live.js" defer>']
    assert "http" not in "".join(re.findall(r'(?:src|href)="([^"]+)"', html))
    assert script.status_code == 200
    assert "fetch(" in script.text


# Actions


def test_actions_are_off_by_default(store: alkstore.Store) -> None:
    job_id = dead_job(store)
    with client(store) as http:
        job_page = http.get(f"/job?queue=mail&id={job_id}").text
        confirm = http.get(f"/confirm?action=requeue&queue=mail&id={job_id}")
        act = http.post(
            "/act", data={"action": "requeue", "queue": "mail", "id": str(job_id), "csrf": "x"},
            headers={"origin": ORIGIN},
        )  # fmt: skip
    assert "Requeue" not in job_page
    assert confirm.status_code == 403
    assert act.status_code == 403
    assert store.queue("mail").get_job(job_id).state == "dead"  # type: ignore[union-attr]


def test_a_dead_job_is_requeued_through_the_confirmation(store: alkstore.Store) -> None:
    job_id = dead_job(store)
    with client(store, allow_actions=True) as http:
        assert 'id="requeue"' in http.get(f"/job?queue=mail&id={job_id}").text
        confirm = http.get(f"/confirm?action=requeue&queue=mail&id={job_id}")
        assert confirm.status_code == 200
        assert store.queue("mail").get_job(job_id).state == "dead"  # type: ignore[union-attr]
        done = http.post(
            "/act",
            data={"action": "requeue", "queue": "mail", "id": str(job_id),
                  "csrf": csrf_of(confirm.text)},
            headers={"origin": ORIGIN},
        )  # fmt: skip
    assert done.status_code == 200
    assert f"Requeued job {job_id}" in done.text
    assert store.queue("mail").get_job(job_id).state == "pending"  # type: ignore[union-attr]


def test_requeue_all_cancel_and_purge(store: alkstore.Store) -> None:
    first, second = dead_job(store), dead_job(store)
    live = store.queue("mail").enqueue("live")
    with client(store, allow_actions=True) as http:
        csrf = csrf_of(http.get("/confirm?action=requeue_all&queue=mail").text)

        def act(**fields: str) -> str:
            page = http.post("/act", data={**fields, "csrf": csrf}, headers={"origin": ORIGIN})
            assert page.status_code == 200, page.text
            return str(page.text)

        assert "Requeued 2 dead jobs" in act(action="requeue_all", queue="mail")
        assert f"Cancelled job {live}" in act(action="cancel", queue="mail", id=str(live))
        assert f"Job {live} was not there" in act(action="cancel", queue="mail", id=str(live))
        third = dead_job(store)
        assert "Purged 1 dead jobs" in act(action="purge", queue="mail")
    assert store.queue("mail").get_job(third) is None
    assert [j.id for j in store.inspect().jobs("mail")] == [first, second]


@pytest.mark.parametrize(
    ("csrf", "headers"),
    [
        ("", {"origin": ORIGIN}),  # no token
        ("0" * 64, {"origin": ORIGIN}),  # a forged token
        (None, {"origin": "http://evil.example"}),  # the right token from another site
        (None, {"referer": "http://evil.example/page"}),
        (None, {}),  # neither Origin nor Referer
    ],
)
def test_a_cross_site_or_tokenless_post_is_refused(
    store: alkstore.Store, csrf: str | None, headers: dict[str, str]
) -> None:
    job_id = dead_job(store)
    with client(store, allow_actions=True) as http:
        right = csrf_of(http.get(f"/confirm?action=requeue&queue=mail&id={job_id}").text)
        fields = {"action": "requeue", "queue": "mail", "id": str(job_id)}
        refused = http.post("/act", data={**fields, "csrf": right if csrf is None else csrf},
                            headers=headers)  # fmt: skip
        assert http.get("/act").status_code == 405
    assert refused.status_code == 403
    assert store.queue("mail").get_job(job_id).state == "dead"  # type: ignore[union-attr]


def test_a_session_cookie_from_elsewhere_does_not_carry_the_csrf_token(
    store: alkstore.Store,
) -> None:
    job_id = dead_job(store)
    app = alkstore_web_app(store, allow_actions=True)
    with TestClient(app) as mine, TestClient(app) as theirs:
        csrf = csrf_of(mine.get(f"/confirm?action=requeue&queue=mail&id={job_id}").text)
        theirs.get("/")  # a session of its own
        refused = theirs.post(
            "/act", data={"action": "requeue", "queue": "mail", "id": str(job_id), "csrf": csrf},
            headers={"origin": ORIGIN},
        )  # fmt: skip
    assert refused.status_code == 403


# Token


def test_a_token_guards_every_page(store: alkstore.Store) -> None:
    with client(store, token="s3cret", allow_actions=True) as http:
        for url in ("/", "/live", "/jobs", "/jobs?queue=mail", "/job?queue=mail&id=1"):
            page = http.get(url)
            assert page.status_code == 401, url
            assert 'name="token"' in page.text, url
        assert http.post("/act", data={"action": "purge", "queue": "m"}).status_code == 401
        assert http.get("/", headers={"authorization": "Bearer wrong"}).status_code == 401
        assert http.get("/", headers={"authorization": "Bearer s3cret"}).status_code == 200


def test_the_login_form_sets_a_strict_httponly_cookie_that_is_not_the_token(
    store: alkstore.Store,
) -> None:
    with client(store, token="s3cret") as http:
        wrong = http.post("/login", data={"token": "nope"}, headers={"origin": ORIGIN})
        assert wrong.status_code == 401
        assert "not the token" in wrong.text
        assert http.post("/login", data={"token": "s3cret"}).status_code == 401  # no Origin
        right = http.post("/login", data={"token": "s3cret"}, headers={"origin": ORIGIN})
        assert right.status_code == 303
        cookie = right.headers["set-cookie"]
        assert "alkstore_auth=" in cookie
        assert "HttpOnly" in cookie
        assert "samesite=strict" in cookie.lower()
        assert "s3cret" not in cookie
        assert http.get("/").status_code == 200


def test_a_store_password_appears_in_no_page(dsn: str) -> None:
    if not dsn.startswith("postgresql"):
        pytest.skip("a SQLite target has no password")
    parts = urllib.parse.urlsplit(dsn)
    user, _, host = parts.netloc.rpartition("@")
    netloc = f"{user.partition(':')[0] or 'postgres'}:{PASSWORD}@{host}"
    with alkstore.open(urllib.parse.urlunsplit(parts._replace(netloc=netloc))) as store:
        job_id = dead_job(store)
        with client(store, allow_actions=True) as http:
            for url in (
                "/",
                "/live",
                "/jobs",
                "/jobs?queue=mail",
                f"/job?queue=mail&id={job_id}",
                f"/confirm?action=requeue&queue=mail&id={job_id}",
                "/jobs?state=x&queue=m",
            ):
                page = http.get(url)
                assert PASSWORD not in page.text, url
                assert PASSWORD not in str(page.headers), url
            assert "127.0.0.1" in http.get("/").text  # the redacted target is shown


# Mounting, the async API, the backlog


def test_it_mounts_inside_another_starlette_app(store: alkstore.Store) -> None:
    job_id = dead_job(store)
    outer = Starlette()
    outer.mount("/alkstore", alkstore_web_app(store, allow_actions=True))
    with TestClient(outer) as http:
        overview = http.get("/alkstore/")
        html = overview.text
        assert "Path=/alkstore;" in overview.headers["set-cookie"]
        assert 'href="/alkstore/static/style.css"' in html
        assert 'href="/alkstore/jobs?queue=mail"' in html
        assert http.get("/alkstore/static/style.css").status_code == 200
        confirm = http.get(f"/alkstore/confirm?action=requeue&queue=mail&id={job_id}")
        action = f"/alkstore/act?action=requeue&amp;queue=mail&amp;id={job_id}"
        assert f'action="{action}"' in confirm.text
        done = http.post(
            unescape(action), data={"csrf": csrf_of(confirm.text)}, headers={"origin": ORIGIN}
        )
    assert done.status_code == 200
    assert store.queue("mail").get_job(job_id).state == "pending"  # type: ignore[union-attr]


def test_it_serves_an_async_store_natively(dsn: str) -> None:
    async def scenario() -> None:
        async with alkstore.open_async(dsn) as store:
            queue = store.queue("mail", QueueOpts(max_attempts=1))
            job_id = await queue.enqueue({"a": "<b>"})
            job = await queue.claim_one("w")
            assert job is not None
            assert await job.fail("boom")
            transport = httpx.ASGITransport(app=alkstore_web_app(store, allow_actions=True))
            async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as http:
                deadline = time.monotonic() + 30
                while "Reading the store" in (await http.get("/live")).text:  # the first read
                    assert time.monotonic() < deadline, "the first read never ended"
                    await asyncio.sleep(0.05)
                overview = await http.get("/")
                assert cells(overview.text, "mail")["dead"] == "1"
                job_page = await http.get(f"/job?queue=mail&id={job_id}")
                assert "&lt;b&gt;" in job_page.text
                confirm = await http.get(f"/confirm?action=requeue&queue=mail&id={job_id}")
                done = await http.post(
                    "/act",
                    data={"action": "requeue", "queue": "mail", "id": str(job_id),
                          "csrf": csrf_of(confirm.text)},
                    headers={"origin": ORIGIN},
                )  # fmt: skip
                assert done.status_code == 200, done.text
            assert (await queue.get_job(job_id)).state == "pending"  # type: ignore[union-attr]

    asyncio.run(scenario())


# The command


def test_alkstore_web_without_the_extra_says_what_to_install(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "sys.modules['jinja2'] = None  # as if the web extra were not installed\n"
        "from alkstore._cli import main\n"
        f"sys.exit(main(['web', '--dsn', {str(tmp_path / 'a.db')!r}]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert "pip install 'alkstore-core[web]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_alkstore_web_refuses_a_port_out_of_range(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "alkstore._cli", "web", "--dsn", str(tmp_path / "a.db"),
         "--port", "70000"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--port must be from 1 to 65535" in done.stderr
