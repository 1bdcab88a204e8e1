"""The error taxonomy: one root, a class per thing a caller can act on."""

from __future__ import annotations

import pytest

import alkstore
from alkstore.engine import DriverErrors

VARIANTS = [
    alkstore.PayloadTooLarge,
    alkstore.ReservedName,
    alkstore.InvalidName,
    alkstore.Closed,
    alkstore.Codec,
    alkstore.Database,
    alkstore.InvalidSpec,
    alkstore.LeadershipLost,
    alkstore.EngineNotFound,
]


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_derives_from_the_root(variant: type[alkstore.Error]) -> None:
    assert issubclass(variant, alkstore.Error)
    assert issubclass(alkstore.Error, Exception)


@pytest.mark.parametrize("variant", VARIANTS)
def test_without_a_message_the_docstring_speaks(variant: type[alkstore.Error]) -> None:
    message = str(variant())
    assert message
    assert message == (variant.__doc__ or "").strip().splitlines()[0]


def test_a_given_message_wins() -> None:
    assert str(alkstore.Closed("store 'x' is closed")) == "store 'x' is closed"


def test_engine_not_found_is_a_lookup_error() -> None:
    assert issubclass(alkstore.EngineNotFound, LookupError)


def test_database_errors_chain_their_cause() -> None:
    cause = OSError("disk I/O error")

    def failing_enqueue() -> None:
        try:
            raise cause
        except OSError as exc:
            raise alkstore.Database("enqueue failed") from exc

    with pytest.raises(alkstore.Database) as raised:
        failing_enqueue()
    assert raised.value.__cause__ is cause


class _Failing(DriverErrors):
    driver_errors = (OSError,)


@pytest.mark.parametrize("length", [1_000, 1_980])
def test_an_action_naming_a_name_the_contract_allows_is_named_whole(length: int) -> None:
    action = f"enqueue into {'q' * length!r}"
    with pytest.raises(alkstore.Database) as raised, _Failing(action):
        raise OSError("disk on fire")
    assert str(raised.value) == f"{action} failed: disk on fire"


def test_a_huge_name_makes_no_huge_message() -> None:
    action = f"enqueue into {'q' * 100_000!r}"
    with pytest.raises(alkstore.Database) as raised, _Failing(action):
        raise OSError("disk on fire")
    message = str(raised.value)
    assert len(message) < 1_300
    assert message.startswith("enqueue into 'qqq")
    assert f"[{len(action) - 1_200:,} characters]" in message
    assert message.endswith("qqq' failed: disk on fire")
