"""The dashboard's pages at 1,000,000 jobs and 1,000,000 events: render times and plans.

    python bench/web_pages.py [--engine sqlite|postgres|all] [--jobs N] [--events N]
                              [--times N] [--json PATH]

For each engine a fresh store gets the fill of ``metrics_scale.py`` (one
queue ``big`` of ``--jobs`` jobs in every state, 1% as many dead letters,
written by the database in one statement each; a small queue, a schedule)
and a stream of ``--events`` events published through the API in one
transaction (untimed). Then each page of ``alkstore_web_app(store)`` is
requested through Starlette's TestClient, the median of ``--times`` taken,
and set against the 200 ms target. The overview's reads are timed on their
own too, and a new dashboard's first view: what it shows (it waits 150 ms
for its read, then says one is under way) and when its tables arrive. Once
reads take longer than the dashboard's budget, later views render from the
read the dashboard shares between viewers and refreshes in the background.
Each page's statements are caught as the driver runs them and their plans
printed, every full table scan marked.
The JSON goes to ``bench/results/web_pages.json`` unless ``--json`` says
elsewhere.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import metrics_scale
from starlette.testclient import TestClient

import alkstore
from alkstore.web import alkstore_web_app

HERE = Path(__file__).resolve().parent
DEFAULT_JSON = HERE / "results" / "web_pages.json"
TARGET_S = 0.200


def _pages(store: alkstore.Store, jobs: int) -> dict[str, str]:
    """Each page to time, by name: its URL on this store."""
    first = store.inspect().jobs("big", limit=1)[0].id
    dead = store.inspect().jobs("big", "dead", limit=1)[0].id
    middle = first + jobs // 2
    return {
        "overview": "/",
        "overview, live refresh": "/live",
        "queues to pick": "/jobs",
        "jobs, first page": "/jobs?queue=big",
        "jobs, page deep in the table": f"/jobs?queue=big&after={middle}",
        "jobs, pending": "/jobs?queue=big&state=pending",
        "jobs, processing": "/jobs?queue=big&state=processing",
        "jobs, dead": "/jobs?queue=big&state=dead",
        "jobs, dead, next page": f"/jobs?queue=big&state=dead&after={dead + 50}",
        "one job": f"/job?queue=big&id={middle}",
        "one dead job": f"/job?queue=big&id={dead}",
    }


TABLES = 'data-queue="big"'
"""In an overview page once it shows a read (not "a read is under way")."""
OVERVIEWS = ("/", "/live")


def _time(client: TestClient, url: str, times: int) -> list[float]:
    taken = []
    for _ in range(times):
        started = time.perf_counter()
        response = client.get(url)
        taken.append(time.perf_counter() - started)
        if response.status_code != 200:
            raise RuntimeError(f"{url}: {response.status_code}\n{response.text[:500]}")
        if url in OVERVIEWS and TABLES not in response.text:
            raise RuntimeError(f"{url} was timed before it showed a read")
    return taken


def _first_view(client: TestClient) -> dict[str, dict[str, Any]]:
    """A new dashboard's first view, and how long until its tables arrive.

    The view waits for its read only so long; past that it says a read is
    under way and the tables come live (here: ``/live`` asked again)."""
    started = time.perf_counter()
    page = client.get("/")
    shown = time.perf_counter() - started
    what = "the tables" if TABLES in page.text else "a read is under way"
    while TABLES not in page.text:
        if time.perf_counter() - started > 600:
            raise RuntimeError("the first read did not end in 10 minutes")
        time.sleep(0.01)
        page = client.get("/live")
    tables = time.perf_counter() - started
    return {
        f"overview, a new dashboard's first view (shows {what})": _once("/", shown),
        "overview, a new dashboard's first tables (live)": _once("/live", tables),
    }


def _once(url: str, seconds: float) -> dict[str, Any]:
    return {"url": url, "median_s": round(seconds, 4), "runs_s": [round(seconds, 4)]}


def _plans(engine: str, dsn: str, url: str) -> dict[str, list[str]]:
    """The reads one request of ``url`` runs, and each one's plan."""
    with (
        metrics_scale.statements_run(engine) as caught,
        alkstore.open(dsn) as store,
        TestClient(alkstore_web_app(store)) as client,
    ):
        client.get(url)
        if url in OVERVIEWS or url == "/jobs":  # the read may outlast the page
            _first_view(client)
    plans = {}
    for number, (text, params) in enumerate(metrics_scale.reads(caught)):
        plans[f"{number + 1}"] = (
            metrics_scale.plan_sqlite(dsn, text)
            if engine == "sqlite"
            else metrics_scale.plan_postgres(dsn, text, params)
        )
    return plans


