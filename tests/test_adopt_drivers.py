"""adopt_tx with the asyncio drivers themselves, and what the sync API refuses."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiosqlite
import pytest

import alkstore


def test_an_aiosqlite_connection_is_written_through_on_its_own_thread(tmp_path: Path) -> None:
    path = str(tmp_path / "app.db")

    async def scenario() -> list[object]:
        async with alkstore.open_async(path) as store, aiosqlite.connect(path) as connection:
            tx = await store.adopt_tx(connection)
            await tx.enqueue_tx("emails", None, "outer")
            await connection.execute("SAVEPOINT inner")
            await tx.enqueue_tx("emails", None, "inner")
            await connection.execute("ROLLBACK TO SAVEPOINT inner")
            await connection.commit()
            with pytest.raises(alkstore.Closed):
                await tx.enqueue_tx("emails", None, "after the caller's commit")
            jobs = await store.queue("emails").claim_batch("w", 10)
            return [job.payload for job in jobs]

    assert asyncio.run(scenario()) == ["outer"]


def test_the_sync_api_points_an_asyncio_connection_to_the_async_one(tmp_path: Path) -> None:
    path = str(tmp_path / "app.db")

    async def scenario() -> None:
        async with aiosqlite.connect(path) as connection:
            with alkstore.open(path) as store, pytest.raises(TypeError, match="AsyncStore"):
                store.adopt_tx(connection)

    asyncio.run(scenario())


def test_what_is_not_accepted_is_told_what_is(tmp_path: Path) -> None:
    with (
        alkstore.open(str(tmp_path / "app.db")) as store,
        pytest.raises(TypeError, match="SQLAlchemy Connection or Session"),
    ):
        store.adopt_tx("app.db")


def test_a_sync_sqlalchemy_session_serves_the_async_api_with_its_savepoints(
    tmp_path: Path,
) -> None:
    import sqlalchemy
    from sqlalchemy.orm import Session

    path = str(tmp_path / "app.db")
    engine = sqlalchemy.create_engine(f"sqlite:///{path}")

    async def scenario() -> list[object]:
        async with alkstore.open_async(path) as store:
            with Session(engine) as session:
                tx = await store.adopt_tx(session)
                await tx.enqueue_tx("emails", None, "outer")
                nested = session.begin_nested()
                await tx.enqueue_tx("emails", None, "inner")
                nested.rollback()
                session.commit()
            jobs = await store.queue("emails").claim_batch("w", 10)
            return [job.payload for job in jobs]

    try:
        assert asyncio.run(scenario()) == ["outer"]
    finally:
        engine.dispose()
