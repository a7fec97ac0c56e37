"""RankTable: restarts, stale datagrams, goodbyes, TTL and caps, on a clock the test moves."""

from __future__ import annotations

import dataclasses

from trainmon import wire
from trainmon.collectors.training import rank_series
from trainmon.ingest.ranks import RankTable, TableView


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_table(*, max_ranks: int = 8, ttl: float = 60, clock: Clock | None = None, **kwargs: object) -> RankTable:
    """A table as the daemon builds it, with its default caps unless the test names one."""
    options: dict[str, object] = {"series_of": rank_series, "max_series": 8000, "exit_retention": 3600.0, **kwargs}
    if clock is not None:
        options["clock"] = clock
    return RankTable(max_ranks=max_ranks, ttl=ttl, **options)  # type: ignore[arg-type]


BASE = wire.Report(job_id="job", rank=0, pid=100, start_time=1_767_000_000.0, seq=1, steps=10)


def send(table: RankTable, **changes: object) -> None:
    table.receive(wire.encode(dataclasses.replace(BASE, **changes)))  # type: ignore[arg-type]


def steps(view: TableView) -> dict[tuple[str, int], int]:
    return {(s.report.job_id, s.report.rank): s.report.steps for s in view.ranks}


def test_restarted_process_replaces_the_old_one_as_a_counter_reset() -> None:
    """A new pid with a later start time starts from its own (lower) totals."""
    table = make_table(max_ranks=8, ttl=60)
    send(table, steps=50)
    send(table, pid=200, start_time=BASE.start_time + 100, seq=1, steps=3)

    assert {("job", 0): 3} == steps(table.view())


def test_late_duplicate_and_old_incarnation_datagrams_are_stale() -> None:
    """Nothing makes a counter go backwards within one process."""
    table = make_table(max_ranks=8, ttl=60)
    send(table, seq=5, steps=50)
    send(table, seq=4, steps=40)
    send(table, seq=5, steps=50)
    send(table, pid=99, start_time=BASE.start_time - 100, seq=9, steps=1)
    view = table.view()

    assert ({("job", 0): 50}, {"stale": 3}, 1) == (steps(view), view.rejected, view.messages)


def test_goodbye_removes_the_rank_as_a_clean_exit_and_silence_as_lost() -> None:
    clock = Clock()
    table = make_table(max_ranks=8, ttl=60, clock=clock)
    send(table, rank=0)
    send(table, rank=1)
    send(table, rank=0, seq=2, kind="bye")
    clock.now += 61
    view = table.view()

    assert {} == steps(view)
    assert {("job", "clean"): 1, ("job", "lost"): 1} == view.exits
    assert {"ttl": 1} == view.evicted


def test_live_ranks_are_capped_and_refusals_counted() -> None:
    """A flood of distinct job ids never holds more than max_ranks ranks, or job ids in the exit counter."""
    clock = Clock()
    table = make_table(max_ranks=4, ttl=60, clock=clock)
    for i in range(100):
        send(table, job_id=f"job-{i}")
    full = table.view()
    clock.now += 61
    expired = table.view()
    for i in range(10):
        send(table, job_id=f"later-{i}")
    clock.now += 61

    assert (4, {"max_ranks": 96}) == (len(full.ranks), full.rejected)
    assert 4 == len(table.view().exits) and 4 <= table.view().evicted["exit_job_ids"]
    assert {"ttl": 4} == expired.evicted


def test_bad_datagrams_are_counted_by_reason() -> None:
    table = make_table(max_ranks=4, ttl=60)
    for data in (b"", b"{", b"[]", b'{"v": 9}', b"x" * 20000):
        table.receive(data)

    assert {"malformed": 3, "version": 1, "oversized": 1} == table.view().rejected


def burst(table: RankTable, *reports: wire.Report) -> None:
    table.receive_burst([(wire.encode(r), None) for r in reports])


def test_a_burst_applies_each_process_newest_report_and_counts_the_rest_coalesced() -> None:
    """A receiver that fell behind: rank 0's three reports in one burst, rank 1's one."""
    table = make_table(max_ranks=8, ttl=60)
    rank0 = [dataclasses.replace(BASE, seq=seq, steps=seq * 10) for seq in (1, 2, 3)]
    rank1 = dataclasses.replace(BASE, rank=1, seq=1, steps=7)

    burst(table, rank0[0], rank1, rank0[1], rank0[2])
    view = table.view()

    assert {("job", 0): 30, ("job", 1): 7} == steps(view)
    assert (4, 2) == (view.messages, view.coalesced)


def test_a_burst_never_coalesces_goodbyes_restarts_or_bad_datagrams() -> None:
    table = make_table(max_ranks=8, ttl=60)
    old = dataclasses.replace(BASE, seq=5, steps=50)
    bye = dataclasses.replace(old, seq=6, kind="bye")
    restarted = dataclasses.replace(BASE, pid=BASE.pid + 1, start_time=BASE.start_time + 100, seq=1, steps=1)

    table.receive_burst([(wire.encode(old), None), (wire.encode(bye), None), (b"{not json", None),
                         (wire.encode(restarted), None)])
    view = table.view()

    assert {("job", 0): 1} == steps(view)
    assert {("job", "clean"): 1} == dict(view.exits)
    assert {"malformed": 1} == dict(view.rejected)
    assert (3, 0) == (view.messages, view.coalesced)


def test_a_burst_of_one_validates_every_datagram() -> None:
    """When the receiver keeps up, a type-confused report is rejected, not coalesced away."""
    table = make_table(max_ranks=8, ttl=60)
    good = wire.encode(dataclasses.replace(BASE, seq=1))
    confused = wire.encode(dataclasses.replace(BASE, seq=2)).replace(b'"steps":', b'"steps":"x","was":')

    table.receive_burst([(good, None)])
    table.receive_burst([(confused, None)])

    assert {"schema": 1} == dict(table.view().rejected)
