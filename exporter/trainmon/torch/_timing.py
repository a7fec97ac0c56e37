"""Step timing and CUDA event spans, resolved on the thread that records them.

`DeviceSpans` is the one place that turns CUDA events into seconds. Every CUDA call it makes
(`record`, `query`, `elapsed_time`) runs on the thread that issued the work: the training thread at
step boundaries, in `wait()` and every `POLL_EVERY` spans, or a framework's autograd thread that
closes a span. The reporter thread never calls CUDA: a `cudaEventQuery` from another thread
invalidates a graph capture in the default global mode (pytorch PRs #104487, #148594), and can block
behind a synchronise, which is where a hung rank sits. Nothing here calls `synchronize()`.

Nothing is recorded while the current stream captures a CUDA graph (an event recorded there makes
every later `query()` raise `cudaErrorCapturedEvent`), and a span whose `query()` or
`elapsed_time()` raises anyway is dropped and counted in `errors`; the rest still resolve.

Timing-enabled events serialise streams under `CUDA_DEVICE_MAX_CONNECTIONS=1` (pytorch#143890), so
they are recorded only where a duration is read: a step, a blocking collective, the pair around an
async collective's `wait()`. There is no span budget: the queue is as long as the GPU is behind,
which CUDA's own launch queue bounds.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from time import perf_counter
from typing import Any

import torch

Sink = Callable[[float | None], None]  # seconds, or None for a span dropped unread
POLL_EVERY = 256  # spans closed between two polls by the closing thread itself (the step end polls too)


def capturing() -> bool:
    """Whether the current stream is capturing a CUDA graph (callers check this only on their CUDA path)."""
    return torch.cuda.is_current_stream_capturing()


class DeviceSpans:
    """Event pairs on the current CUDA stream, resolved when the GPU has passed them.

    Attributes:
        errors: spans dropped because CUDA could not read them.
        step_stream: the stream the open step began on (`StepTimer.begin`), None before the first step.
    """

    def __init__(self) -> None:
        self._free: list[torch.cuda.Event] = []
        self._pending: deque[tuple[torch.cuda.Event, torch.cuda.Event, Sink]] = deque()
        self._lock = threading.Lock()
        self._closed = 0
        self.errors = 0
        self.step_stream: Any = None

    def mark(self) -> torch.cuda.Event:
        """A timing event recorded on the current stream now."""
        try:
            event = self._free.pop()
        except IndexError:  # pool empty (callback threads mark too, so no check-then-pop)
            event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def close(self, start: torch.cuda.Event, sink: Sink) -> None:
        """Record the end of a span that began at `start`; `sink(seconds)` runs once it resolves, on the thread
        that polls, or `sink(None)` at once while the stream is capturing (an end recorded there never reads)."""
        if capturing():
            sink(None)
            return
        self._pending.append((start, self.mark(), sink))
        self._closed += 1
        if self._closed % POLL_EVERY == 0:
            self.poll()

    def on_step_stream(self) -> bool:
        """Whether the current stream is the step's (the default stream before the first step): a blocking
        collective there stalls the step, one on a side stream (FSDP2's, Megatron's) does not."""
        step = self.step_stream if self.step_stream is not None else torch.cuda.default_stream()
        return bool(torch.cuda.current_stream() == step)

    def poll(self) -> None:
        """Resolve every span the GPU has passed; one that raises is dropped. The others wait for the next poll."""
        if not self._lock.acquire(blocking=False):  # another thread is polling
            return
        try:
            pending = self._pending
            for _ in range(len(pending)):  # spans closed meanwhile wait for the next poll
                span = pending.popleft()
                start, end, sink = span
                try:
                    if not end.query():
                        pending.append(span)
                        continue
                    seconds: float | None = start.elapsed_time(end) / 1000.0
                except Exception:  # a captured event, another device's: never read, never reused
                    self.errors += 1
                    seconds = None
                else:
                    self._free += (start, end)
                sink(seconds)
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
        """Open a step; with `spans` (CUDA in use) it is timed on the GPU, unless a graph is being captured."""
        self._t0 = perf_counter()
        self._spans = spans
        self._event = None
        if spans is not None and not capturing():
            spans.step_stream = torch.cuda.current_stream()
            self._event = spans.mark()

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
