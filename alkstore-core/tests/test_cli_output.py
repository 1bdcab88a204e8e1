"""The command's output helpers: the progress line's recent rate, clipped columns."""

from __future__ import annotations

import json

import pytest

from alkstore._cli._long_running import print_line
from alkstore._cli._output import RecentRate, clip, clip_text, print_json, print_table


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_recent_rate_counts_only_the_last_ten_seconds() -> None:
    clock = Clock()
    rate = RecentRate(10.0, clock)
    assert rate.update(0) == 0.0  # one reading: no span yet
    for _ in range(20):  # 100 jobs a second for 20 s
        clock.now += 1
        rate.update(rate_total := int((clock.now - 1000) * 100))
    assert rate.update(rate_total) == pytest.approx(100)
    for _ in range(5):  # then nothing for 5 s: half the window idle
        clock.now += 1
        recent = rate.update(rate_total)
    assert recent == pytest.approx(50)
    for _ in range(5):  # 10 s idle: the burst has left the window
        clock.now += 1
        recent = rate.update(rate_total)
    assert recent == 0.0


def test_the_recent_rate_of_a_young_run_spans_what_there_is() -> None:
    clock = Clock()
    rate = RecentRate(10.0, clock)
    rate.update(0)
    clock.now += 2
    assert rate.update(30) == pytest.approx(15)


def test_the_recent_rate_follows_a_speed_up_within_the_window_not_the_average() -> None:
    clock = Clock()
    rate = RecentRate(10.0, clock)
    total = 0
    for _ in range(60):  # a minute at 1/s
        clock.now += 0.5
        total += 1 if int(clock.now * 2) % 2 == 0 else 0
        rate.update(int(total))
    for _ in range(20):  # then 10 s at 20/s
        clock.now += 0.5
        total += 10
        recent = rate.update(int(total))
    assert recent == pytest.approx(20)


def test_the_recent_rate_refuses_an_empty_window() -> None:
    with pytest.raises(ValueError, match="window_s"):
        RecentRate(0)


def test_an_error_is_clipped_to_one_short_line_like_a_payload() -> None:
    long = "RuntimeError: " + "x" * 100
    assert clip_text(long) == long[:59] + "…"
    assert len(clip_text(long)) == len(clip({"text": "y" * 100})) == 60
    assert clip_text("ValueError: bad\n  line two\tand tab") == "ValueError: bad line two and tab"
    assert clip_text("short") == "short"


def test_what_a_terminal_would_obey_is_printed_as_escapes() -> None:
    """An escape sequence, a carriage return or a bidirectional override in
    stored text is shown, not obeyed: it could clear the screen, retitle the
    window or overwrite the line with a forged one."""
    assert clip_text("boom\x1b]0;owned\x07\x1b[2J") == "boom\\x1b]0;owned\\x07\\x1b[2J"
    assert clip_text("a\rforged") == "a forged"  # whitespace: one space, as line feeds
    assert clip_text("emails\u200b\u202e") == "emails\\u200b\\u202e"


def test_a_table_shows_each_cell_on_one_line_clipped(capsys: pytest.CaptureFixture[str]) -> None:
    print_table(
        ("NAME", "N"),
        [("x\nemails   0", 1), ("t\x1b[2J\u202e", 2), ("q" * 12_000, 3)],
        empty="none",
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    assert lines[1].startswith("x\\nemails   0 ")
    assert lines[2].startswith("t\\x1b[2J\\u202e ")
    assert lines[3] == "q" * 99 + "…  3"


def test_json_output_takes_a_payload_as_deep_as_the_codec_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    deep: object = "x"
    for _ in range(500):
        deep = [deep]
    print_json([{"payload": deep}])
    assert json.loads(capsys.readouterr().out) == [{"payload": deep}]


def test_json_output_escapes_what_a_terminal_would_obey_and_means_the_same(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """JSON escapes C0 controls itself; a C1 control (U+009B is CSI), a
    bidirectional override, a line separator or a tag character would reach
    the terminal raw. Escaped, the JSON decodes to the same text."""
    hostile = {"csi\u009b2J": "rtl\u202eevil \u2028 tag\U000e0041 é ✓ 🙂"}
    print_json([hostile])
    print_line(hostile)
    indented, _, line = capsys.readouterr().out.partition("]\n")
    for text in (indented + "]", line):
        assert all(line.isprintable() for line in text.splitlines())
        assert "\\u009b" in text
        assert "\\udb40\\udc41" in text
        assert "é ✓ 🙂" in text
    assert json.loads(indented + "]") == [hostile]
    assert json.loads(line) == hostile
