"""The `nccl_ras` collector: NCCL RAS's job-wide view, polled on the node's loopback and reduced per job.

Every `POLL_S` (60 s) a background thread connects to `--nccl-ras-addr` (NCCL's default
`localhost:28028`), speaks RAS's client protocol as NCCL's own `ncclras` does (`CLIENT PROTOCOL 2`,
answered `SERVER PROTOCOL <n>`; `SET FORMAT json`, answered `OK`; then `STATUS`, whose answer ends when
NCCL closes the connection), all within `DEADLINE_S`. `VERBOSE STATUS` is asked once per hang episode:
when some live rank the hook reports on this node is suspected of a hang (its report's `hang_suspected`),
or, from a hook that does not send it, has had a collective in flight for `HANG_SUSPECT_S`; at once rather
than at the next poll. An answer larger than `--nccl-ras-max-bytes` fails the collector, naming the cap,
until a poll fits (a poller that silently drops big answers sees nothing on exactly the big jobs).

The answer (parsers/nccl_ras.py) becomes a few series per job, found by the pids of the hook's ranks on
this node: never a series per rank per communicator. The ranks missing from the job's widest communicator
are named (`trainmon_nccl_ras_missing_rank_info`, at most 8 per kind), so that the hang rules can name a
dead rank whose node no longer reports.
"""

from __future__ import annotations

import concurrent.futures
import logging
import socket
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from trainmon.catalog import nccl_ras as catalog
from trainmon.collectors.base import Collection, NodeResources
from trainmon.collectors.nccl_owners import UNKNOWN_JOB, Owners, snapshot
from trainmon.errors import CollectorError, NoData
from trainmon.families import Metric, counter, gauge, info
from trainmon.gpu_inventory import GpuInventory
from trainmon.ingest.server import IngestServer
from trainmon.parsers.nccl_ras import ERROR_KINDS, MISSING_KINDS, AnswerError, RasSummary, reduce_answer
from trainmon.settings import Address, Settings

log = logging.getLogger(__name__)

POLL_S = 60.0
DEADLINE_S = 8.0
HANG_SUSPECT_S = 300.0  # the collective-hang alert's default threshold: the fallback without `hang_suspected`
CLIENT_PROTOCOL = 2
MAX_LINE = 4096  # a handshake answer is one short line


class PollFailed(Exception):
    """A poll that got no usable answer; `result` is its `polls_total` label."""

    def __init__(self, result: str, detail: str) -> None:
        super().__init__(detail)
        self.result = result


@dataclass(frozen=True, slots=True)
class Outcome:
    command: str
    summary: RasSummary | None
    result: str  # "ok" or PollFailed.result
    detail: str
    answer_bytes: int


