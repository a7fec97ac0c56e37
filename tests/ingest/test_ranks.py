"""RankTable: restarts, stale datagrams, goodbyes, TTL and caps, on a clock the test moves."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from tests.helpers.clock import Clock
from trainmon import wire
from trainmon.collectors.training import rank_series
from trainmon.ingest.ranks import (
    MAX_PEAKS,
    PEAK_HOLD,
    UNVERIFIED_EXIT_JOBS,
    VERIFIED_EXIT_JOBS,
    Procfs,
    RankTable,
    TableView,
)


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
    clock = Clock(1000.0)
    table = make_table(max_ranks=8, ttl=60, clock=clock)
    send(table, rank=0)
    send(table, rank=1)
    send(table, rank=0, seq=2, kind="bye")
    clock.now += 61
    view = table.view()

    assert {} == steps(view)
    assert {("job", "clean"): 1, ("job", "lost"): 1} == view.exits
    assert {"ttl": 1} == view.evicted


def test_a_goodbye_keeps_the_ranks_final_values_marked_exited_for_the_retention() -> None:
    """The goodbye carries the final totals: held `exited_retention`, not live, then gone; the exited
    incarnation's late datagrams are stale, and an exited rank does not hold a live rank's place."""
    clock = Clock(1000.0)
    table = make_table(max_ranks=1, clock=clock, exited_retention=30.0)
    send(table, steps=10)
    send(table, seq=2, steps=12, kind="bye")
    held = table.view()
    send(table, seq=3, steps=13)
    send(table, job_id="other")
    clock.now += 31
    gone = table.view()

    assert ({("job", 0): 12}, ()) == (steps(held), held.running)
    assert [1000.0] == [s.exited_at for s in held.ranks]
    assert ({"stale": 1}, {("other", 0): 10}) == (dict(gone.rejected), steps(gone))
    assert {("job", "clean"): 1} == gone.exits
    assert [sum(s.series for s in v.ranks) for v in (held, gone)] == [held.series, gone.series]


def test_a_rank_ended_by_an_error_stays_while_its_jobs_other_ranks_live_here() -> None:
    """Its peers likely wait for it in a collective: it stays the hang's `gone` culprit past the retention, and
    goes with the last of them; a clean exit goes after the retention as before."""
    clock = Clock(1000.0)
    table = make_table(clock=clock, exited_retention=30.0)
    for rank in range(3):
        send(table, rank=rank)
    send(table, rank=0, seq=2, kind="bye", exit_reason="error")
    send(table, rank=1, seq=2, kind="bye")
    clock.now += 31
    send(table, rank=2, seq=2)
    waiting = table.view()
    send(table, rank=2, seq=3, kind="bye")
    clock.now += 31
    ended = table.view()

    assert {("job", 0): 10, ("job", 2): 10} == steps(waiting)
    assert {} == steps(ended)


def test_a_new_incarnation_takes_an_exited_ranks_place_at_once() -> None:
    table = make_table(exited_retention=30.0)
    send(table, steps=10)
    send(table, seq=2, steps=12, kind="bye")
    send(table, pid=200, start_time=BASE.start_time + 100, seq=1, steps=3)
    view = table.view()

    assert ({("job", 0): 3}, 1) == (steps(view), len(view.running))
    assert view.series == sum(s.series for s in view.ranks)


def test_live_ranks_are_capped_and_refusals_counted() -> None:
    """A flood of distinct job ids never holds more than max_ranks ranks."""
    clock = Clock(1000.0)
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
    assert {(f"job-{i}", "lost") for i in range(4)} | {(f"later-{i}", "lost") for i in range(4)} == set(
        table.view().exits)
    assert {"ttl": 4} == expired.evicted


def test_goodbyes_for_made_up_jobs_never_forget_a_verified_jobs_exits() -> None:
    """Issue 31: the exit counter kept max_ranks job ids, so 128 goodbyes for made-up jobs erased every real one."""
    table = make_table(max_ranks=4)
    table.receive(wire.encode(BASE), sender_pid=BASE.pid)
    table.receive(wire.encode(dataclasses.replace(BASE, seq=2, kind="bye")), sender_pid=BASE.pid)
    for i in range(UNVERIFIED_EXIT_JOBS + 100):
        send(table, job_id=f"made-up-{i}", kind="bye", pid=7)
    view = table.view()

    assert 1 == view.exits[("job", "clean")]
    assert UNVERIFIED_EXIT_JOBS + 1 == len(view.exits)
    assert 100 == view.evicted["exit_job_ids"]


def test_verified_jobs_are_forgotten_oldest_first_beyond_their_own_cap() -> None:
    table = make_table(max_ranks=4)
    for i in range(VERIFIED_EXIT_JOBS + 3):
        job = dataclasses.replace(BASE, job_id=f"job-{i}")
        table.receive(wire.encode(job), sender_pid=BASE.pid)
        table.receive(wire.encode(dataclasses.replace(job, seq=2, kind="bye")), sender_pid=BASE.pid)
    exits = table.view().exits

    assert VERIFIED_EXIT_JOBS == len(exits)
    assert {("job-0", "clean"), ("job-1", "clean"), ("job-2", "clean")}.isdisjoint(exits)


def test_bad_datagrams_are_counted_by_reason() -> None:
    table = make_table(max_ranks=4, ttl=60)
    for data in (b"", b"{", b"[]", b'{"v": 9}', b"x" * 20000):
        table.receive(data)

    assert {"malformed": 3, "version": 1, "oversized": 1} == table.view().rejected


def burst(table: RankTable, *reports: wire.Report) -> None:
    table.receive_burst([(wire.encode(r), None, None) for r in reports])


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

    table.receive_burst([(wire.encode(old), None, None), (wire.encode(bye), None, None), (b"{not json", None, None),
                         (wire.encode(restarted), None, None)])
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

    table.receive_burst([(good, None, None)])
    table.receive_burst([(confused, None, None)])

    assert {"schema": 1} == dict(table.view().rejected)


def kernel_send(table: RankTable, sender_pid: int, **changes: object) -> None:
    """A datagram from the Unix socket, where the kernel says who sent it."""
    table.receive(wire.encode(dataclasses.replace(BASE, **changes)), sender_pid)  # type: ignore[arg-type]


def procfs(root: Path, *processes: tuple[int, ...]) -> Procfs:
    """A synthetic procfs holding `processes`, each given by its NSpid numbers, outermost first."""
    for pids in processes:
        (root / str(pids[0])).mkdir(parents=True, exist_ok=True)
        (root / str(pids[0]) / "status").write_text(f"Name:\tpython\nNSpid:\t{chr(9).join(map(str, pids))}\n")
    return Procfs(root)


def test_a_report_whose_pid_is_not_the_senders_is_an_identity_rejection(tmp_path: Path) -> None:
    table = make_table(procfs=procfs(tmp_path, (100,)))
    kernel_send(table, 555, pid=100)
    kernel_send(table, 100, pid=100, steps=4)

    view = table.view()
    assert ({("job", 0): 4}, {"identity": 1}) == (steps(view), view.rejected)


def test_a_sender_in_a_nested_pid_namespace_reports_its_own_pid(tmp_path: Path) -> None:
    """A containerised rank sees itself as pid 7; the kernel gives the daemon 4242 (`NSpid: 4242 7`)."""
    table = make_table(procfs=procfs(tmp_path, (4242, 7)))
    kernel_send(table, 4242, pid=8)
    kernel_send(table, 4242, pid=7, steps=3)

    view = table.view()
    assert ({("job", 0): 3}, {"identity": 1}) == (steps(view), view.rejected)


def test_without_a_kernel_pid_the_report_is_taken_at_its_word(tmp_path: Path) -> None:
    """pid 0: the sender is outside the daemon's pid namespace, so there is nothing to check against."""
    table = make_table(procfs=procfs(tmp_path))
    kernel_send(table, 0, pid=100, steps=2)

    assert [False] == [s.verified for s in table.view().ranks]


