"""State per (job_id, rank): the last report of each live rank, TTL, caps and ingest counters.

Receiver threads call `RankTable.receive`; the collector calls `view()` once per cycle and builds
its families from the immutable `TableView` it returns, so a rank that is gone is simply absent.

A report from a new incarnation of a rank (another pid or start time) replaces the old state:
its cumulative values start again from zero, which Prometheus reads as a counter reset. Late
datagrams of an older incarnation, duplicates and reordered ones are rejected as `stale`, so a
series never goes backwards within one process.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from trainmon.errors import MessageRejected
from trainmon.wire import Report, decode

RankKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class RankState:
    report: Report
    received_at: float  # the table's clock (monotonic)
    received_wall: float  # Unix time, for /api/v1/status


@dataclass(frozen=True, slots=True, kw_only=True)
class TableView:
    """An immutable copy of the table, taken once per collection."""

    ranks: tuple[RankState, ...]
    messages: int
    rejected: Mapping[str, int]
    evicted: Mapping[str, int]
    exits: Mapping[tuple[str, str], int]  # (job_id, "clean" | "lost") -> count


class RankTable:
    """Thread-safe table of live ranks.

    Args:
        max_ranks: live (job_id, rank) pairs beyond which new ones are refused (`rejected{reason="max_ranks"}`).
            It also caps the job ids remembered by the exit counter; the oldest is forgotten first
            (`evicted{reason="exit_job_ids"}`).
        ttl: seconds of silence after which a rank is dropped (`evicted{reason="ttl"}`, exit `lost`).
        clock: monotonic seconds; tests pass their own.
    """

    def __init__(self, *, max_ranks: int, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._max_ranks = max_ranks
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._ranks: dict[RankKey, RankState] = {}
        self._messages = 0
        self._rejected: Counter[str] = Counter()
        self._evicted: Counter[str] = Counter()
        self._exits: OrderedDict[str, Counter[str]] = OrderedDict()

    def receive(self, data: bytes) -> None:
        """Validate and apply one datagram; never raises for bad input (it is counted)."""
        try:
            self._apply(decode(data))
        except MessageRejected as exc:
            with self._lock:
                self._rejected[exc.reason] += 1

    def view(self) -> TableView:
        """Expire silent ranks, then copy the table."""
        now = self._clock()
        with self._lock:
            for key in [k for k, s in self._ranks.items() if now - s.received_at > self._ttl]:
                del self._ranks[key]
                self._evicted["ttl"] += 1
                self._count_exit(key[0], "lost")
            return TableView(
                ranks=tuple(self._ranks.values()),
                messages=self._messages,
                rejected=dict(self._rejected),
                evicted=dict(self._evicted),
                exits={(job, reason): n for job, reasons in self._exits.items() for reason, n in reasons.items()},
            )

    def _apply(self, report: Report) -> None:
        key = (report.job_id, report.rank)
        state = RankState(report, self._clock(), time.time())
        with self._lock:
            old = self._ranks.get(key)
            if old is not None and _is_stale(report, old.report):
                raise MessageRejected("stale", f"{key} seq {report.seq}")
            if old is None and len(self._ranks) >= self._max_ranks:
                raise MessageRejected("max_ranks", f"{len(self._ranks)} live ranks")
            self._messages += 1
            if report.kind == "bye":
                self._ranks.pop(key, None)
                self._count_exit(report.job_id, "clean")
            else:
                self._ranks[key] = state

    def _count_exit(self, job_id: str, reason: str) -> None:
        self._exits.setdefault(job_id, Counter())[reason] += 1
        self._exits.move_to_end(job_id)
        while len(self._exits) > self._max_ranks:
            self._exits.popitem(last=False)
            self._evicted["exit_job_ids"] += 1


def _is_stale(new: Report, old: Report) -> bool:
    if new.incarnation == old.incarnation:
        return new.seq <= old.seq
    return new.start_time < old.start_time
