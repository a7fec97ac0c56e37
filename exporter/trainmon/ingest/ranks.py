"""State per (job_id, rank): the last report of each live rank, TTL, caps, trust and ingest counters.

Reports are cumulative, so only a rank's newest one matters. When the receiver falls behind and
several reports of one process arrive in one burst, only the newest is validated and applied; the
older ones are counted as accepted and as `coalesced`. A receiver that keeps up sees bursts of one,
and every datagram is validated.

Receiver threads call `RankTable.receive_burst`; the collector calls `view()` once per cycle and
builds its families from the immutable `TableView` it returns, so a rank that is gone is simply absent.
A rank that said goodbye stays `exited_retention` seconds more with the values of its goodbye (which
carries the final ones), marked exited: the last steps arrive after the last collection before the
process ends, and would otherwise never be served, let alone scraped.

Whatever fails while one datagram is decoded or applied is a rejection with a reason (`malformed`
when it is not one of ours), never an exception out of `receive_burst`.

Trust (SPEC §5): a datagram from the Unix socket carries the sender's pid from the kernel
(SCM_CREDENTIALS), in the daemon's pid namespace; the report's `pid` is the one the process sees in
its own namespace, so it must be one of the sender's `NSpid` entries in `<procfs>/<pid>/status` (the
same number when both share a namespace), or the report is rejected (`identity`). A slot whose
holder was proved that way and still runs is not taken over by another process, and only its own
process can say its goodbye. A sender outside the daemon's pid namespace (the kernel gives pid 0: the
Kubernetes DaemonSet has no hostPID) is known by its uid instead, which the kernel gives in the daemon's
user namespace: a live slot such a sender made is taken over or said goodbye to only by the same uid.
UDP carries no proof: such a report is trusted for what it says.

A report from a new incarnation of a rank (another pid or start time, its predecessor gone) replaces
the old state: its cumulative values start again from zero, which Prometheus reads as a counter
reset. Late datagrams of an older incarnation, duplicates and reordered ones are rejected as
`stale`; within one incarnation a counter that goes backwards or a `seq` that leaps is `range`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from trainmon.errors import MessageRejected
from trainmon.ingest.rank_log import RankEvents
from trainmon.roots import Unavailable, read_attribute
from trainmon.wire import Report, parse, validate, went_backwards

log = logging.getLogger(__name__)

T = TypeVar("T")
RankKey = tuple[str, int]
# The bytes, and the kernel's sender pid and uid (SCM_CREDENTIALS; None over UDP: no proof).
Datagram = tuple[bytes, int | None, int | None]
SenderProcess = tuple[object, ...]  # job_id, rank, pid, start_time, kernel pid: one process's reports
STATUS_BYTES = 16 << 10  # /proc/<pid>/status is ~1.5 KB; more than this is not a status file
# Job ids whose exit counts are remembered (each up to 3 series, ~1 KiB with a 128-character id):
# jobs that had a rank proved by its sender pid (its own goodbye, or its slot expiring), and the rest
# (goodbyes for ranks the table never held, senders without proof), each table forgetting its own oldest
# first, so goodbyes for made-up jobs can fill only the second.
VERIFIED_EXIT_JOBS = 1024
UNVERIFIED_EXIT_JOBS = 256
MAX_SEQ_STEP = 1 << 24  # seq advances one per report: a larger leap within one process is a forgery
# The hook's loss/grad-norm maxima cover one report interval (1 s by default); the table serves the largest
# of the last PEAK_HOLD seconds, two default scrape intervals, so a spike between scrapes is still seen.
PEAK_HOLD = 30.0
Peak = tuple[float, float | None, float | None]  # received_at, loss_max, grad_norm_max
MAX_PEAKS = 64  # a faster reporter's oldest two peaks are folded into one: held a little longer, never lost


def parse_nspid(status: str) -> tuple[int, ...]:
    """The `NSpid:` line of /proc/<pid>/status: the pid in each nested namespace, outermost first."""
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            return tuple(int(v) for v in line.split()[1:])
    return ()


@dataclass(frozen=True, slots=True)
class Procfs:
    """What the table asks the kernel about senders, under a procfs root."""

    root: Path

    def alive(self, pid: int) -> bool:
        return (self.root / str(pid)).is_dir()

    def pids_of(self, pid: int) -> tuple[int, ...]:
        """`pid`'s numbers in its nested pid namespaces; just (pid,) when its status cannot be read."""
        try:
            status = read_attribute(self.root / str(pid) / "status", STATUS_BYTES)
        except OSError:  # EMFILE and the like: no proof beyond the pid itself
            return (pid,)
        if isinstance(status, Unavailable):
            return (pid,)
        return parse_nspid(status) or (pid,)


