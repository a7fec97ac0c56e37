"""Collectives: per-group sequence numbers, in-flight age and time, around `torch.distributed`.

Which functions: every public `torch.distributed` function of the installed torch that takes a
`group` and is named after a collective (`_discovery.collective_functions`), except those that only forward
to another one (`all_gather_into_tensor` -> `all_gather_single`, `send` -> `isend`, the object
collectives -> `all_gather`/`broadcast`/...): those are counted once, by the function they call.
That covers the `*_single` and `*_coalesced` forms FSDP2 and others use. Names a framework bound
at import time (`dist_reduce_scatter_func = torch.distributed.reduce_scatter_tensor`) are found by
scanning `sys.modules` for the original function objects.

Per call the wrapper (made from `_wrapper.WRAPPER_TEMPLATE` with each function's own parameters) issues
the collective into `RankState.open` (in flight from here), with the group as torch got it
(`settle` finds its numbers in the reporter thread), and completes that entry:

* a blocking call on CPU tensors (gloo) completes when it returns; its time is `perf_counter`
  around the call;
* an async call returns the original `Work` (frameworks check `isinstance(work, Work)`); whoever first
  sees it done completes and times it (`_works.Completions`).
  No `Future.then`: it costs 40-50 µs. A coalesced call that returns a `Future` is polled by `done()`;
* CUDA tensors (every CUDA call on the issuing thread, none on the reporter's: `_timing`): a blocking
  call is an event pair around it on the current stream, its own time (sync NCCL runs on the current
  stream), exposed only on the step's stream; an async call's `wait()` gets a pair immediately around
  torch's, whose GPU time is the stream's stall (`comm_wait`), and its own time is the backend's
  (`Work._get_duration()`, with `TRAINMON_NCCL_TIMING=1`) or none (`UNTIMED`), never the issue-to-wait
  span nor 0 s. Completions are resolved at the step end, in `wait()`, and as spans accumulate.
  While the current stream captures a CUDA graph nothing is recorded: the call counts as captured;
* inside torch's `_coalescing_manager` (wrapped too) a call only queues its op: the wrapper notes
  its op and payload, and the manager's launch at its exit is one collective with all their bytes
  (`_coalescing.Coalescing`).

Every `DistributedDataParallel` built while the recorder is installed gets the comm hook (`_ddp.DdpHooks`).

The wrapper calls past torch's own `_exception_logger` frame, a `*args/**kwargs` wrapper around each
collective that only logs exceptions to torch's c10d logger (one Python call each, about 1 µs
on a 2-core VM); a call that raises is logged through that decorator, with its arguments by name.

`comm_wait` (exposed time) is, on the CPU, the time the training thread was blocked: a blocking call, a
`wait()`, or DDP's end-of-backward wait for its last bucket; on CUDA the step's stream's stall (above).

Per-thread state, keyed by thread id (`suppressing`, `Coalescing.queued`): a DDP hook or
coalescing manager on one thread suppresses counting on that thread only, so a side thread's
collectives are counted whatever the training thread is inside. The wrapper's check is one truth test
of an empty set while no thread suppresses.
"""

from __future__ import annotations

import functools
import linecache
import sys
import threading
from collections.abc import Callable
from time import perf_counter
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from trainmon.hook.state import BLOCKED, ISSUED_AT, MAX_UNSETTLED, SECONDS, GroupSeqs, OpenCollective, RankState
from trainmon.torch._coalescing import Coalescing
from trainmon.torch._ddp import DdpHooks
from trainmon.torch._discovery import CollectiveSignature, ExceptionLog, collective_functions, past_exception_logger
from trainmon.torch._groups import group_label, pg_timeout, rank_ranges
from trainmon.torch._payload import is_cuda, nbytes
from trainmon.torch._timing import DeviceSpans
from trainmon.torch._works import MAX_PENDING_WORKS, Captured, ClassPatch, Completions, Pending, Tally
from trainmon.torch._wrapper import wrapper_source
from trainmon.wire import OTHER_GROUP

__all__ = ["Captured", "CollectiveRecorder", "Pending"]

MAX_CACHED_GROUPS = 256


