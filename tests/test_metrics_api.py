"""``alkstore.prometheus_text`` and its async twin, on each engine."""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
from pathlib import Path

import alkstore


def test_prometheus_text_reads_the_store_through_either_api(dsn: str) -> None:
    with alkstore.open(dsn) as store:
        store.queue("emails").enqueue({"to": "ada"})
        text = alkstore.prometheus_text(store, queues=["reports"])
    assert 'alkstore_queue_jobs{queue="emails",state="ready"} 1\n' in text
    assert 'alkstore_queue_jobs{queue="reports",state="ready"} 0\n' in text

    async def read() -> str:
        async with alkstore.open_async(dsn) as store:
            return await alkstore.prometheus_text_async(store)

    async_text = asyncio.run(read())
    assert 'alkstore_queue_jobs{queue="emails",state="ready"} 1\n' in async_text
    assert "reports" not in async_text
    assert alkstore.PROMETHEUS_CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


def test_the_metrics_guides_python_example_runs_unchanged(dsn: str) -> None:
    guide = (Path(__file__).parents[1] / "docs" / "metrics.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"```python\n(.*?)```", guide, re.S)
    assert '"metrics-example.db"' in code, "the example's target is what the test swaps"
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(code.replace('"metrics-example.db"', repr(dsn)), {})  # the guide's own code
    assert "# TYPE alkstore_queue_jobs gauge\n" in output.getvalue()
