"""The daemon logs each rank's arrival and departure once, and at most a burst of such lines a minute."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from tests.helpers.clock import Clock
from tests.ingest.test_ranks import BASE, make_table, send
from trainmon import wire
from trainmon.ingest.rank_log import BURST, WINDOW_S, RankEvents


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "trainmon.ingest"]


def test_a_rank_is_logged_once_when_it_arrives_and_once_when_it_leaves(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock(1000.0)
    table = make_table(ttl=60, clock=clock)
    with caplog.at_level(logging.INFO, logger="trainmon.ingest"):
        for seq in (1, 2, 3):
            send(table, seq=seq, world_size=2)
        send(table, rank=1, pid=101, seq=1, world_size=2)
        table.receive(wire.encode(dataclasses.replace(BASE, seq=4, kind="bye", exit_reason="error")))
        clock.now += 61
        table.view()  # rank 1 has been silent past the TTL

    assert ["rank arrived job_id=job rank=0 pid=100 world_size=2",
            "rank arrived job_id=job rank=1 pid=101 world_size=2",
            "rank left job_id=job rank=0 reason=error",
            "rank left job_id=job rank=1 reason=lost"] == lines(caplog)


def test_a_restarted_rank_arrives_again(caplog: pytest.LogCaptureFixture) -> None:
    table = make_table()
    with caplog.at_level(logging.INFO, logger="trainmon.ingest"):
        send(table, seq=1)
        send(table, pid=200, start_time=BASE.start_time + 100, seq=1)

    assert ["rank arrived job_id=job rank=0 pid=100 world_size=None",
            "rank arrived job_id=job rank=0 pid=200 world_size=None"] == lines(caplog)


def test_past_the_burst_lines_are_counted_and_said_once_the_window_has_passed(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock(0.0)
    events = RankEvents(clock)
    with caplog.at_level(logging.INFO, logger="trainmon.ingest"):
        for rank in range(BURST + 5):
            events.arrived("big", rank, 1000 + rank, BURST + 5)
        events.flush()
        told_before = len(lines(caplog))
        clock.now = WINDOW_S
        events.flush()
        events.left("big", 0, "clean")

    assert BURST == told_before
    assert [f"rank arrivals and departures not logged in the last 60s: 5 (at most {BURST} lines a window)",
            "rank left job_id=big rank=0 reason=clean"] == lines(caplog)[BURST:]
