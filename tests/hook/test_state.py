"""RankState's lock-free collective bookkeeping: a report counts each collective once, in flight or
completed, whatever the threads are doing, and its counters never go backwards."""

from __future__ import annotations

import gc
import itertools
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from trainmon.hook.state import MAX_UNSETTLED, Identity, RankState
from trainmon.wire import Report

IDENTITY = Identity(job_id="j", rank=0, pid=1, start_time=0.0)
GROUP = "default_pg"


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Switch threads as often as CPython allows, and collect garbage often, so the issue/complete/report
    steps interleave, also inside the C calls where a collection runs finalizers (Python code)."""
    previous, thresholds = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(50, 1, 1)
    yield
    sys.setswitchinterval(previous)
    gc.set_threshold(*thresholds)


class Cycle:
    """Garbage only the collector frees, whose finalizer is Python code: a point where threads switch."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        pass


def counts(report: Report) -> tuple[int, int]:
    (seq,) = report.group_seqs
    return seq.issued, seq.completed


def test_a_collective_in_flight_is_issued_not_completed_and_ages_from_its_issue() -> None:
    state = RankState()
    seqs = state.sequences(GROUP)
    issued_at = time.perf_counter() - 5.0
    first = state.issue(seqs, "all_reduce", issued_at, 8)
    state.complete(state.issue(seqs, "broadcast", issued_at, 64), 0.5, 0.25)
    state.issue(seqs, "all_gather", time.perf_counter())
    report = state.report(IDENTITY, seq=1)
    assert counts(report) == (3, 1)
    (inflight,) = report.inflight
    assert inflight.op == "all_reduce" and time.time() - inflight.since == pytest.approx(5.0, abs=0.5)
    assert [(c.op, c.calls, c.bytes, c.seconds) for c in report.collectives] == [("broadcast", 1, 64, 0.5)]
    assert report.comm_wait == 0.25
    state.complete(first, 5.0, 5.0)
    later = state.report(IDENTITY, seq=2)
    assert counts(later) == (3, 2) and [i.op for i in later.inflight] == ["all_gather"]


def test_an_in_flight_collective_keeps_its_since_and_reports_its_age_on_the_monotonic_clock() -> None:
    """The age is what the daemon serves (no wall clock in it); `since` stays for older daemons, the same
    in every report."""
    state = RankState()
    state.issue(state.sequences(GROUP), "all_reduce", time.perf_counter() - 5.0)
    began = time.perf_counter()
    first = state.report(IDENTITY, seq=1)
    second = state.report(IDENTITY, seq=2)
    elapsed = time.perf_counter() - began

    assert first.inflight == second.inflight and [GROUP] == list(first.inflight_age)
    assert 5.0 <= first.inflight_age[GROUP] <= second.inflight_age[GROUP] <= first.inflight_age[GROUP] + elapsed


def test_collectives_wait_for_a_report_but_never_pile_up_unbounded() -> None:
    state = RankState()
    seqs = state.sequences(GROUP)
    for _ in range(MAX_UNSETTLED * 3):
        state.complete(state.issue(seqs, "all_reduce", 0.0, 1), 0.0, 0.0)
    assert len(state.open) <= MAX_UNSETTLED
    assert counts(state.report(IDENTITY, seq=1)) == (MAX_UNSETTLED * 3,) * 2


@pytest.mark.usefixtures("busy_switching")
def test_reports_taken_while_threads_issue_and_complete_count_each_collective_once() -> None:
    state = RankState()
    seqs = state.sequences(GROUP)
    workers, least_calls, least_reports = 4, 3000, 400
    deadline = time.monotonic() + 60
    done = threading.Event()
    seen: list[tuple[int, int, int]] = []
    made = [0] * workers
    failures: list[Exception] = []

    def train(worker: int) -> None:  # until enough reports were taken meanwhile, whatever the load
        while made[worker] < least_calls or (len(seen) < least_reports and time.monotonic() < deadline):
            entry = state.issue(seqs, "all_reduce", time.perf_counter(), 4)
            Cycle()
            state.complete(entry, 0.001, 0.001)
            made[worker] += 1

    def report() -> None:
        seq = 0
        while not done.is_set():
            seq += 1
            try:
                r = state.report(IDENTITY, seq=seq)
            except Exception as exc:  # the reporter thread must survive whatever the others do meanwhile
                failures.append(exc)
                return
            issued, completed = counts(r) if r.group_seqs else (0, 0)
            calls_total = sum(c.calls for c in r.collectives)
            seen.append((issued, completed, calls_total))

    threads = [threading.Thread(target=train, args=(i,)) for i in range(workers)]
    reporter = threading.Thread(target=report)
    reporter.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    reporter.join()
    assert failures == [] and len(seen) >= least_reports
    for (issued, completed, calls_total), (later_issued, later_completed, _) in itertools.pairwise(seen):
        assert completed == calls_total <= issued <= completed + workers  # at most one in flight per thread
        assert later_issued >= issued and later_completed >= completed
    final = state.report(IDENTITY, seq=10**6)
    assert counts(final) == (sum(made),) * 2 and final.inflight == ()
    assert sum(c.calls for c in final.collectives) == sum(made)