@dataclass(frozen=True, slots=True)
class RankSlot:
    report: Report
    received_at: float  # the table's clock (monotonic)
    received_wall: float  # Unix time, for /api/v1/status
    process: int  # the kernel's sender pid (Unix socket), else the report's pid
    verified: bool  # `process` came from the kernel
    series: int  # what the collector serves for this rank
    owner_uid: int | None = None  # the sender's uid where the kernel gave no pid (another pid namespace)
    peaks: tuple[Peak, ...] = ()  # this incarnation's maxima of the last PEAK_HOLD seconds, oldest first
    exited_at: float | None = None  # the table's clock when the rank said goodbye; None while it lives
    # The latest stack the rank sent (once per hang episode) and when it came (Unix time): kept while the rank is.
    stack: tuple[str, ...] | None = None
    stack_wall: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TableView:
    """An immutable copy of the table, taken once per collection."""

    ranks: tuple[RankSlot, ...]
    messages: int
    coalesced: int
    rejected: Mapping[str, int]
    evicted: Mapping[str, int]
    exits: Mapping[tuple[str, str], int]  # (job_id, "clean" | "error" | "lost") -> count
    series: int  # training series of the ranks held, live and exited
    taken_at: float  # the table's clock when it was copied
    # Ranks not exited whose sender, proved by the kernel, is no longer alive (SIGKILL, OOM kill): gone before
    # their TTL says so.
    dead: frozenset[RankKey] = frozenset()

    @property
    def running(self) -> tuple[RankSlot, ...]:
        """The ranks that have not said goodbye."""
        return tuple(slot for slot in self.ranks if slot.exited_at is None)