def measure(engine: str, jobs: int, events: int, times: int) -> dict[str, Any]:
    metrics_scale.EVENTS = events  # the fill's stream: published through the API
    with metrics_scale.fresh_store(engine) as dsn:
        started = time.perf_counter()
        fill = metrics_scale.fill_sqlite if engine == "sqlite" else metrics_scale.fill_postgres
        fill(dsn, jobs)
        filled_s = time.perf_counter() - started
        pages: dict[str, Any] = {}
        with alkstore.open(dsn) as store:
            urls = _pages(store, jobs)
            reads = {
                "inspect().queues()": store.inspect().queues,
                "inspect().streams()": store.inspect().streams,
            }
            parts = {}
            for name, read in reads.items():
                taken = []
                for _ in range(times):
                    begun = time.perf_counter()
                    read()
                    taken.append(time.perf_counter() - begun)
                parts[name] = round(statistics.median(taken), 4)
            with TestClient(alkstore_web_app(store)) as client:
                # Once a read is slower than the budget, views after the first
                # render from the one the dashboard shares and refreshes.
                pages.update(_first_view(client))
                for name, url in urls.items():
                    client.get(url)  # warm: the first render compiles the template
                    taken = _time(client, url, times)
                    pages[name] = {"url": url, "median_s": round(statistics.median(taken), 4),
                                   "runs_s": [round(t, 4) for t in taken]}  # fmt: skip
        for page in pages.values():
            plans = _plans(engine, dsn, page["url"])
            page["full_scans"] = metrics_scale.full_scans(plans)
            page["plans"] = plans
    return {"engine": engine, "jobs": jobs, "events": events, "fill_s": round(filled_s, 1),
            "reads_s": parts, "pages": pages}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("sqlite", "postgres", "all"), default="all")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--times", type=int, default=7)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    arguments = parser.parse_args()
    engines = ["sqlite", "postgres"] if arguments.engine == "all" else [arguments.engine]
    results = []
    for engine in engines:
        print(f"{engine}: filling {arguments.jobs:,} jobs and {arguments.events:,} events…",
              file=sys.stderr, flush=True)  # fmt: skip
        result = measure(engine, arguments.jobs, arguments.events, arguments.times)
        results.append(result)
        print(f"\n## {engine}: {arguments.jobs:,} jobs, {arguments.events:,} events "
              f"(filled in {result['fill_s']} s)\n")  # fmt: skip
        for name, taken in result["reads_s"].items():
            print(f"- {name}: {taken * 1000:.1f} ms (median of {arguments.times})")
        print(f"\n| page | median of {arguments.times} | under 200 ms | full table scans |")
        print("|---|---|---|---|")
        for name, page in result["pages"].items():
            ok = "yes" if page["median_s"] < TARGET_S else "**no**"
            scans = "; ".join(page["full_scans"]) or "none"
            print(
                f"| {name} (`{page['url']}`) | {page['median_s'] * 1000:.1f} ms | {ok} | {scans} |"
            )
        for name, page in result["pages"].items():
            for number, lines in page["plans"].items():
                print(f"\n{name}, read {number}:\n```")
                print("\n".join(lines))
                print("```")
    arguments.json.parent.mkdir(parents=True, exist_ok=True)
    arguments.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
