"""Keyset pages of jobs on an engine written before them (contract 1.5)."""

from __future__ import annotations

from pathlib import Path

import pytest

import alkstore
from alkstore import JobInfo, JobState
from alkstore.engine import Inspector
from alkstore_sqlite._inspect import SQLiteInspector


class _Before16(SQLiteInspector):
    """SQLite's inspector as an engine written for contract 1.5 has it: no ``_jobs_after``."""

    _jobs_after = Inspector._jobs_after

    def _jobs(self, queue: str, state: JobState | None, limit: int) -> list[JobInfo]:
        return SQLiteInspector._jobs_after(self, queue, state, limit, 0)  # its first pages


def test_an_engine_without_keyset_pages_lists_first_pages_and_refuses_after(
    tmp_path: Path,
) -> None:
    with alkstore.open(str(tmp_path / "old.db")) as store:
        ids = [store.queue("q").enqueue(n) for n in range(3)]
        inspector = _Before16(store)
        assert [job.id for job in inspector.jobs("q", limit=2)] == ids[:2]
        with pytest.raises(NotImplementedError, match=r"jobs\(after=\.\.\.\).*contract 1\.6"):
            inspector.jobs("q", after=ids[0])
