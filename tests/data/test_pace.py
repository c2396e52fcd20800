"""A long data loop's progress lines: at most one every REPORT_EVERY seconds, none at its start or end, each with the
minutes left at the rate so far (computed here by hand on a clock the test moves)."""

from __future__ import annotations

import logging

import pytest

from dpmed.data import pace


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(pace.time, "perf_counter", lambda: now[0])
    return now


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "dpmed.test_pace"]


def test_one_line_per_interval_at_most_each_saying_the_minutes_left(clock, caplog):
    caplog.set_level(logging.INFO, logger="dpmed.test_pace")
    log = logging.getLogger("dpmed.test_pace")
    p = pace.Pace(log)
    assert pace.REPORT_EVERY == 20.0
    for elapsed, share in ((5, 0.05), (19.9, 0.1), (21, 0.1), (22, 0.11), (40.9, 0.2), (41, 0.2), (120, 0.25)):
        clock[0] = 1000.0 + elapsed
        p.log(share, "%d of %d images", round(share * 100), 100)
    # 21 s for a tenth: 189 s left, 3.15 -> 4 min; 41 s for a fifth: 164 s, 2.7 -> 3 min (20 s after the last line,
    # not 20 s after the start); 120 s for a quarter: 360 s, 6 min
    assert _lines(caplog) == ["10 of 100 images, about 4 min left", "20 of 100 images, about 3 min left",
                              "25 of 100 images, about 6 min left"]


def test_nothing_at_the_start_or_the_end_of_the_loop(clock, caplog):
    caplog.set_level(logging.INFO, logger="dpmed.test_pace")
    p = pace.Pace(logging.getLogger("dpmed.test_pace"))
    for elapsed, share in ((30, 0.0), (60, 1.0), (90, 1.5)):
        clock[0] = 1000.0 + elapsed
        p.log(share, "done")
    assert _lines(caplog) == []