class RankTable:
    """Thread-safe table of live ranks.

    Args:
        max_ranks: live (job_id, rank) pairs beyond which new ones are refused (`rejected{reason="max_ranks"}`).
            The exit counter's job ids are capped by VERIFIED_EXIT_JOBS and UNVERIFIED_EXIT_JOBS instead
            (`evicted{reason="exit_job_ids"}`).
        ttl: seconds of silence after which a rank is dropped (`evicted{reason="ttl"}`, exit `lost`).
        series_of: the series the collector serves for a report.
        max_series: cap on the sum of `series_of` over live ranks; a report that would pass it is refused
            (`rejected{reason="series_budget"}`).
        exit_retention: seconds a job's exit counts are kept after its last rank is gone
            (`evicted{reason="exit_retention"}`).
        exited_retention: seconds a rank that said goodbye is kept, with its goodbye's values, marked exited
            (0: dropped at once). It holds its series (`series_of` + 1, its mark) against `max_series`
            meanwhile, or is dropped at once where they do not fit; it does not count against `max_ranks`.
        procfs: where sender pids are looked up; tests pass their own.
        clock: monotonic seconds; tests pass their own.
    """

    def __init__(
        self, *, max_ranks: int, ttl: float, series_of: Callable[[Report], int], max_series: int,
        exit_retention: float, exited_retention: float = 0.0, procfs: Procfs | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_ranks = max_ranks
        self._ttl = ttl
        self._series_of = series_of
        self._max_series = max_series
        self._exit_retention = exit_retention
        self._exited_retention = exited_retention
        self._procfs = procfs or Procfs(Path("/proc"))
        self._clock = clock
        self._lock = threading.Lock()
        self._ranks: dict[RankKey, RankSlot] = {}
        self._series = 0
        self._messages = 0
        self._coalesced = 0
        self._rejected: Counter[str] = Counter()
        self._evicted: Counter[str] = Counter()
        self._exits = ExitHistory()
        self._job_gone_at: dict[str, float] = {}  # job_id -> when its last live rank left
        self._events = RankEvents(clock)

    def receive(self, data: bytes, sender_pid: int | None = None, sender_uid: int | None = None) -> None:
        """Validate and apply one datagram; never raises for bad input (it is counted)."""
        self.receive_burst([(data, sender_pid, sender_uid)])

    def receive_burst(self, burst: Sequence[Datagram]) -> None:
        """Apply datagrams that arrived together, coalescing each process's reports to its newest."""
        parsed: list[tuple[dict[str, object], int | None, int | None] | None] = []
        newest: dict[SenderProcess, int] = {}
        for index, (data, sender_pid, sender_uid) in enumerate(burst):
            msg = self._rejecting(parse, data)
            parsed.append(None if msg is None else (msg, sender_pid, sender_uid))
            if msg is not None and (sender := _sender_process(msg, sender_pid)) is not None:
                newest[sender] = index
        coalesced = 0
        for index, item in enumerate(parsed):
            if item is None:
                continue
            msg, sender_pid, sender_uid = item
            sender = _sender_process(msg, sender_pid)
            if sender is not None and newest[sender] != index:
                coalesced += 1
                continue
            report = self._rejecting(validate, msg)
            if report is not None:
                self._rejecting(self._apply, report, sender_pid, sender_uid)
        if coalesced:
            with self._lock:
                self._messages += coalesced
                self._coalesced += coalesced

    def _rejecting(self, step: Callable[..., T], *args: object) -> T | None:
        """`step(*args)`, or None with the rejection counted: whatever it raises (an Exception) is one."""
        try:
            return step(*args)
        except MessageRejected as exc:
            self._reject(exc.reason)
        except Exception as exc:  # a value no check foresaw: the datagram is bad, the receiver lives on
            log.debug("ingest datagram failed error=%r", exc)
            self._reject("malformed")
        return None

    def _reject(self, reason: str) -> None:
        with self._lock:
            self._rejected[reason] += 1

    def view(self) -> TableView:
        """Expire silent ranks and forgotten jobs, then copy the table."""
        now = self._clock()
        with self._lock:
            for key in [k for k, s in self._ranks.items() if s.exited_at is None and now - s.received_at > self._ttl]:
                self._expire(key, now)
            # A rank that ended through an error stays while its job has live ranks here: they likely wait for it
            # (the hang's `gone` class), and until the job's watchdog ends them it is the culprit.
            waiting = {k[0] for k, s in self._ranks.items() if s.exited_at is None}
            for key in [k for k, s in self._ranks.items()
                        if s.exited_at is not None and now - s.exited_at > self._exited_retention
                        and not (s.report.exit_reason == "error" and k[0] in waiting)]:
                self._remove(key)
            self._events.flush()
            for job_id in [j for j, t in self._job_gone_at.items() if now - t > self._exit_retention]:
                del self._job_gone_at[job_id]
                self._exits.forget(job_id)
                self._evicted["exit_retention"] += 1
            return TableView(
                ranks=tuple(self._ranks.values()),
                messages=self._messages,
                coalesced=self._coalesced,
                rejected=dict(self._rejected),
                evicted=dict(self._evicted),
                exits=self._exits.counts(),
                series=self._series,
                taken_at=now,
                dead=frozenset(k for k, s in self._ranks.items()
                               if s.exited_at is None and s.verified and not self._procfs.alive(s.process)),
            )

    def _apply(self, report: Report, sender_pid: int | None, sender_uid: int | None) -> None:
        if sender_pid:  # None over UDP, 0 from outside our pid namespace: no proof
            if report.pid != sender_pid and report.pid not in self._procfs.pids_of(sender_pid):
                raise MessageRejected("identity", f"pid {report.pid} sent by pid {sender_pid}")
            process, verified = sender_pid, True
        else:
            process, verified = report.pid, False
        key = (report.job_id, report.rank)
        now = self._clock()
        with self._lock:
            old = self._ranks.get(key)
            if old is not None and old.exited_at is not None:
                if old.report.incarnation == report.incarnation:
                    raise MessageRejected("stale", "after its goodbye")
                self._remove(key)  # a new incarnation: the exited one's final values have had their time
                old = None
            if old is not None and now - old.received_at > self._ttl:
                self._expire(key, now)
                old = None
            if old is not None:
                if old.owner_uid is not None and sender_uid != old.owner_uid:
                    raise MessageRejected("identity", f"slot held by uid {old.owner_uid}")
                self._check_successor(report, process, old)
            elif (live := self._live()) >= self._max_ranks and report.kind == "report":
                raise MessageRejected("max_ranks", f"{live} live ranks")
            if report.kind == "bye":
                self._messages += 1
                if old is not None:
                    self._remove(key)
                    self._keep_exited(key, report, old, now)
                    self._events.left(report.job_id, report.rank, report.exit_reason)
                self._count_exit(report.job_id, report.exit_reason, now, verified=old is not None and old.verified)
                return
            series = self._series_of(report)
            held = old.series if old is not None else 0
            if self._series - held + series > self._max_series:
                raise MessageRejected("series_budget", f"{self._series} + {series} series")
            self._messages += 1
            owner_uid = sender_uid if sender_pid == 0 else None  # no pid proof: the uid is the owner
            same = old is not None and old.report.incarnation == report.incarnation
            report, peaks = held_peaks(report, old.peaks if old is not None and same else (), now)
            stack, stack_wall = ((report.stack, time.time()) if report.stack else
                                 (old.stack, old.stack_wall) if old is not None and same else (None, None))
            self._ranks[key] = RankSlot(report, now, time.time(), process, verified, series, owner_uid, peaks,
                                        stack=stack, stack_wall=stack_wall)
            self._series += series - held
            if not same:
                self._events.arrived(report.job_id, report.rank, report.pid, report.world_size)
            self._job_gone_at.pop(report.job_id, None)

    def _keep_exited(self, key: RankKey, bye: Report, old: RankSlot, now: float) -> None:
        """Hold the goodbye's (final) values, marked exited, for `exited_retention`, where the series fit."""
        series = self._series_of(bye) + 1
        if not self._exited_retention or self._series + series > self._max_series:
            return
        same = old.report.incarnation == bye.incarnation
        bye, peaks = held_peaks(bye, old.peaks if same else (), now)
        self._ranks[key] = dataclasses.replace(old, report=bye, received_at=now, received_wall=time.time(),
                                               series=series, peaks=peaks, exited_at=now)
        self._series += series

    def _live(self) -> int:
        return sum(1 for slot in self._ranks.values() if slot.exited_at is None)

    def _check_successor(self, new: Report, process: int, old: RankSlot) -> None:
        """Raise unless `new`, sent by `process`, may replace `old`, the slot's live state."""
        held = old.report
        if process == old.process and new.start_time == held.start_time:
            if new.seq <= held.seq:
                raise MessageRejected("stale", f"seq {new.seq} after {held.seq}")
            if new.seq - held.seq > MAX_SEQ_STEP:
                raise MessageRejected("range", f"seq leaps from {held.seq} to {new.seq}")
            if (field := went_backwards(new, held)) is not None:
                raise MessageRejected("range", f"{field} went backwards")
            return
        if process != old.process and (new.kind == "bye" or (old.verified and self._procfs.alive(old.process))):
            raise MessageRejected("identity", f"slot held by pid {old.process}")
        if new.start_time < held.start_time:
            raise MessageRejected("stale", "an older incarnation")

    def _expire(self, key: RankKey, now: float) -> None:
        verified = self._ranks[key].verified
        self._remove(key)
        self._events.left(*key, "lost")
        self._evicted["ttl"] += 1
        self._count_exit(key[0], "lost", now, verified=verified)

    def _remove(self, key: RankKey) -> None:
        self._series -= self._ranks.pop(key).series

    def _count_exit(self, job_id: str, reason: str, now: float, *, verified: bool) -> None:
        if not any(k[0] == job_id and s.exited_at is None for k, s in self._ranks.items()):
            self._job_gone_at[job_id] = now
        for forgotten in self._exits.count(job_id, reason, verified=verified):
            self._job_gone_at.pop(forgotten, None)
            self._evicted["exit_job_ids"] += 1


class ExitHistory:
    """Exit counts by job id in two bounded tables, verified and not; a job moves to the verified one with
    its first verified exit. Not thread-safe: the RankTable's lock guards it."""

    def __init__(self) -> None:
        self._verified: OrderedDict[str, Counter[str]] = OrderedDict()
        self._unverified: OrderedDict[str, Counter[str]] = OrderedDict()

    def count(self, job_id: str, reason: str, *, verified: bool) -> list[str]:
        """Count one exit; returns the job ids forgotten to make room (oldest first)."""
        counts = self._verified.get(job_id)
        if counts is None:
            counts = self._unverified.pop(job_id, None) or Counter()
            (self._verified if verified else self._unverified)[job_id] = counts
        counts[reason] += 1
        table, cap = (self._verified, VERIFIED_EXIT_JOBS) if job_id in self._verified else (
            self._unverified, UNVERIFIED_EXIT_JOBS)
        table.move_to_end(job_id)
        return [table.popitem(last=False)[0] for _ in range(len(table) - cap)]

    def forget(self, job_id: str) -> None:
        self._verified.pop(job_id, None)
        self._unverified.pop(job_id, None)

    def counts(self) -> dict[tuple[str, str], int]:
        return {(job, reason): n for table in (self._verified, self._unverified) for job, reasons in table.items()
                for reason, n in reasons.items()}


def held_peaks(report: Report, peaks: tuple[Peak, ...], now: float) -> tuple[Report, tuple[Peak, ...]]:
    """`report` with its maxima raised to the largest of `peaks` still within PEAK_HOLD, and the peaks kept."""
    kept = (*(p for p in peaks if now - p[0] < PEAK_HOLD), (now, report.loss_max, report.grad_norm_max))
    if len(kept) > MAX_PEAKS:
        first, second = kept[0], kept[1]
        kept = ((second[0], _largest((first[1], second[1])), _largest((first[2], second[2]))), *kept[2:])
    loss_max = _largest(p[1] for p in kept)
    grad_norm_max = _largest(p[2] for p in kept)
    if (loss_max, grad_norm_max) != (report.loss_max, report.grad_norm_max):
        report = dataclasses.replace(report, loss_max=loss_max, grad_norm_max=grad_norm_max)
    return report, kept


def _largest(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _sender_process(msg: Mapping[str, object], sender_pid: int | None) -> SenderProcess | None:
    """The process a report comes from, if its identity fields are plain values; goodbyes are never coalesced."""
    job_id, rank, pid, start = msg.get("job_id"), msg.get("rank"), msg.get("pid"), msg.get("start_time")
    if msg.get("type") != "report" or type(job_id) is not str or type(rank) is not int:
        return None
    if type(pid) not in (int, type(None)) or type(start) not in (int, float, type(None)):
        return None
    return (job_id, rank, pid, start, sender_pid)
