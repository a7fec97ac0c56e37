"""The cumulative values of one rank, kept by the training thread and read by the sender.

Standard library only (the demo's simulated ranks use it without PyTorch). Writers are the
training thread; for collectives, framework callback threads too; and the reporter thread, which
before each report completes finished collectives and device spans and sets
`cuda_alloc_retries`, `cuda_ooms` and `hook_errors` (whole values, one assignment each). The
sender copies under the lock, so a report is never torn mid-update.

Every collective is an `OpenCollective` entry, appended to the rank-wide `open` queue when it is
issued and completed in place (its seconds set); `settle`, under the lock, takes the queue, adds
each completed entry into its group's totals and keeps the others as still in flight. A group's
issued count is its completed count plus its entries in flight, so the report can say how old the
oldest one is even while the training thread is blocked inside it.

Neither `issue` nor `complete` takes the lock, allocates more than the entry or looks anything up:
an uncontended `threading.Lock` round costs more than the rest of a collective's bookkeeping (about
0.6 µs of a 3 µs budget), and finding the group's numbers is left to `settle` too (`resolve`: the
collectives' wrapper records torch's group object as it was passed). `issue` is one append;
`complete` two stores into the entry, `blocked` before `seconds`, so an entry whose seconds `settle`
sees is whole. A collective completed without a time of its own (`UNTIMED`: an async NCCL call without
the backend's timing, a span CUDA could not read) adds its call and bytes and no time: never a 0 s.
`settle` runs before every read (`report` and the properties), so any number a report carries counts
every completion before it, and counters never go backwards.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from time import perf_counter
from typing import Any

from trainmon.hook.numerics import SpikeCounter, SpikeRules
from trainmon.wire import (
    FIELDS,
    MAX_GROUPS,
    MAX_PHASES,
    OTHER_GROUP,
    OTHER_PHASE,
    STEP_BUCKETS,
    Collective,
    GroupSeq,
    Inflight,
    Report,
    UntimedCalls,
)

MAX_UNSETTLED = 4096  # entries queued before the issuing thread settles them itself

# An open collective, a list for the hot path's sake (the cheapest object to make and fill):
# [group key, op, bytes, perf_counter at issue, seconds (None while in flight), blocked seconds], and for
# a coalesced operation (one sequence number for many calls) a seventh item: its calls, `CoalescedCalls`.
OpenCollective = list[Any]
KEY, OP, BYTES, ISSUED_AT, SECONDS, BLOCKED, CALLS = range(7)
UNTIMED = math.nan  # the seconds of a completed collective whose own time is unknown (NaN != NaN)
CoalescedCalls = tuple[tuple[str, int, int], ...]  # (op, calls, bytes) per op inside one coalesced operation
# perf_counter time + this = Unix time. Taken once per process: re-read per report, a preemption between
# the two clock reads would move an in-flight collective's `since` from one report to the next.
WALL_MINUS_PERF_COUNTER = time.time() - perf_counter()


@dataclass(kw_only=True)
class Identity:
    """What the rank is; fields the monitor learns later (framework, scaler) are updated in place."""

    job_id: str
    rank: int
    pid: int
    start_time: float
    local_rank: int | None = None
    world_size: int | None = None
    uuid: str = ""
    backend: str = ""
    framework: str = "torch"
    loss_scaler: str = "none"
    pipeline_stage: int | None = None  # given to the monitor, or Megatron's pipeline rank
    pod: str = ""  # Kubernetes pod and namespace (_identity.kubernetes_pod)
    namespace: str = ""
    nccl_env: dict[str, str] = field(default_factory=dict)
    parallel: dict[str, int] = field(default_factory=dict)


# The wire fields a report takes from the sender, and those the reporter thread marks on it (`_hang.HangWatch`);
# the rest come from `Identity` and `RankState`.
MESSAGE_FIELDS = frozenset({"kind", "pid", "seq", "sent_at", "hang_suspected", "stack"})
IDENTITY_FIELDS = frozenset(f.name for f in fields(Identity)) - MESSAGE_FIELDS
STATE_FIELDS = tuple(f.attr for f in FIELDS if f.attr not in MESSAGE_FIELDS | IDENTITY_FIELDS)


class GroupSeqs:
    """One process group's completed count and its per-op totals, kept by `settle`."""

    __slots__ = ("completed", "label", "totals")

    def __init__(self, label: str) -> None:
        self.label = label
        self.completed = 0
        self.totals: dict[str, list[float]] = {}  # op -> the (op, label) entry of RankState.collectives