def test_a_live_proven_holder_keeps_its_slot_and_its_goodbye(tmp_path: Path) -> None:
    """Another pid can neither take over a running process's slot with a later start time nor say its bye."""
    table = make_table(procfs=procfs(tmp_path, (100,), (200,)))
    kernel_send(table, 100, pid=100, steps=10)
    kernel_send(table, 200, pid=200, start_time=BASE.start_time + 50, seq=1, steps=1)
    kernel_send(table, 200, pid=200, start_time=BASE.start_time + 50, seq=2, kind="bye")
    held = table.view()
    shutil.rmtree(tmp_path / "100")  # the holder died without a goodbye: its restart may take the slot at once
    kernel_send(table, 200, pid=200, start_time=BASE.start_time + 50, seq=3, steps=2)

    assert ({("job", 0): 10}, {"identity": 2}) == (steps(held), held.rejected)
    assert {("job", 0): 2} == steps(table.view())


def test_a_goodbye_from_another_pid_is_refused_even_over_udp() -> None:
    table = make_table()
    send(table, steps=10)
    send(table, pid=BASE.pid + 1, seq=2, kind="bye")

    view = table.view()
    assert ({("job", 0): 10}, {"identity": 1}, {}) == (steps(view), view.rejected, view.exits)


def test_a_seq_leap_is_refused_so_it_cannot_freeze_the_rank() -> None:
    table = make_table()
    send(table, seq=1, steps=1)
    send(table, seq=2**62 - 1, steps=2)  # accepted before, every later report was then stale
    send(table, seq=1 << 30, steps=3)
    send(table, seq=2, steps=4)

    view = table.view()
    assert ({("job", 0): 4}, {"range": 2}) == (steps(view), view.rejected)


