"""``tx.execute`` with ``:name`` parameters and a mapping runs unchanged on every engine.

The engine declares its driver's DB-API ``paramstyle`` and core rewrites
portable SQL into it; what is not a parameter — a ``:name`` inside a string
literal or a comment, a percent sign — reaches the database as written.
"""

from __future__ import annotations

import pytest

import alkstore
from alkstore.engine import TestProvider


@pytest.fixture(autouse=True)
def _sql_only(provider: TestProvider) -> None:
    if not provider.speaks_sql:
        pytest.skip("the provider's engine does not run SQL (TestProvider.speaks_sql)")


def test_named_parameters_bind_from_a_mapping(store: alkstore.Store) -> None:
    with store.transaction() as tx:
        rows = tx.execute("SELECT :number, :word", {"number": 7, "word": "seven"})
    assert [tuple(row) for row in rows] == [(7, "seven")]


def test_a_name_used_twice_binds_the_same_value(store: alkstore.Store) -> None:
    with store.transaction() as tx:
        rows = tx.execute("SELECT :n, :n + 1", {"n": 41})
    assert [tuple(row) for row in rows] == [(41, 42)]


def test_what_only_looks_like_a_parameter_is_left_alone(store: alkstore.Store) -> None:
    sql = (
        "SELECT ':literal', 'it''s :quoted', '100%', :real -- :commented\n/* :in_a_block_comment */"
    )
    with store.transaction() as tx:
        rows = tx.execute(sql, {"real": 1})
    assert [tuple(row) for row in rows] == [(":literal", "it's :quoted", "100%", 1)]


def test_a_name_without_a_value_is_refused_before_anything_runs(store: alkstore.Store) -> None:
    with store.transaction() as tx:
        with pytest.raises(ValueError, match=":missing"):
            tx.execute("SELECT :present, :missing", {"present": 1})
        assert [tuple(row) for row in tx.execute("SELECT :n", {"n": 2})] == [(2,)]
        tx.enqueue_tx("emails", None, "the transaction goes on")
    job = store.queue("emails").claim_one("w")
    assert job is not None
    assert job.payload == "the transaction goes on"


def test_named_sql_given_a_sequence_is_refused_before_anything_runs(
    store: alkstore.Store,
) -> None:
    """Binding ``:name`` by position is what one driver does and another refuses:
    every engine refuses it the same way, and the transaction goes on."""
    with store.transaction() as tx:
        with pytest.raises(TypeError, match=":n: give params as a mapping"):
            tx.execute("SELECT :n", [1])
        assert [tuple(row) for row in tx.execute("SELECT :n", {"n": 2})] == [(2,)]
