"""A stand-in for the parts of `torch.cuda` the hook calls, for the CPU tests of its CUDA paths.

Not a model of any measured value: its events keep the CPU clock (`perf_counter`), and it records
which thread makes each call, so the tests check where the hook calls CUDA, not what CUDA says. It
behaves as CUDA does where the hook must cope: an event last recorded while the stream captured a
graph raises on `query()` (`cudaErrorCapturedEvent`), `elapsed_time()` needs two timing events, and a
"context lock" that `synchronize()` holds blocks every other call meanwhile (pytorch's note at
`WorkNCCL::finishedGPUExecutionInternal`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import pytest
import torch
import torch.distributed as dist

from trainmon.torch import _coalescing, _collectives


class Stream:
    """A stream: only its identity matters to the hook."""

    def __init__(self, name: str) -> None:
        self.name = name


@dataclass
class StandInCuda:
    """The state the stand-in's functions share, and what they saw."""

    capturing: bool = False
    poisoned: bool = False  # events recorded meanwhile raise on query() (another device's, say)
    default: Stream = field(default_factory=lambda: Stream("default"))
    current: Stream | None = None
    calls: list[tuple[str, str]] = field(default_factory=list)  # (what, thread name)
    context: threading.Lock = field(default_factory=threading.Lock)

    def called(self, what: str) -> None:
        with self.context:  # what a held context lock does to every other CUDA call
            self.calls.append((what, threading.current_thread().name))

    def threads(self, *what: str) -> set[str]:
        return {thread for name, thread in self.calls if name in what}

    @contextmanager
    def side_stream(self) -> Iterator[None]:
        self.current = Stream("side")
        try:
            yield
        finally:
            self.current = None

    @contextmanager
    def capture(self) -> Iterator[None]:
        self.capturing = True
        try:
            yield
        finally:
            self.capturing = False


def event_class(cuda: StandInCuda) -> type:
    class Event:
        def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
            self.timing = enable_timing
            self.at: float | None = None
            self.broken = False

        def record(self, stream: Any = None) -> None:
            cuda.called("record")
            self.at = perf_counter()
            self.broken = cuda.capturing or cuda.poisoned

        def query(self) -> bool:
            cuda.called("query")
            if self.broken:
                raise RuntimeError("CUDA error: operation not permitted on an event last recorded in a capturing "
                                   "stream")
            return True

        def elapsed_time(self, end: Event) -> float:
            cuda.called("elapsed_time")
            if not (self.timing and end.timing):
                raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
            if self.broken or end.broken or self.at is None or end.at is None:
                raise RuntimeError("CUDA error: invalid resource handle")
            return (end.at - self.at) * 1000.0

        def synchronize(self) -> None:
            cuda.called("synchronize")

    return Event


@pytest.fixture
def standin_cuda(monkeypatch: pytest.MonkeyPatch) -> StandInCuda:
    """Install the stand-in: `torch.cuda` reports a device, and every tensor the collectives' wrappers see
    counts as a CUDA tensor (they run on gloo, on the CPU)."""
    cuda = StandInCuda()

    def memory_stats(device: Any = None) -> dict[str, int]:
        cuda.called("memory_stats")
        return {"num_alloc_retries": 0, "num_ooms": 0}

    def is_completed(work: Any) -> bool:
        cuda.called("is_completed")
        return bool(torch_is_completed(work))

    torch_is_completed = dist.Work.is_completed
    monkeypatch.setattr(dist.Work, "is_completed", is_completed)
    monkeypatch.setattr(torch.cuda, "Event", event_class(cuda))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "memory_stats", memory_stats)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: cuda.capturing)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: cuda.current or cuda.default)
    monkeypatch.setattr(torch.cuda, "default_stream", lambda device=None: cuda.default)
    for module in (_collectives, _coalescing):  # each looks the payload's device up by its own name
        monkeypatch.setattr(module, "is_cuda", lambda payload: True)
    return cuda
