"""Turning driver errors into the contract's ``Database`` error."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import psycopg_pool

from alkstore import Database

__all__ = ["translate"]


@contextmanager
def translate(action: str) -> Iterator[None]:
    """Re-raise psycopg errors met while doing ``action`` as ``Database``, cause chained."""
    try:
        yield
    except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Database(f"{action} failed: {message}") from exc
