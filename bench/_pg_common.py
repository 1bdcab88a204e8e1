"""What the PostgreSQL subjects share beyond ``_measured``: a settle time, a query.

Private to ``postgres_subjects`` and ``_pg_peers``; ``PEER_SETTLE_S`` also serves
alkstore's own Worker in the ``async_enqueue_claim`` rows (``alkstore_async``).
"""

from __future__ import annotations

import contextlib

import psycopg

__all__ = ["PEER_SETTLE_S", "scalar"]

PEER_SETTLE_S = 0.025
"""How long the parent waits after a peer library's handler said "armed" before
the next sample. Its handler runs *before* the library settles the job and
parks again (pgqueuer: status log buffer, re-dequeue, eligibility probes;
procrastinate: finish_job, re-fetch), so "armed" comes early; alkstore and the
raw floor say "armed" right before they block and get the harness's 2 ms."""


def scalar(url: str, sql: str) -> object:
    """The one value ``sql`` selects in the database at ``url``."""
    with contextlib.closing(psycopg.connect(url, autocommit=True)) as connection:
        row = connection.execute(sql.encode()).fetchone()
    return None if row is None else row[0]
