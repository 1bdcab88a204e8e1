"""The outage account every runner keeps: one warning per outage, capped pauses."""

from __future__ import annotations

import logging
import time

import pytest

import alkstore
from alkstore import _outage
from alkstore._outage import OUTAGE_MAX_PAUSE_S, Outage

STEADY_S = 0.2

log = logging.getLogger("alkstore.test-outage")


@pytest.fixture(autouse=True)
def short_steady_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_outage, "_STEADY_S", STEADY_S)


def records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


def test_an_outage_is_one_warning_however_many_failures(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=log.name)
    outage = Outage(log, "worker 'w' on 'q'")
    for _ in range(5):
        outage.failed("claiming from 'q'", alkstore.Database("claim failed: refused\nmore"))
    assert records(caplog, logging.WARNING) == [
        "worker 'w' on 'q': claiming from 'q' failed; retrying, with pauses of up to 3 s, "
        "until the database answers: Database: claim failed: refused"
    ]
    assert len(records(caplog, logging.DEBUG)) == 4


def test_it_is_over_once_the_database_answers_steadily_and_a_new_one_warns_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=log.name)
    outage = Outage(log, "the scheduler")
    outage.failed("firing due schedules", alkstore.Database("down"))
    outage.succeeded()
    outage.failed("firing due schedules", alkstore.Database("a stale connection"))  # same outage
    outage.succeeded()
    assert records(caplog, logging.INFO) == []
    time.sleep(STEADY_S + 0.05)
    outage.succeeded()
    (recovered,) = records(caplog, logging.INFO)
    assert recovered.startswith("the scheduler: recovered after 0.")
    outage.failed("renewing scheduler leadership", alkstore.Database("down again"))
    assert len(records(caplog, logging.WARNING)) == 2


def test_pauses_grow_from_a_tenth_of_a_second_and_stay_under_the_cap() -> None:
    outage = Outage(log, "r")
    pauses = [outage.failed("x", alkstore.Database("down")) for _ in range(12)]
    assert 0.05 <= pauses[0] <= 0.1
    assert all(OUTAGE_MAX_PAUSE_S / 2 <= pause <= OUTAGE_MAX_PAUSE_S for pause in pauses[6:])