class Connection:
    """One client connection, every read bounded by the poll's deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline
        self._buffer = b""

    def send(self, line: str) -> None:
        self._arm()
        self._sock.sendall(line.encode() + b"\n")

    def line(self) -> str:
        while b"\n" not in self._buffer:
            if len(self._buffer) > MAX_LINE:
                raise PollFailed("protocol", f"no line end in the first {MAX_LINE} bytes")
            self._buffer += self._recv("the handshake")
        head, _, self._buffer = self._buffer.partition(b"\n")
        return head.decode("utf-8", "replace").rstrip("\r")

    def rest(self, cap: int) -> bytes:
        """Everything until NCCL closes the connection, refusing more than `cap` bytes."""
        chunks, size = [self._buffer], len(self._buffer)
        while True:
            if size > cap:
                raise PollFailed("oversized", f"more than {cap} bytes")
            try:
                chunk = self._recv_once()
            except PollFailed as exc:
                raise PollFailed(exc.result, f"{exc} after {size} bytes of the answer") from None
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)

    def _recv(self, what: str) -> bytes:
        chunk = self._recv_once()
        if not chunk:
            raise PollFailed("closed", f"NCCL closed the connection during {what}")
        return chunk

    def _recv_once(self) -> bytes:
        self._arm()
        try:
            return self._sock.recv(65536)
        except TimeoutError:
            raise PollFailed("timeout", "no answer within the deadline") from None

    def _arm(self) -> None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise PollFailed("timeout", "no answer within the deadline")
        self._sock.settimeout(left)


def query(addr: Address, command: str, deadline_s: float, cap: int) -> bytes:
    """One RAS conversation: handshake, JSON format, `command`; its answer.

    Raises:
        PollFailed: refused, timed out, closed early, a handshake that is not RAS's, or an answer over `cap`.
    """
    deadline = time.monotonic() + deadline_s
    try:
        sock = socket.create_connection((addr.host, addr.port), timeout=deadline_s)
    except ConnectionRefusedError:
        raise PollFailed("refused", "connection refused (no NCCL process with RAS on this node?)") from None
    except TimeoutError:
        raise PollFailed("timeout", "connect timed out") from None
    except OSError as exc:
        raise PollFailed("refused", f"cannot connect: {exc.strerror or exc}") from None
    with sock:
        conn = Connection(sock, deadline)
        try:
            conn.send(f"CLIENT PROTOCOL {CLIENT_PROTOCOL}")
            if not conn.line().upper().startswith("SERVER PROTOCOL "):
                raise PollFailed("protocol", "the peer did not answer the RAS handshake")
            conn.send("SET FORMAT json")
            reply = conn.line()
            if reply.upper() != "OK":
                raise PollFailed("protocol", f"SET FORMAT json answered {reply[:80]!r} (NCCL older than 2.28.7?)")
            conn.send(command)
            answer = conn.rest(cap)
        except (ConnectionResetError, BrokenPipeError):
            raise PollFailed("closed", "NCCL reset the connection") from None
        if not answer:
            raise PollFailed("closed", f"NCCL closed the connection without answering {command}")
        return answer


def poll(addr: Address, command: str, deadline_s: float, cap: int) -> Outcome:
    try:
        answer = query(addr, command, deadline_s, cap)
        return Outcome(command, reduce_answer(answer.decode("utf-8", "replace")), "ok", "", len(answer))
    except PollFailed as exc:
        return Outcome(command, None, exc.result, str(exc), 0)
    except AnswerError as exc:
        return Outcome(command, None, "malformed", str(exc), 0)


class NcclRasCollector:
    name = "nccl_ras"

    def __init__(self, settings: Settings, resources: NodeResources, clock: Callable[[], float] = time.monotonic,
                 deadline_s: float = DEADLINE_S, poll_s: float = POLL_S) -> None:
        self._addr = settings.nccl_ras_addr
        self._cap = settings.nccl_ras_max_bytes
        self._ingest: IngestServer | None = resources.ingest
        self._inventory: GpuInventory = resources.gpus
        self._clock = clock
        self._deadline_s = deadline_s
        self._poll_s = poll_s
        # The first poll is waited for this long, so that `trainmon check` and the first scrape have an answer
        # (a local RAS answers in well under a second) without the cycle passing its own timeout.
        self._first_wait_s = settings.collector_timeout / 2
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="nccl-ras")
        self._inflight: concurrent.futures.Future[Outcome] | None = None
        self._started_at: float | None = None
        self._suspected = False
        self._last: Outcome | None = None
        self._last_job = ""
        self._polls: Counter[tuple[str, str]] = Counter()

    def collect(self) -> Collection:
        owners = snapshot(self._ingest, self._inventory)
        self._harvest()
        self._maybe_start(owners)
        if self._last is None and self._inflight is not None:
            concurrent.futures.wait([self._inflight], timeout=self._first_wait_s)
            self._harvest()
        last = self._last
        if last is None:
            raise NoData(f"no RAS answer yet from {self._addr}")
        families = self._families(last, owners)
        if last.result == "oversized":
            raise CollectorError(f"RAS answer from {self._addr} over the cap of {self._cap} bytes "
                                 f"(--nccl-ras-max-bytes): {last.detail}; raise the cap", tuple(families))
        return Collection(families=tuple(families), found=self._found(last),
                          skipped=() if last.result == "ok" else (f"RAS {self._addr}: {last.result}: {last.detail}",),
                          details={"addr": str(self._addr), "last_result": last.result,
                                   "answer_bytes": last.answer_bytes, "command": last.command})

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _harvest(self) -> None:
        if self._inflight is not None and self._inflight.done():
            outcome = self._inflight.result()
            self._inflight = None
            self._polls[(outcome.command, outcome.result)] += 1
            if outcome.result == "oversized":
                log.error("NCCL RAS answer over the cap addr=%s cap=%d (--nccl-ras-max-bytes)", self._addr, self._cap)
            self._last = outcome

    def _maybe_start(self, owners: Owners) -> None:
        suspect = owners.hang_suspected or owners.oldest_inflight >= HANG_SUSPECT_S
        verbose = suspect and not self._suspected
        now = self._clock()
        due = self._started_at is None or now - self._started_at >= self._poll_s
        if self._inflight is not None or not (due or verbose):
            return
        self._suspected = suspect
        command = "VERBOSE STATUS" if verbose else "STATUS"
        self._started_at = now
        self._inflight = self._executor.submit(poll, self._addr, command, self._deadline_s, self._cap)

    def _job(self, summary: RasSummary | None, owners: Owners) -> str:
        """The job the answer is about: the hook's rank among its pids; after a failed poll, the last job
        known, else the one job the hook reports on this node."""
        if summary is not None:
            jobs = sorted({owners.by_pid[p].job_id for p in summary.pids if p in owners.by_pid})
            self._last_job = jobs[0] if jobs else UNKNOWN_JOB
            return self._last_job
        local = sorted({o.job_id for o in owners.by_pid.values()})
        return self._last_job or (local[0] if len(local) == 1 else "")

    def _families(self, last: Outcome, owners: Owners) -> list[Metric]:
        job = self._job(last.summary, owners)
        up, polls = gauge(catalog.NCCL_RAS_UP), counter(catalog.NCCL_RAS_POLLS_TOTAL)
        for (command, result), n in sorted(self._polls.items()):
            polls.add_metric([command.lower().replace(" ", "_"), result], n)
        size = gauge(catalog.NCCL_RAS_ANSWER_BYTES)
        size.add_metric([], last.answer_bytes)
        out: list[Metric] = [up, polls, size]
        if job:
            up.add_metric([job], 1 if last.summary is not None else 0)
        if last.summary is None or not job:
            return out
        return [*out, *summary_families(job, last.summary)]

    def _found(self, last: Outcome) -> tuple[str, ...]:
        s = last.summary
        if s is None:
            return (f"RAS {self._addr}: {last.result} ({last.detail})",)
        return (f"RAS {self._addr}: NCCL {s.nccl_version}, {s.communicators} communicators, {s.ranks} processes, "
                f"missing {dict(s.missing)}, {s.mismatched} mismatched",)


def summary_families(job: str, s: RasSummary) -> list[Metric]:
    """What one answer says about `job`: missing ranks (counted, and the first named), errors, communicators."""
    missing = gauge(catalog.NCCL_RAS_MISSING_RANKS)
    for kind in MISSING_KINDS:
        missing.add_metric([job, kind], s.missing[kind])
    named = info(catalog.NCCL_RAS_MISSING_RANK_INFO)
    for m in s.named:
        named.add_metric([job, str(m.rank), m.kind, m.host], {})
    errors = gauge(catalog.NCCL_RAS_RANK_ERRORS)
    for kind in ERROR_KINDS:
        errors.add_metric([job, kind], s.errors[kind])
    comms = gauge(catalog.NCCL_RAS_COMMUNICATORS)
    comms.add_metric([job], s.communicators)
    mismatched = gauge(catalog.NCCL_RAS_COMMUNICATORS_MISMATCHED)
    mismatched.add_metric([job], s.mismatched)
    ranks = gauge(catalog.NCCL_RAS_PROCESSES)
    ranks.add_metric([job], s.ranks)
    version = info(catalog.NCCL_RAS_INFO)
    version.add_metric([job, s.nccl_version], {})
    return [missing, named, errors, comms, mismatched, ranks, version]


__all__ = ["NcclRasCollector", "PollFailed", "poll", "query"]
