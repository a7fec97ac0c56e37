"""State per (job_id, rank): the last report of each live rank, TTL, caps and ingest counters.

Reports are cumulative, so only a rank's newest one matters. When the receiver falls behind and
several reports of one process arrive in one burst, only the newest is validated and applied; the
older ones are counted as accepted and as `coalesced`. A receiver that keeps up sees bursts of one,
and every datagram is validated.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from trainmon.errors import MessageRejected
from trainmon.wire import Report, parse, validate

RankKey = tuple[str, int]
Sender = tuple[str, int, object, object]  # job_id, rank, pid, start_time: one process's reports


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
    coalesced: int
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
        self._coalesced = 0
        self._rejected: Counter[str] = Counter()
        self._evicted: Counter[str] = Counter()
        self._exits: OrderedDict[str, Counter[str]] = OrderedDict()

    def receive(self, data: bytes) -> None:
        """Validate and apply one datagram; never raises for bad input (it is counted)."""
        self.receive_burst([data])

    def receive_burst(self, burst: Sequence[bytes]) -> None:
        """Apply datagrams that arrived together, coalescing each process's reports to its newest."""
        parsed: list[dict[str, object] | None] = []
        newest: dict[Sender, int] = {}
        for index, data in enumerate(burst):
            try:
                msg = parse(data)
            except MessageRejected as exc:
                self._reject(exc.reason)
                msg = None
            parsed.append(msg)
            if msg is not None and (sender := _sender(msg)) is not None:
                newest[sender] = index
        coalesced = 0
        for index, msg in enumerate(parsed):
            if msg is None:
                continue
            sender = _sender(msg)
            if sender is not None and newest[sender] != index:
                coalesced += 1
                continue
            try:
                self._apply(validate(msg))
            except MessageRejected as exc:
                self._reject(exc.reason)
        if coalesced:
            with self._lock:
                self._messages += coalesced
                self._coalesced += coalesced

    def _reject(self, reason: str) -> None:
        with self._lock:
            self._rejected[reason] += 1

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
                coalesced=self._coalesced,
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


def _sender(msg: Mapping[str, object]) -> Sender | None:
    """The process a report comes from, if its identity fields are plain values; goodbyes are never coalesced."""
    job_id, rank, pid, start = msg.get("job_id"), msg.get("rank"), msg.get("pid"), msg.get("start_time")
    if msg.get("type") != "report" or type(job_id) is not str or type(rank) is not int:
        return None
    if type(pid) not in (int, type(None)) or type(start) not in (int, float, type(None)):
        return None
    return (job_id, rank, pid, start)


def _is_stale(new: Report, old: Report) -> bool:
    if new.incarnation == old.incarnation:
        return new.seq <= old.seq
    return new.start_time < old.start_time