class CollectiveRecorder:
    """Owns the patches for one monitor and hands each mechanism its part: the wrappers (plain calls, here),
    `Completions` (pending works and CUDA pairs), `Coalescing` and `DdpHooks`."""

    def __init__(self, state: RankState, spans: DeviceSpans | None, *, nccl_timing: bool = False) -> None:
        """`nccl_timing`: the user opted in to the backend's own duration of async collectives (each group's
        `_enable_collectives_timing()`, read with `Work._get_duration()` at completion)."""
        self.state = state
        self.spans = spans
        self.nccl_timing = nccl_timing
        self.tally = Tally()
        # By thread id: threads inside our DDP hook's inner hook or a coalescing manager's body (nothing counts
        # twice); the wrappers, `Coalescing` and `DdpHooks` share it.
        self.suppressing: set[int] = set()
        self.completions = Completions(state, spans, self.tally, nccl_timing=nccl_timing)
        self.coalescing = Coalescing(self.completions, self.suppressing)
        self.ddp = DdpHooks(self.completions, self.suppressing, self.group)
        self._groups: dict[int, tuple[GroupSeqs | None, Any]] = {}  # id(group) -> (its numbers, group kept alive)
        self._patches: list[tuple[dict[str, Any], str, Any, Any]] = []
        self._class_patches: list[ClassPatch] = []
        state.resolve = self._resolve

    @property
    def errors(self) -> int:
        return self.tally.errors

    @property
    def captured(self) -> int:
        """CUDA collectives issued while the current stream captured a graph."""
        return self.tally.captured

    # -- patching -------------------------------------------------------------------------------

    def install(self) -> int:
        """Wrap the collectives wherever the original functions are bound; return how many names."""
        self._class_patches += self.completions.patch_work()  # before the wrappers, which need our `Work.wait`
        self.ddp.patch()
        self._class_patches += self.coalescing.patch_launches()
        wrappers = {id(fn): (fn, self._wrap(fn, signature)) for fn, signature in collective_functions().values()}
        destroy = getattr(dist.destroy_process_group, "__trainmon_original__", dist.destroy_process_group)
        wrappers[id(destroy)] = (destroy, self._settle_before(destroy))
        manager = getattr(distributed_c10d, "_coalescing_manager", None)
        if manager is not None:
            manager = getattr(manager, "__trainmon_original__", manager)
            wrappers[id(manager)] = (manager, self.coalescing.wrap(manager))
        for module in list(sys.modules.values()):
            try:  # sys.modules may hold objects whose attribute access runs code
                namespace = vars(module)
                skip = not isinstance(namespace, dict) or str(namespace.get("__name__")).startswith("trainmon.")
            except Exception:
                continue
            if skip:
                continue
            for key, value in list(namespace.items()):
                hit = wrappers.get(id(value))
                if hit is not None and hit[0] is value:
                    namespace[key] = hit[1]
                    self._patches.append((namespace, key, value, hit[1]))
        return len(self._patches)

    def uninstall(self) -> None:
        for namespace, key, original, wrapper in reversed(self._patches):
            if namespace.get(key) is wrapper:
                namespace[key] = original
        self._patches.clear()
        for cls, name, original in reversed(self._class_patches):
            setattr(cls, name, original)
        self._class_patches.clear()
        self.ddp.unpatch()

    def wrapper_globals(self, fn: Callable[..., Any]) -> dict[str, Any]:
        """The names a wrapper of `fn` runs with, besides its defaults (tests/torch/rendered_wrapper.py types them)."""
        call, log_exception = past_exception_logger(fn)
        completions = self.completions
        return {
            "tally": self.tally, "fn": fn, "call": call, "opened": self.state.open,
            "tensor_type": torch.Tensor, "nbytes_of": nbytes, "spans": self.spans, "is_cuda": is_cuda,
            "perf_counter": perf_counter, "MAX_UNSETTLED": MAX_UNSETTLED, "settle": self.state.settle,
            "BLOCKED": BLOCKED, "SECONDS": SECONDS, "failed": functools.partial(self._failed, log_exception),
            "finished": completions.finished, "pending": completions.pending,
            "work_types": (dist.Work, torch._C.Future), "work_type": dist.Work, "patched_wait": completions.waits[1],
            "intercept": completions.intercept, "MAX_PENDING_WORKS": MAX_PENDING_WORKS, "forget": completions.forget,
            "suppressing": self.suppressing, "coalescing": self.coalescing.queued, "get_ident": threading.get_ident,
            "cuda_start": completions.cuda_start, "Captured": Captured,
        }

    def _wrap(self, fn: Callable[..., Any], signature: CollectiveSignature) -> Callable[..., Any]:
        source, defaults = wrapper_source(fn, signature)
        namespace = {**defaults, **self.wrapper_globals(fn)}
        filename = f"<trainmon wrapper of {fn.__name__}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # tracebacks show it
        exec(compile(source, filename, "exec"), namespace)  # our own template
        wrapper = functools.wraps(fn)(namespace[fn.__name__])
        wrapper.__trainmon_original__ = fn  # type: ignore[attr-defined]  # a marker on a function object
        # Dynamo traces the original in our place (as it does for its own wrappers), so a compiled graph
        # holds torch's call and the wrapper needs no `is_compiling()` check.
        wrapper._torchdynamo_inline = fn  # type: ignore[attr-defined]
        return wrapper

    def _failed(self, log_exception: ExceptionLog | None, entry: OpenCollective, error: BaseException,
                kwargs: dict[str, Any], args: tuple[Any, ...] = ()) -> None:
        """A collective that raised (peer gone, timeout) is no longer in flight; torch's log gets it."""
        seconds = perf_counter() - entry[ISSUED_AT]
        self.state.complete(entry, seconds, seconds)
        if log_exception is not None and isinstance(error, Exception):
            log_exception(error, args, kwargs)

    def group(self, group: Any) -> GroupSeqs | None:
        """The numbers of `group` (None = the default group); None where this rank is not a member."""
        hit = self._groups.get(id(group))
        if hit is None:
            if len(self._groups) > MAX_CACHED_GROUPS:  # a loop that makes groups as it goes
                self._groups.clear()
            pg = group if group is not None else distributed_c10d._get_default_group()
            seqs = None
            if isinstance(pg, dist.ProcessGroup):
                label = self.state.group_label(group_label(pg), pg.size())
                seqs = self.state.sequences(label)
                self._found(pg, label)
            hit = self._groups[id(group)] = (seqs, group)
        return hit[0]

    def _found(self, pg: Any, label: str) -> None:
        """A group seen for the first time: its timeout (the hang alerts page at half of it, before NCCL's
        watchdog kills the job) and, where the user opted in, the backend's timing of its collectives."""
        ranks = rank_ranges(dist.get_process_group_ranks(pg)) if label != OTHER_GROUP else None
        if ranks is not None:
            self.state.group_ranks[label] = ranks
        timeout = pg_timeout(pg)
        if timeout is not None:
            known = self.state.pg_timeouts.get(label)
            self.state.pg_timeouts[label] = timeout if known is None else min(known, timeout)
        if self.nccl_timing:
            try:
                pg._enable_collectives_timing()
            except Exception:
                self.tally.errors += 1

    def _resolve(self, group: Any) -> GroupSeqs | None:
        """`RankState.resolve`: the numbers of a group the wrapper recorded as torch got it."""
        try:
            return self.group(group)
        except Exception:  # its completions are dropped, and counted here
            self.tally.errors += 1
            return None

    def _settle_before(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`destroy_process_group`: the default group's numbers are found, and what is queued is settled,
        while torch still has its groups (the wrapper leaves finding them to `settle`)."""

        @functools.wraps(fn)
        def trainmon_destroy_process_group(*args: Any, **kwargs: Any) -> Any:
            try:
                if dist.is_initialized():
                    self.group(None)
                    self.state.settle()
            except Exception:
                self.tally.errors += 1
            return fn(*args, **kwargs)

        trainmon_destroy_process_group.__trainmon_original__ = fn  # type: ignore[attr-defined]
        return trainmon_destroy_process_group

    def poll(self, *, step_end: bool = False) -> None:
        """Complete async collectives that finished without anyone asking (step end, and before each report)."""
        self.completions.poll(step_end=step_end)

    def watch_ddp(self, model: torch.nn.parallel.DistributedDataParallel) -> bool:
        """Time DDP's gradient all-reduce through its comm hook; False when a hook is already set."""
        return self.ddp.watch(model)
