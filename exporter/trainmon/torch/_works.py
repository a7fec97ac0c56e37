"""Completing collectives: async works until someone sees them done, and CUDA calls through their event pairs.

`Work.wait`/`is_completed` are patched on the class, so whoever first sees an async work done (a `wait()`
or `is_completed()`, or `poll` at the step end and before every report) completes and times it. `wait` is
only patched while async works may be pending: every blocking collective waits on its own `Work` too, and
a pass-through frame there is one more Python call each.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from trainmon.hook.state import BLOCKED, ISSUED_AT, SECONDS, UNTIMED, OpenCollective, RankState
from trainmon.torch._timing import DeviceSpans, capturing

MAX_PENDING_WORKS = 1024
# A CUDA call's marker where no start event was recorded: an async call (its wait gets its own pair).
NO_START = "async"
# What torch returns from an async call inside a coalescing manager: a placeholder that never completes.
ILLEGAL_WORK: type | None = getattr(distributed_c10d, "_IllegalWork", None)


class Captured(Exception):
    """A CUDA collective issued while the current stream captures a CUDA graph: counted once, not issued."""


@dataclass(slots=True)
class Tally:
    """What every mechanism counts for the hook's own health: its errors, and the calls a CUDA graph captured."""

    errors: int = 0
    captured: int = 0


