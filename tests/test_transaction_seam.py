"""A transaction ended through the driver, behind its handle's back, on each engine.

``tx.connection.commit()`` or ``tx.execute("ROLLBACK")`` ends the database
transaction while the handle still looks open. Whatever is written after that
would run outside any transaction (autocommit) and escape a rollback; the
handle must refuse to go on instead, at the latest at ``commit``/``rollback``.
(``tx.execute("COMMIT")`` is the conformance suite's ``test_edge_cases``.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

import alkstore
from alkstore import TxState

EndBehindTheBack = Callable[[alkstore.TxHandle], object]

ENDINGS: dict[str, EndBehindTheBack] = {
    "execute ROLLBACK": lambda tx: tx.execute("ROLLBACK"),
    "connection.commit()": lambda tx: tx.connection.commit(),
}


@pytest.fixture
def store(dsn: str) -> Iterator[alkstore.Store]:
    with alkstore.open(dsn) as opened:
        yield opened


def ended_behind_its_back(tx: alkstore.TxHandle, how: str) -> None:
    """End ``tx`` through the driver; the engine may refuse at once or at the next call."""
    try:
        ENDINGS[how](tx)
    except alkstore.Database as exc:
        if "behind its handle's back" not in str(exc):
            raise


@pytest.mark.parametrize("how", sorted(ENDINGS))
def test_writes_after_the_transaction_ended_elsewhere_are_refused(
    store: alkstore.Store, how: str
) -> None:
    tx = store.begin_tx()
    tx.enqueue_tx("before", None, 1)
    ended_behind_its_back(tx, how)
    with pytest.raises((alkstore.Database, alkstore.Closed)):
        tx.enqueue_tx("after", None, 2)
    with pytest.raises((alkstore.Database, alkstore.Closed)):
        tx.rollback()
    assert tx.state is TxState.ENDED_ELSEWHERE
    assert store.queue("after").claim_one("w") is None


@pytest.mark.parametrize("how", sorted(ENDINGS))
def test_commit_after_the_transaction_ended_elsewhere_raises_instead_of_succeeding(
    store: alkstore.Store, how: str
) -> None:
    tx = store.begin_tx()
    ended_behind_its_back(tx, how)
    with pytest.raises((alkstore.Database, alkstore.Closed)):
        tx.publish_tx("after", 1)
        tx.commit()
    assert store.stream("after").read_since(0) == []


def test_savepoints_through_execute_are_not_an_ending(store: alkstore.Store) -> None:
    with store.transaction() as tx:
        tx.execute("SAVEPOINT inner_work")
        tx.enqueue_tx("q", None, "kept")
        tx.execute("RELEASE SAVEPOINT inner_work")
    assert store.queue("q").claim_one("w") is not None
