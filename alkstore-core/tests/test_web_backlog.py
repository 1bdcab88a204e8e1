"""The dashboard's backlog sparkline: what it samples and how it draws it."""

from __future__ import annotations

import alkstore
from alkstore.web._backlog import Backlog


def test_the_backlog_draws_the_samples_it_took_at_most_every_interval() -> None:
    backlog = Backlog(every_s=2, keep=3)
    stats = [alkstore.QueueStats("q", 4, 0, 0, 0, 9, None)]
    assert backlog.points("q") == ""
    backlog.record(stats, now=0)
    backlog.record([alkstore.QueueStats("q", 1, 0, 0, 0, 9, None)], now=1)  # too soon: ignored
    assert backlog.points("q") == ""
    backlog.record([alkstore.QueueStats("q", 2, 0, 0, 0, 9, None)], now=2)
    assert (
        backlog.points("q", width=120, height=24) == "60.0,1.0 120.0,12.0"
    )  # the newest at the right
    for n in range(3):
        backlog.record([alkstore.QueueStats("q", n, 0, 0, 0, 0, None)], now=4 + 2 * n)
    assert backlog.points("q").split()[0].startswith("0.0,")  # the oldest dropped