class WorkEnd:
    """When a coalesced CPU work completed, stamped by its future's callback on the thread that completes
    it (gloo's worker, just before it wakes the waiting thread): the training thread sees it complete
    later, by its own wake-up (milliseconds on busy cores) and, overlapped, by when it next looks."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at: float | None = None

    def __call__(self, _future: object) -> None:
        self.at = perf_counter()

    def seconds(self, issued_at: float, now: float) -> float:
        """Issue to completion: to this stamp, or to `now` where there is none (a future-less backend)."""
        return (now if self.at is None else min(self.at, now)) - issued_at


# (work or future, its entry, CUDA start event or a coalesced CPU work's end)
# (NO_START: an async CUDA call, whose wait gets its own pair)
Pending = tuple[Any, OpenCollective, "torch.cuda.Event | WorkEnd | str | None"]
ClassPatch = tuple[type, str, Any]  # (class, method name, torch's method)


class Completions:
    """Completes the collectives the wrappers, the coalescing manager and the DDP hook issue."""

    def __init__(self, state: RankState, spans: DeviceSpans | None, tally: Tally, *, nccl_timing: bool) -> None:
        """`nccl_timing`: the user opted in to the backend's own duration of async collectives (each group's
        `_enable_collectives_timing()`, read with `Work._get_duration()` at completion)."""
        self.state = state
        self.spans = spans
        self.tally = tally
        self.nccl_timing = nccl_timing
        self.pending: dict[int, Pending] = {}  # async works not yet seen complete, by id; popping one claims it
        self.waits: tuple[Any, Any] = (None, None)  # Work.wait: (torch's, ours)

    def cuda_start(self, async_call: bool) -> torch.cuda.Event | str:
        """A CUDA collective's marker: `NO_START` for an async call, else the start event of its pair.

        Raises:
            Captured: the current stream captures a CUDA graph (the call is counted once, as captured).
        """
        if capturing():
            self.tally.captured += 1
            raise Captured
        if async_call or self.spans is None:
            return NO_START
        return self.spans.mark()

    def patch_work(self) -> list[ClassPatch]:
        """Patch `Work.is_completed`, and make the `Work.wait` that `intercept` sets; return torch's methods.

        `wait` completes our pending works; other works pass straight through."""
        pending, finish, cuda_wait = self.pending, self.finish, self._cuda_wait
        original_wait, original_completed = dist.Work.wait, dist.Work.is_completed

        @functools.wraps(original_wait)
        def wait(work: Any, timeout: Any = None) -> Any:  # positional: the pass-through stays cheap
            entry = pending.pop(id(work), None) if pending else None  # popping claims it
            if entry is None:
                return original_wait(work) if timeout is None else original_wait(work, timeout)
            if entry[2] is not None and type(entry[2]) is not WorkEnd:  # CUDA: the stream's stall
                return cuda_wait(original_wait, work, timeout, entry[1])
            t = perf_counter()
            try:
                result = original_wait(work) if timeout is None else original_wait(work, timeout)
            finally:  # a wait that raised (timeout, peer gone) ends the collective too
                now = perf_counter()
                if entry[2] is None:  # CPU, `RankState.complete` inlined: this is the async hot path
                    collective = entry[1]
                    collective[BLOCKED] = now - t
                    collective[SECONDS] = now - collective[ISSUED_AT]
                else:
                    finish(entry, now, t)
            return result

        @functools.wraps(original_completed)
        def is_completed(work: Any) -> bool:
            done = original_completed(work)
            if done and pending:
                entry = pending.pop(id(work), None)
                if entry is not None:
                    finish(entry, perf_counter(), None)
            return bool(done)

        self.waits = (original_wait, wait)
        dist.Work.is_completed = is_completed  # type: ignore[method-assign,assignment]  # on the class: Work has no __dict__
        return [(dist.Work, "wait", original_wait), (dist.Work, "is_completed", original_completed)]

    def intercept(self, on: bool) -> None:
        """Patch `Work.wait` (an async work is pending) or restore it (none is, at the step end).

        A framework thread issuing an async call while the training thread ends its step can leave it
        restored with a work pending: `poll` still completes that one, without its exposed wait."""
        original, patched = self.waits
        dist.Work.wait = patched if on else original  # type: ignore[method-assign]

    def await_later(self, work: Any, entry: OpenCollective, end: torch.cuda.Event | WorkEnd | str | None) -> None:
        """An async work to complete when it is seen done."""
        self.pending[id(work)] = (work, entry, end)
        if dist.Work.wait is not self.waits[1]:
            self.intercept(True)

    def _cuda_wait(self, original_wait: Callable[..., Any], work: Any, timeout: Any,
                   collective: OpenCollective) -> Any:
        """torch's `wait()` between two events on the current stream: on NCCL it makes the stream wait for the
        collective, so the pair's GPU time is the stall, whatever ran between issue and wait."""
        before = None
        try:
            if self.spans is not None and not capturing():
                before = self.spans.mark()
        except Exception:
            self.tally.errors += 1
        try:
            return original_wait(work) if timeout is None else original_wait(work, timeout)
        finally:  # a wait that raised (timeout, peer gone) ends the collective too
            self._stalled(work, collective, before)

    def _stalled(self, work: Any, collective: OpenCollective, before: torch.cuda.Event | None) -> None:
        """Close the stall's pair; the collective completes when the GPU has passed it, with the backend's time."""
        complete = self.state.complete
        try:
            if before is None or self.spans is None:
                complete(collective, self._duration(work), 0.0)
            else:
                self.spans.close(before, lambda stall: complete(collective, self._duration(work), stall or 0.0))
        except Exception:  # never in flight for ever
            self.tally.errors += 1
            complete(collective, UNTIMED, 0.0)

    def _duration(self, work: Any) -> float:
        """A completed work's own time from the backend (`Work._get_duration()`: NCCL with timing enabled), or
        `UNTIMED`: not opted in, gloo ("doesn't support getDuration"), a work issued before its group's timing
        was enabled."""
        if self.nccl_timing:
            try:
                return float(work._get_duration()) / 1000.0
            except Exception:  # a backend that cannot say: counted without a time
                return UNTIMED
        return UNTIMED

    def finished(self, result: Any, entry: OpenCollective, event: torch.cuda.Event | str | None) -> None:
        """After a call that returned neither a `Work` nor a `Future`: on CUDA, or on the CPU with a result."""
        try:
            if event is None:  # a blocking call that returned something
                entry[BLOCKED] = entry[SECONDS] = perf_counter() - entry[ISSUED_AT]
            elif isinstance(event, str) or self.spans is None:  # CUDA, said async but nothing to wait on
                self.state.complete(entry, UNTIMED, 0.0)
            else:
                self._close_blocking(self.spans, event, entry)
        except Exception:
            self.tally.errors += 1
            self.state.complete(entry, UNTIMED, 0.0)

    def _close_blocking(self, spans: DeviceSpans, start: torch.cuda.Event, entry: OpenCollective) -> None:
        """A blocking CUDA call ran on the current stream (sync NCCL): its pair is its own time, and the step's
        stall only where that stream is the step's; on a side stream (FSDP2's all-gathers) it overlaps."""
        exposed = spans.on_step_stream()
        complete = self.state.complete

        def resolved(seconds: float | None) -> None:
            if seconds is None:
                complete(entry, UNTIMED, 0.0)
            else:
                complete(entry, seconds, seconds if exposed else 0.0)

        spans.close(start, resolved)

    def finish(self, entry: Pending, now: float, blocked_since: float | None) -> None:
        """Complete a claimed async collective seen done: CPU timed at once; CUDA (done on the GPU, as
        `is_completed()` said) with the backend's time, never the 0 s of "seen before its wait"."""
        work, collective, event = entry
        complete = self.state.complete
        try:
            if event is None or isinstance(event, WorkEnd):
                issued = collective[ISSUED_AT]
                seconds = now - issued if event is None else event.seconds(issued, now)
                complete(collective, seconds, now - blocked_since if blocked_since is not None else 0.0)
            else:
                complete(collective, self._duration(work), 0.0)
        except Exception:
            self.tally.errors += 1
            complete(collective, UNTIMED, 0.0)

    def forget(self, key: int) -> None:
        entry = self.pending.pop(key, None)
        if entry is not None:
            self.state.complete(entry[1], UNTIMED, 0.0)

    def poll(self, *, step_end: bool = False) -> None:
        """Complete async collectives that finished without anyone asking (step end, and before each report).

        At the step end (the training thread) with none pending, torch's `Work.wait` comes back."""
        if not self.pending:
            if step_end and dist.Work.wait is self.waits[1]:
                self.intercept(False)
            return
        for key, entry in self.pending.copy().items():  # a C copy that runs no Python: safe against other threads
            try:
                work = entry[0]
                if type(work) is ILLEGAL_WORK:  # from a coalescing manager we did not wrap: it never completes
                    self.forget(key)
                    continue
                future = isinstance(work, torch._C.Future)
                done = work.done() if future else dist.Work.is_completed(work)  # a Work completes itself
            except Exception:  # a work that cannot say: stop tracking it rather than call it in flight forever
                self.tally.errors += 1
                self.forget(key)
                continue
            if done and future:
                claimed = self.pending.pop(key, None)
                if claimed is not None:
                    self.finish(claimed, perf_counter(), None)
