"""Step timing: CPU clocks at step boundaries and, on CUDA, pooled event pairs read lazily.

`DeviceSpans` is the one place that turns CUDA events into seconds: a pair is kept until its end
event's `query()` says the GPU passed it, then `elapsed_time()` is read and the events go back to
the pool. Nothing here calls `synchronize()`. Both the training thread (at step ends) and the
reporter thread (before each report, so in-flight CUDA collectives complete while the training
thread is blocked) poll; one poll runs at a time.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from time import perf_counter

import torch

Sink = Callable[[float | None], None]  # seconds, or None for a span dropped unresolved
MAX_PENDING = 4096  # unresolved event pairs kept; beyond it the oldest is dropped (GPU far behind)


class DeviceSpans:
    """Event pairs on the current CUDA stream, resolved when the GPU has passed them."""

    def __init__(self) -> None:
        self._free: list[torch.cuda.Event] = []
        self._pending: deque[tuple[torch.cuda.Event, torch.cuda.Event, Sink]] = deque()
        self._lock = threading.Lock()
        self.dropped = 0

    def mark(self) -> torch.cuda.Event:
        try:
            event = self._free.pop()
        except IndexError:  # pool empty (callback threads mark too, so no check-then-pop)
            event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def close(self, start: torch.cuda.Event, sink: Sink) -> None:
        """Record the end of a span that began at `start`; `sink(seconds)` runs once it resolves."""
        if len(self._pending) >= MAX_PENDING:
            with self._lock:
                old_start, old_end, old_sink = self._pending.popleft()
                self._free += (old_start, old_end)
                self.dropped += 1
            old_sink(None)
        self._pending.append((start, self.mark(), sink))

    def poll(self) -> None:
        """Resolve finished spans in order; stop at the first the GPU has not reached."""
        if not self._lock.acquire(blocking=False):  # the other thread is polling
            return
        try:
            while self._pending and self._pending[0][1].query():
                start, end, sink = self._pending.popleft()
                sink(start.elapsed_time(end) / 1000.0)
                self._free += (start, end)
        finally:
            self._lock.release()


class StepTimer:
    """Times steps: CPU wall time, or on CUDA the GPU time between the step's two events."""

    def __init__(self, observe: Callable[[float], None]) -> None:
        self._observe = observe
        self._t0: float | None = None
        self._spans: DeviceSpans | None = None
        self._event: torch.cuda.Event | None = None

    def begin(self, spans: DeviceSpans | None) -> None:
        """Open a step; with `spans` (CUDA in use) it is timed on the GPU."""
        self._t0 = perf_counter()
        self._spans = spans
        self._event = spans.mark() if spans is not None else None

    def end(self) -> None:
        if self._t0 is None:
            return
        if self._spans is not None and self._event is not None:
            self._spans.close(self._event, self._observe_resolved)
        else:
            self._observe(perf_counter() - self._t0)
        self._t0 = self._event = None

    def _observe_resolved(self, seconds: float | None) -> None:
        if seconds is not None:
            self._observe(seconds)
