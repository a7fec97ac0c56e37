"""torch's `_coalescing_manager` (Megatron's grad sync, `batch_isend_irecv` on NCCL): the calls inside only queue
their ops, and torch launches them as one collective at the manager's exit.

That launch is one collective, issued there, with each call's bytes under its op: a blocking manager completes
when its exit returns, an async one when the real `Work` it leaves in `cm.works` does (`cm.wait()`, or seen
done), never through the placeholder works the calls returned. On the CPU it is issued again from the
`ProcessGroup` method that launches it, and ends when its work's future completes, stamped on the thread that
completes it (`WorkEnd`): Megatron's buckets are few and large, so the callback's 40-50 µs are worth the
training thread's wake-up (and, overlapped, the wait for `cm.wait()`) no longer counted as communication.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import torch
import torch.distributed as dist

from trainmon.hook.state import ISSUED_AT, CoalescedCalls, OpenCollective
from trainmon.torch._payload import is_cuda, nbytes
from trainmon.torch._works import Captured, ClassPatch, Completions, WorkEnd

# The `ProcessGroup` methods torch's `_coalescing_manager` launches a coalesced operation with.
COALESCED_LAUNCHES = ("allreduce_coalesced", "all_gather_single_coalesced", "reduce_scatter_single_coalesced",
                      "_end_coalescing")


@dataclass(frozen=True, slots=True)
class CoalescedLaunch:
    """A coalescing manager's launch: its collective, how its end is seen, and when its exit began (a
    blocking exit waits too: from there on the training thread is blocked)."""

    entry: OpenCollective
    end: torch.cuda.Event | WorkEnd | str  # CUDA: its pair's start event or NO_START; CPU: its work's end
    async_ops: bool
    exit_at: float


class Coalescing:
    """The wrapped coalescing manager and the launches it makes.

    By thread id, shared with the wrappers: `suppressing` (threads inside a manager's body or the DDP hook's
    inner hook: nothing counts twice) and `queued` (the (op, payload) of the calls queued in a manager).
    """

    def __init__(self, completions: Completions, suppressing: set[int]) -> None:
        self.completions = completions
        self.suppressing = suppressing
        self.queued: dict[int, list[tuple[str, object]]] = {}
        self._launching: dict[int, tuple[OpenCollective, WorkEnd]] = {}

    def patch_launches(self) -> list[ClassPatch]:
        """Patch the `ProcessGroup` methods a coalescing manager launches with (`_launched_from_here`)."""
        patches: list[ClassPatch] = []
        for name in COALESCED_LAUNCHES:
            method = getattr(dist.ProcessGroup, name, None)
            if method is not None:
                original = getattr(method, "__trainmon_original__", method)
                setattr(dist.ProcessGroup, name, self._launched_from_here(original))
                patches.append((dist.ProcessGroup, name, original))
        return patches

    def _launched_from_here(self, method: Callable[..., Any]) -> Callable[..., Any]:
        """While our coalescing manager launches on this thread (`_launching`), its collective is issued again
        from here, next to the work, and the work's future stamps its end (`WorkEnd`); otherwise a pass-through."""

        @functools.wraps(method)
        def launch(pg: Any, *args: Any, **kwargs: Any) -> Any:
            launching = self._launching.pop(threading.get_ident(), None) if self._launching else None
            if launching is None:
                return method(pg, *args, **kwargs)
            entry, end = launching
            entry[ISSUED_AT] = perf_counter()
            work = method(pg, *args, **kwargs)
            with contextlib.suppress(Exception):  # a backend without futures: the end is when it is seen
                work.get_future().add_done_callback(end)
            return work

        launch.__trainmon_original__ = method  # type: ignore[attr-defined]  # a marker on a function object
        return launch

    def wrap(self, manager: Callable[..., Any]) -> Callable[..., Any]:
        """The manager, with the calls inside it counted as the one collective its exit launches."""
        parameters = inspect.signature(manager)

        @functools.wraps(manager)
        @contextlib.contextmanager
        def trainmon_coalescing_manager(*args: Any, **kwargs: Any) -> Iterator[Any]:
            thread = threading.get_ident()
            if thread in self.suppressing:  # inside our DDP hook, or nested
                with manager(*args, **kwargs) as cm:
                    yield cm
                return
            calls: list[tuple[str, object]] = []
            launched = None
            try:
                with manager(*args, **kwargs) as cm:
                    self.queued[thread] = calls
                    self.suppressing.add(thread)
                    try:
                        yield cm
                    finally:
                        self.suppressing.discard(thread)
                        self.queued.pop(thread, None)
                    launched = self._launch(parameters.bind(*args, **kwargs).arguments, calls)
            finally:
                self._launching.pop(thread, None)
            if launched is not None:  # the manager has launched (and, blocking, waited)
                self._launched(cm, launched)

        trainmon_coalescing_manager.__trainmon_original__ = manager  # type: ignore[attr-defined]
        return trainmon_coalescing_manager

    def _launch(self, arguments: dict[str, Any], calls: list[tuple[str, object]]) -> CoalescedLaunch | None:
        """Issue the coalesced collective of `calls` (None when there are none) as the manager launches it;
        on the CPU, the `ProcessGroup` method it launches with issues it again (`patch_launches`)."""
        if not calls:
            return None
        completions = self.completions
        try:
            by_op: dict[str, list[int]] = {}
            for op, payload in calls:
                counts = by_op.setdefault(op, [0, 0])
                counts[0] += 1
                counts[1] += nbytes(payload)
            parts: CoalescedCalls = tuple((op, n, size) for op, (n, size) in by_op.items())
            async_ops = bool(arguments.get("async_ops", False))
            cuda = completions.spans is not None and any(is_cuda(payload) for _, payload in calls)
            end = completions.cuda_start(async_ops) if cuda else WorkEnd()
            exit_at = perf_counter()
            entry = completions.state.issue(arguments.get("group"), calls[0][0], exit_at,
                                            sum(n for _, _, n in parts))
            entry.append(parts)
            if isinstance(end, WorkEnd):
                self._launching[threading.get_ident()] = (entry, end)
            return CoalescedLaunch(entry, end, async_ops, exit_at)
        except Captured:
            return None
        except Exception:
            completions.tally.errors += 1
            return None

    def _launched(self, cm: Any, launch: CoalescedLaunch) -> None:
        completions = self.completions
        works = getattr(cm, "works", None)
        if launch.async_ops and works:
            completions.await_later(works[-1], launch.entry, launch.end)
        elif isinstance(launch.end, WorkEnd):  # CPU, blocking: the exit launched and waited
            now = perf_counter()
            completions.state.complete(launch.entry, launch.end.seconds(launch.entry[ISSUED_AT], now),
                                       now - launch.exit_at)
        else:  # CUDA, or nothing to wait for
            completions.finished(None, launch.entry, launch.end)
