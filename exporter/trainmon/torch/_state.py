"""The cumulative values of one rank, kept by the training thread and read by the sender.

Standard library only (the demo's simulated ranks use it without PyTorch). Writers are the
training thread; for collectives, framework callback threads too; and the reporter thread, which
before each report completes finished collectives and device spans and sets
`cuda_alloc_retries`, `cuda_ooms` and `hook_errors` (whole values, one assignment each). The
sender copies under the lock, so a report is never torn mid-update.

Every collective is issued into `open` (rank-wide: ticket -> its group, op and the `perf_counter`
of its issue) and completes into the `completions` queue; `settle` moves each completion into its
group's totals. A group's issued count is its completed count plus its open collectives, so the
report can say how old the oldest one is even while the training thread is blocked inside it.

Neither `issue` nor `complete` takes the lock or looks anything up: an uncontended `threading.Lock`
round costs more than the rest of a collective's bookkeeping (about 0.6 µs of a 3 µs budget), and
finding the group's numbers is left to `settle` too (`resolve`: the collectives' wrapper records
torch's group object as it was passed). `issue` is two atomic operations; `complete` one append;
`settle` adds the queue into the totals under the lock, before every read (`report` and the
properties), so any number a report carries already counts every completion queued before it and
counters never go backwards.
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

from trainmon.wire import FIELDS, MAX_GROUPS, OTHER_GROUP, STEP_BUCKETS, Collective, GroupSeq, Inflight, Report

MAX_PHASES = 8  # distinct phase names per rank; the rest are added up under OTHER_GROUP
MAX_UNSETTLED = 4096  # completions queued before the completing thread settles them itself


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
    pod: str = ""  # Kubernetes pod and namespace (_identity.kubernetes_pod)
    namespace: str = ""
    nccl_env: dict[str, str] = field(default_factory=dict)
    parallel: dict[str, int] = field(default_factory=dict)


# The wire fields a report takes from the sender (the rest come from `Identity` and `RankState`).
MESSAGE_FIELDS = frozenset({"kind", "pid", "seq", "sent_at"})
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

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.steps = 0
        self.samples = 0
        self.tokens = 0
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
        self.collective_totals: dict[tuple[str, str], list[float]] = {}  # (op, group) -> [seconds, calls, bytes]
        self.group_sizes: dict[str, int] = {}
        self.groups: dict[str, GroupSeqs] = {}
        self.exit_reason = "clean"
        self.loss_scale: float | None = None
        self.skipped_steps = 0
        self.loss: float | None = None
        self.grad_norm: float | None = None
        self.nonfinite_losses = 0
        self.cuda_alloc_retries: int | None = None
        self.cuda_ooms: int | None = None
        self.hook_errors: dict[str, int] = {}
        # Collectives issued and not settled yet: ticket -> (group key, op, perf_counter at issue), in issue
        # order. A group key is a `GroupSeqs`, or anything `resolve` turns into one (None: not counted).
        self.open: dict[int, tuple[object, str, float]] = {}
        self.tickets = itertools.count(1)
        self.resolve: Callable[[object], GroupSeqs | None] = no_group
        # (group key, ticket, op, bytes, seconds, blocked) of completions `settle` has not added yet
        self.completions: collections.deque[tuple[object, int, str, int, float, float]] = collections.deque()
        self.group_seqs: tuple[GroupSeq, ...] = ()  # as of the last report (`_settle_sequences`)
        self.inflight: tuple[Inflight, ...] = ()

    @property
    def phase(self) -> str | None:
        """The open phase (the innermost one), or None."""
        return self._phase

    @phase.setter
    def phase(self, name: str | None) -> None:
        """Setting it adds the time so far to the phase being left: time counts for one phase at once."""
        now = perf_counter()
        if self._phase is not None:
            self._add_phase_time(self._phase, now - self._phase_since)
        self._phase, self._phase_since = name, now

    def _add_phase_time(self, name: str, seconds: float) -> None:
        closed = self._closed_phase_seconds
        if name not in closed and len(closed) >= MAX_PHASES:
            name = OTHER_GROUP
        closed[name] = closed.get(name, 0.0) + seconds

    @property
    def phase_seconds(self) -> dict[str, float]:
        """Cumulative phase time, the open phase's time so far included (a long checkpoint shows as it runs)."""
        totals = dict(self._closed_phase_seconds)
        if self._phase is not None:
            name = self._phase if self._phase in totals or len(totals) < MAX_PHASES else OTHER_GROUP
            totals[name] = totals.get(name, 0.0) + perf_counter() - self._phase_since
        return totals

    def add_flops(self, flops: float) -> None:
        self.model_flops = (self.model_flops or 0.0) + flops

    def finish_step(self, samples: int, tokens: int) -> None:
        self.steps += 1
        self.samples += samples
        self.tokens += tokens
        self.last_step = time.time()

    def observe_step_seconds(self, seconds: float) -> None:
        self.bucket_counts[bisect.bisect_left(STEP_BUCKETS, seconds)] += 1
        self.step_seconds_sum += seconds

    def set_loss(self, loss: float) -> None:
        self.loss = loss
        if not math.isfinite(loss):
            self.nonfinite_losses += 1

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

    def issue(self, group: object, op: str, t0: float) -> int:
        """A collective of `group` (a key `settle` resolves) issued at `perf_counter` time `t0`: its ticket,
        open until its completion is settled."""
        n = next(self.tickets)
        self.open[n] = (group, op, t0)
        return n

    def complete(self, group: object, n: int, op: str, nbytes: int, seconds: float, blocked: float) -> None:
        """Collective `n` of `group` completed: one call of `nbytes`, `seconds` long, `blocked` of it exposed.

        The hot path of every collective: queued, no lock; `settle` adds it up and closes it.
        """
        completions = self.completions
        completions.append((group, n, op, nbytes, seconds, blocked))
        if len(completions) > MAX_UNSETTLED:  # nobody has read for a while (no reporter yet)
            self.settle()

    def settle(self) -> None:
        """Add the queued completions into the totals."""
        with self.lock:
            self._settle()

    def _group_of(self, key: object) -> GroupSeqs | None:
        return key if type(key) is GroupSeqs else self.resolve(key)

    def _settle(self) -> set[int]:
        """Under the lock, so one thread at a time takes from the queue while others append to it.

        Returns the tickets of the completions it added (those of groups `resolve` does not count too).
        """
        completions, opened, settled = self.completions, self.open, set()
        while completions:
            key, n, op, nbytes, seconds, blocked = completions.popleft()
            opened.pop(n, None)
            settled.add(n)
            seqs = self._group_of(key)
            if seqs is None:
                continue
            seqs.completed += 1
            entry = seqs.totals.get(op) or self._entry(seqs, op)
            entry[0] += seconds
            entry[1] += 1
            entry[2] += nbytes
            self.comm_wait += blocked
        return settled

    def _entry(self, seqs: GroupSeqs, op: str) -> list[float]:
        seqs.totals[op] = self.collective_totals.setdefault((op, seqs.label), [0.0, 0, 0])
        return seqs.totals[op]

    def _settle_sequences(self) -> None:
        """Under the lock: settle, and set `group_seqs` and `inflight` (oldest per group, as Unix time).

        Each collective counts once: the open ones are taken before settling, and those the settling
        completes are left out of them, so one that completes meanwhile is not lost between the queue
        and `open`.
        """
        offset = time.time() - perf_counter()
        before = self.open.copy()  # a C copy that runs no Python (unlike list(items()), which may run the GC)
        settled = self._settle()
        pending: dict[GroupSeqs, int] = {}
        oldest: dict[GroupSeqs, tuple[float, str]] = {}
        for n, (key, op, t0) in before.items():
            seqs = None if n in settled else self._group_of(key)
            if seqs is not None:
                pending[seqs] = pending.get(seqs, 0) + 1
                oldest.setdefault(seqs, (t0, op))  # `open` is in issue order
        groups = list(self.groups.copy().values())
        self.group_seqs = tuple(GroupSeq(group=g.label, issued=g.completed + pending.get(g, 0), completed=g.completed)
                                for g in groups)
        self.inflight = tuple(Inflight(group=g.label, op=oldest[g][1], since=oldest[g][0] + offset)
                              for g in groups if g in oldest)

    @property
    def collectives(self) -> tuple[Collective, ...]:
        return tuple(Collective(op=op, group=group, seconds=v[0], calls=int(v[1]), bytes=int(v[2]))
                     for (op, group), v in self.collective_totals.items())

    @property
    def step_buckets(self) -> tuple[int, ...]:
        return tuple(itertools.accumulate(self.bucket_counts))

    def report(self, identity: Identity, *, seq: int, kind: str = "report") -> Report:
        """The report of this process now; `pid` is the caller's real one (a forked child's is its own)."""
        with self.lock:
            self._settle_sequences()
            # Any: each of the type `Report` declares for it, as this state holds it.
            values: dict[str, Any] = {name: _copy(getattr(self, name)) for name in STATE_FIELDS}
        values.update((name, _copy(getattr(identity, name))) for name in IDENTITY_FIELDS)
        return Report(kind=kind, pid=os.getpid(), seq=seq, sent_at=time.time(), **values)


def _copy(value: object) -> object:
    """Maps are copied so that the report does not change under the sender."""
    return dict(value) if isinstance(value, dict) else value