@pytest.mark.parametrize("backwards", [
    {"steps": 5},
    {"comm_wait": 0.5},
    {"step_buckets": (0,) * 14},
    {"collectives": (wire.Collective(op="all_reduce", group="g", seconds=1.0, calls=1, bytes=1),)},
    {"hook_errors": {"send_drops": 0}},
    {"group_seqs": (wire.GroupSeq("g", 1, 1),)},
])
def test_a_counter_going_backwards_within_one_process_is_refused(backwards: dict[str, object]) -> None:
    first = {"steps": 10, "comm_wait": 1.0, "step_buckets": (0,) * 13 + (1,), "hook_errors": {"send_drops": 3},
             "collectives": (wire.Collective(op="all_reduce", group="g", seconds=2.0, calls=3, bytes=4),),
             "group_seqs": (wire.GroupSeq("g", 5, 4),)}
    table = make_table()
    send(table, seq=1, **first)
    send(table, seq=2, **{**first, **backwards})
    send(table, seq=3, **first)

    assert {"range": 1} == table.view().rejected


def test_a_new_rank_that_would_pass_the_series_budget_is_refused() -> None:
    one = rank_series(BASE)
    table = make_table(max_series=3 * one)
    for rank in range(5):
        send(table, rank=rank)
    view = table.view()
    send(table, rank=0, seq=2, kind="bye")
    send(table, rank=4, seq=2)

    assert (3, 3 * one, {"series_budget": 2}) == (len(view.ranks), view.series, view.rejected)
    assert {("job", 1), ("job", 2), ("job", 4)} == set(steps(table.view()))


def test_a_jobs_exit_series_are_dropped_after_the_retention() -> None:
    clock = Clock(1000.0)
    table = make_table(clock=clock, ttl=1000, exit_retention=100)
    send(table, job_id="a", rank=0)
    send(table, job_id="a", rank=1)
    send(table, job_id="a", rank=0, seq=2, kind="bye", exit_reason="error")
    clock.now += 90
    send(table, job_id="a", rank=1, seq=2)  # a rank still runs: the clock has not started
    clock.now += 50
    kept = table.view()
    send(table, job_id="a", rank=1, seq=3, kind="bye")
    clock.now += 99
    before = table.view()
    clock.now += 2

    assert {("a", "error"): 1} == kept.exits
    assert {("a", "error"): 1, ("a", "clean"): 1} == before.exits
    assert ({}, {"exit_retention": 1}) == (table.view().exits, table.view().evicted)


def test_whatever_fails_while_applying_is_a_rejection_not_an_escape() -> None:
    """A table whose series count fails (as a bug would) still counts the datagram and takes the next."""
    calls = []

    def flaky(report: wire.Report) -> int:
        calls.append(report.seq)
        if len(calls) == 1:
            raise OverflowError("a bug")
        return rank_series(report)

    table = make_table(series_of=flaky)
    send(table, seq=1)
    send(table, seq=2, steps=11)

    view = table.view()
    assert ({("job", 0): 11}, {"malformed": 1}) == (steps(view), view.rejected)


def test_a_spike_maximum_is_held_for_two_scrape_intervals_then_forgotten() -> None:
    """The hook's maxima cover one report interval; a scrape 15 s later still sees the spike."""
    clock = Clock()
    table = make_table(clock=clock)
    send(table, seq=1, loss_max=2.2, grad_norm_max=0.3)
    clock.now += 1
    send(table, seq=2, loss_max=5.1, grad_norm_max=960.0)
    for seq in range(3, 3 + 20):
        clock.now += 1
        send(table, seq=seq, loss_max=2.3, grad_norm_max=None)
    (slot,) = table.view().ranks
    assert (slot.report.loss_max, slot.report.grad_norm_max) == (5.1, 960.0)
    clock.now += PEAK_HOLD
    send(table, seq=30, loss_max=2.4, grad_norm_max=0.4)
    (slot,) = table.view().ranks
    assert (slot.report.loss_max, slot.report.grad_norm_max) == (2.4, 0.4)


def test_a_fast_reporter_keeps_a_bounded_number_of_peaks_and_loses_none() -> None:
    clock = Clock()
    table = make_table(clock=clock)
    send(table, seq=1, loss_max=50.0)
    for seq in range(2, 2000):
        clock.now += 0.01
        send(table, seq=seq, loss_max=1.0)
    (slot,) = table.view().ranks
    assert len(slot.peaks) <= MAX_PEAKS
    assert slot.report.loss_max == 50.0


def test_a_restart_does_not_inherit_the_previous_processes_maxima() -> None:
    clock = Clock()
    table = make_table(clock=clock)
    send(table, loss_max=50.0)
    send(table, pid=200, start_time=BASE.start_time + 100, seq=1, loss_max=2.0)
    (slot,) = table.view().ranks
    assert slot.report.loss_max == 2.0