def no_group(key: object) -> GroupSeqs | None:
    """The default `RankState.resolve`: a caller that issues with `GroupSeqs` keys needs none, and any
    other key is not counted."""
    return None


class RankState:
    """Counters since the process started; every method is cheap and never blocks.

    Each attribute named in `STATE_FIELDS` (the wire schema's per-rank values) is read by `report()`;
    a new wire field is a new attribute here with the same name.
    """

    def __init__(self, spike_rules: SpikeRules | None = None) -> None:
        self.lock = threading.Lock()
        self.steps = 0
        self.samples = 0
        self.tokens = 0
        self.microbatches: int | None = None  # None until a step says how many it ran
        self.bucket_counts = [0] * (len(STEP_BUCKETS) + 1)
        self.step_seconds_sum = 0.0
        self.last_step: float | None = None
        self.first_step: float | None = None
        self._phase: str | None = None
        self._phase_since = 0.0
        self._closed_phase_seconds: dict[str, float] = {}
        self.comm_wait = 0.0
        self.data_wait = 0.0
        self.model_flops: float | None = None
        # (op, group) -> [seconds, calls, bytes, calls without a time]
        self.collective_totals: dict[tuple[str, str], list[float]] = {}
        self.group_sizes: dict[str, int] = {}
        self.groups: dict[str, GroupSeqs] = {}
        self.exit_reason = "clean"
        self.loss_scale: float | None = None
        self.skipped_steps = 0
        # The loss and grad norm of each step (`step_end` observes them); the maxima are since the previous report.
        rules = spike_rules or SpikeRules()
        self.losses = SpikeCounter(rules.loss_factor, rules, median=False)
        self.grad_norms = SpikeCounter(rules.grad_norm_factor, rules, median=True)
        self.cuda_alloc_retries: int | None = None
        self.cuda_ooms: int | None = None
        self.hook_errors: dict[str, int] = {}
        self.job_gauges: dict[str, float] = {}  # set by a framework's driver integration (trainmon.integrations)
        # Collectives issued since the last settle, in issue order; their group key is a `GroupSeqs`, or
        # anything `resolve` turns into one (None: not counted). Appended by any thread, taken by `settle`.
        self.open: collections.deque[OpenCollective] = collections.deque()
        self.resolve: Callable[[object], GroupSeqs | None] = no_group
        self._in_flight: list[OpenCollective] = []  # settle's: entries it found not completed, in issue order
        self.group_seqs: tuple[GroupSeq, ...] = ()  # as of the last report (`_settle_sequences`)
        self.inflight: tuple[Inflight, ...] = ()
        self.inflight_age: dict[str, float] = {}
        self.pg_timeouts: dict[str, float] = {}  # group label -> timeout seconds, set as groups are found
        self.collectives_captured = 0  # set by the monitor before each report
        self.group_ranks: dict[str, str] = {}  # group label -> its global ranks (`rank_ranges`)

    @property
    def phase(self) -> str | None:
        """The open phase (the innermost one), or None."""
        return self._phase

    @phase.setter
    def phase(self, name: str | None) -> None:
        """Setting it adds the time so far to the phase being left: time counts for one phase at once."""
        now = perf_counter()
        if self._phase is not None:
            self.add_phase_time(self._phase, now - self._phase_since)
        self._phase, self._phase_since = name, now

    @property
    def progress_at(self) -> float | None:
        """Unix time of the rank's last progress: its last step, or entering or leaving a phase after it;
        None before its first step."""
        if self.last_step is None:
            return None
        return max(self.last_step, self._phase_since + WALL_MINUS_PERF_COUNTER)

    def add_phase_time(self, name: str, seconds: float) -> None:
        """Time spent in a phase, as a framework timed it (also what leaving a phase adds)."""
        closed = self._closed_phase_seconds
        if name not in closed and len(closed) >= MAX_PHASES:
            name = OTHER_PHASE
        closed[name] = closed.get(name, 0.0) + seconds

    @property
    def phase_seconds(self) -> dict[str, float]:
        """Cumulative phase time, the open phase's time so far included (a long checkpoint shows as it runs)."""
        totals = dict(self._closed_phase_seconds)
        if self._phase is not None:
            name = self._phase if self._phase in totals or len(totals) < MAX_PHASES else OTHER_PHASE
            totals[name] = totals.get(name, 0.0) + perf_counter() - self._phase_since
        return totals

    def add_flops(self, flops: float) -> None:
        self.model_flops = (self.model_flops or 0.0) + flops

    def finish_step(self, samples: int, tokens: int, microbatches: int = 0) -> None:
        self.steps += 1
        self.samples += samples
        self.tokens += tokens
        if microbatches:
            self.microbatches = (self.microbatches or 0) + microbatches
        self.last_step = time.time()

    def observe_step_seconds(self, seconds: float) -> None:
        self.bucket_counts[bisect.bisect_left(STEP_BUCKETS, seconds)] += 1
        self.step_seconds_sum += seconds

    def set_loss(self, loss: float) -> None:
        self.losses.observe(loss)

    def set_grad_norm(self, grad_norm: float) -> None:
        self.grad_norms.observe(grad_norm)

    @property
    def loss(self) -> float | None:
        return self.losses.last

    @property
    def grad_norm(self) -> float | None:
        return self.grad_norms.last

    @grad_norm.setter
    def grad_norm(self, value: float) -> None:
        self.grad_norms.last = value

    @property
    def nonfinite_losses(self) -> int:
        return self.losses.nonfinite

    @property
    def loss_max(self) -> float | None:
        return self.losses.peak

    @property
    def grad_norm_max(self) -> float | None:
        return self.grad_norms.peak

    @property
    def loss_spikes(self) -> int:
        return self.losses.spikes

    @property
    def grad_norm_spikes(self) -> int:
        return self.grad_norms.spikes

    def group_label(self, label: str, size: int) -> str:
        """`label`, or `other` once `MAX_GROUPS` distinct groups are known; records its size."""
        if label not in self.group_sizes and len(self.group_sizes) >= MAX_GROUPS:
            label = OTHER_GROUP
        self.group_sizes.setdefault(label, size)
        return label

    def sequences(self, label: str) -> GroupSeqs:
        """The sequence numbers of the group called `label` (from `group_label`)."""
        seqs = self.groups.get(label)
        if seqs is None:
            seqs = self.groups.setdefault(label, GroupSeqs(label))
        return seqs

    def issue(self, group: object, op: str, t0: float, nbytes: int = 0) -> OpenCollective:
        """A collective of `group` (a key `settle` resolves) on `nbytes`, issued at `perf_counter` time `t0`:
        its entry, in flight until `complete`."""
        if len(self.open) >= MAX_UNSETTLED:  # nobody has read for a while (no reporter yet)
            self.settle()
        entry = [group, op, nbytes, t0, None, 0.0]
        self.open.append(entry)
        return entry

    @staticmethod
    def complete(entry: OpenCollective, seconds: float, blocked: float) -> None:
        """The collective of `entry` completed, `seconds` long, `blocked` of it exposed; `settle` adds it up."""
        entry[BLOCKED] = blocked
        entry[SECONDS] = seconds

    def settle(self) -> None:
        """Add the completed entries into the totals."""
        with self.lock:
            self._settle()

    def _group_of(self, key: object) -> GroupSeqs | None:
        return key if type(key) is GroupSeqs else self.resolve(key)

    def _settle(self) -> None:
        """Under the lock, so one thread at a time takes from the queue while others append to it."""
        opened, in_flight = self.open, []
        for entry in self._in_flight + [opened.popleft() for _ in range(len(opened))]:
            seconds = entry[SECONDS]
            if seconds is None:
                in_flight.append(entry)
                continue
            seqs = self._group_of(entry[KEY])
            if seqs is None:
                continue
            seqs.completed += 1
            if len(entry) > CALLS:
                self._add_coalesced(seqs, entry[CALLS], seconds, entry[BYTES])
            else:
                totals = seqs.totals.get(entry[OP]) or self._entry(seqs, entry[OP])
                if seconds == seconds:  # not UNTIMED
                    totals[0] += seconds
                else:
                    totals[3] += 1
                totals[1] += 1
                totals[2] += entry[BYTES]
            self.comm_wait += entry[BLOCKED]
        self._in_flight = in_flight

    def _add_coalesced(self, seqs: GroupSeqs, calls: CoalescedCalls, seconds: float, nbytes: int) -> None:
        """One coalesced operation: each op its calls and bytes, and its share of the time by bytes
        (by calls where nothing has bytes)."""
        count = sum(n for _, n, _ in calls)
        for op, n, op_bytes in calls:
            totals = seqs.totals.get(op) or self._entry(seqs, op)
            if seconds == seconds:  # not UNTIMED
                totals[0] += seconds * (op_bytes / nbytes if nbytes else n / count)
            else:
                totals[3] += n
            totals[1] += n
            totals[2] += op_bytes

    def _entry(self, seqs: GroupSeqs, op: str) -> list[float]:
        seqs.totals[op] = self.collective_totals.setdefault((op, seqs.label), [0.0, 0, 0, 0])
        return seqs.totals[op]

    def _settle_sequences(self) -> None:
        """Under the lock: settle, and set `group_seqs`, `inflight` (oldest per group, issued when as Unix time)
        and `inflight_age` (its age now on the monotonic clock, which no step of the wall clock moves)."""
        self._settle()
        pending: dict[GroupSeqs, int] = {}
        oldest: dict[GroupSeqs, tuple[float, str]] = {}
        for entry in self._in_flight:
            seqs = self._group_of(entry[KEY])
            if seqs is not None:
                pending[seqs] = pending.get(seqs, 0) + 1
                oldest.setdefault(seqs, (entry[ISSUED_AT], entry[OP]))  # in issue order
        groups = list(self.groups.copy().values())
        self.group_seqs = tuple(GroupSeq(group=g.label, issued=g.completed + pending.get(g, 0), completed=g.completed)
                                for g in groups)
        self.inflight = tuple(Inflight(group=g.label, op=oldest[g][1], since=oldest[g][0] + WALL_MINUS_PERF_COUNTER)
                              for g in groups if g in oldest)
        now = perf_counter()
        self.inflight_age = {g.label: max(0.0, now - oldest[g][0]) for g in groups if g in oldest}

    @property
    def collectives(self) -> tuple[Collective, ...]:
        return tuple(Collective(op=op, group=group, seconds=v[0], calls=int(v[1]), bytes=int(v[2]))
                     for (op, group), v in self.collective_totals.items())

    @property
    def collectives_untimed(self) -> tuple[UntimedCalls, ...]:
        return tuple(UntimedCalls(op=op, group=group, calls=int(v[3]))
                     for (op, group), v in self.collective_totals.items() if v[3])

    @property
    def step_buckets(self) -> tuple[int, ...]:
        return tuple(itertools.accumulate(self.bucket_counts))

    def report(self, identity: Identity, *, seq: int, kind: str = "report") -> Report:
        """The report of this process now; `pid` is the caller's real one (a forked child's is its own)."""
        with self.lock:
            self._settle_sequences()
            # Any: each of the type `Report` declares for it, as this state holds it.
            values: dict[str, Any] = {name: _copy(getattr(self, name)) for name in STATE_FIELDS}
            # the maxima since the previous report, read and cleared at once
            values.update(loss_max=self.losses.take_peak(), grad_norm_max=self.grad_norms.take_peak())
        values.update((name, _copy(getattr(identity, name))) for name in IDENTITY_FIELDS)
        return Report(kind=kind, pid=os.getpid(), seq=seq, sent_at=time.time(), **values)


def _copy(value: object) -> object:
    """Maps are copied so that the report does not change under the sender."""
    return dict(value) if isinstance(value, dict) else value
