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
* an async call returns the original `Work` (frameworks check `isinstance(work, Work)`); `Work.wait`
  (while async works are pending) and `Work.is_completed` are patched on the class, so whoever first
  sees it done (a `wait()` or `is_completed()`, or the poll at the step end and before every report)
  completes and times it.
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
  (`_coalescing`), completed as a blocking call or through the real `Work` left in `cm.works`. On the
  CPU it is issued again from the `ProcessGroup` method that launches it, and ends when its work's
  future completes, stamped on the thread that completes it (`WorkEnd`): Megatron's buckets are few
  and large, so the callback's 40-50 µs are worth the training thread's wake-up (and, overlapped, the
  wait for `cm.wait()`) no longer counted as communication.

Every `DistributedDataParallel` built while the recorder is installed gets the comm hook (`_patch_ddp`).

The wrapper calls past torch's own `_exception_logger` frame, a `*args/**kwargs` wrapper around each
collective that only logs exceptions to torch's c10d logger (one Python call each, about 1 µs
on a 2-core VM); a call that raises is logged through that decorator, with its arguments by name.

`comm_wait` (exposed time) is, on the CPU, the time the training thread was blocked: a blocking call, a
`wait()`, or DDP's end-of-backward wait for its last bucket; on CUDA the step's stream's stall (above).

Per-thread state, keyed by thread id (`suppressing`, `coalescing`, `_launching`): a DDP hook or
coalescing manager on one thread suppresses counting on that thread only, so a side thread's
collectives are counted whatever the training thread is inside. The wrapper's check is one truth test
of an empty set while no thread suppresses.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import linecache
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from time import perf_counter
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from trainmon.hook.state import (
    BLOCKED,
    ISSUED_AT,
    MAX_UNSETTLED,
    SECONDS,
    UNTIMED,
    CoalescedCalls,
    GroupSeqs,
    OpenCollective,
    RankState,
)
from trainmon.torch._discovery import (
    CollectiveSignature,
    ExceptionLog,
    collective_functions,
    past_exception_logger,
)
from trainmon.torch._groups import group_label, pg_timeout, rank_ranges
from trainmon.torch._timing import DeviceSpans, capturing
from trainmon.torch._wrapper import wrapper_source
from trainmon.wire import OTHER_GROUP

if TYPE_CHECKING:  # torch.distributed imports it without re-exporting it
    from torch._C._distributed_c10d import GradBucket

MAX_PENDING_WORKS = 1024
# A CUDA call's marker where no start event was recorded: an async call (its wait gets its own pair).
NO_START = "async"


class Captured(Exception):
    """A CUDA collective issued while the current stream captures a CUDA graph: counted once, not issued."""
# What torch returns from an async call inside a coalescing manager: a placeholder that never completes.
ILLEGAL_WORK: type | None = getattr(distributed_c10d, "_IllegalWork", None)
MAX_CACHED_GROUPS = 256
def _nbytes(payload: object) -> int:
    if isinstance(payload, torch.Tensor):
        return payload.nbytes
    if isinstance(payload, (list, tuple)):
        return sum(t.nbytes for t in payload if isinstance(t, torch.Tensor))
    return 0


def _is_cuda(payload: object) -> bool:
    if isinstance(payload, (list, tuple)):
        payload = payload[0] if payload else None
    return isinstance(payload, torch.Tensor) and payload.is_cuda


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


@dataclass(frozen=True, slots=True)
class CoalescedLaunch:
    """A coalescing manager's launch: its collective, how its end is seen, and when its exit began (a
    blocking exit waits too: from there on the training thread is blocked)."""

    entry: OpenCollective
    end: torch.cuda.Event | WorkEnd | str  # CUDA: its pair's start event or NO_START; CPU: its work's end
    async_ops: bool
    exit_at: float


# The `ProcessGroup` methods torch's `_coalescing_manager` launches a coalesced operation with.
COALESCED_LAUNCHES = ("allreduce_coalesced", "all_gather_single_coalesced", "reduce_scatter_single_coalesced",
                      "_end_coalescing")


class HookSlot:
    """The comm hook DDP actually runs: ours, which times whatever hook sits in this slot."""

    def __init__(self, hook: Callable[..., Any], state: object) -> None:
        self.hook = hook
        self.state = state


class CollectiveRecorder:
    """Owns the patches and the bookkeeping of collectives for one monitor."""

    def __init__(self, state: RankState, spans: DeviceSpans | None, *, nccl_timing: bool = False) -> None:
        """`nccl_timing`: the user opted in to the backend's own duration of async collectives (each group's
        `_enable_collectives_timing()`, read with `Work._get_duration()` at completion)."""
        self.state = state
        self.spans = spans
        self.nccl_timing = nccl_timing
        # By thread id: threads inside our DDP hook's inner hook or a coalescing manager's body (nothing counts
        # twice), the (op, payload) of the calls queued in a manager, and a manager's launch.
        self.suppressing: set[int] = set()
        self.coalescing: dict[int, list[tuple[str, object]]] = {}
        self._launching: dict[int, tuple[OpenCollective, WorkEnd]] = {}
        self.errors = 0
        self.captured = 0  # CUDA collectives issued while the current stream captured a graph
        self._groups: dict[int, tuple[GroupSeqs | None, Any]] = {}  # id(group) -> (its numbers, group kept alive)
        self._pending: dict[int, Pending] = {}  # async works not yet seen complete, by id; popping one claims it
        self._patches: list[tuple[dict[str, Any], str, Any, Any]] = []
        self._class_patches: list[tuple[type, str, Any]] = []  # (class, method name, torch's method)
        self._waits: tuple[Any, Any] = (None, None)  # Work.wait: (torch's, ours)
        self._ddp_init: Callable[..., None] | None = None  # torch's DistributedDataParallel.__init__ while ours is set
        state.resolve = self._resolve

    # -- patching -------------------------------------------------------------------------------

    def install(self) -> int:
        """Wrap the collectives wherever the original functions are bound; return how many names."""
        self._patch_work()  # before the wrappers, which need our `Work.wait`
        self._patch_ddp()
        self._patch_coalesced_launches()
        wrappers = {id(fn): (fn, self._wrap(fn, signature)) for fn, signature in collective_functions().values()}
        destroy = getattr(dist.destroy_process_group, "__trainmon_original__", dist.destroy_process_group)
        wrappers[id(destroy)] = (destroy, self._settle_before(destroy))
        manager = getattr(distributed_c10d, "_coalescing_manager", None)
        if manager is not None:
            manager = getattr(manager, "__trainmon_original__", manager)
            wrappers[id(manager)] = (manager, self._coalescing(manager))
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
        ddp = torch.nn.parallel.DistributedDataParallel
        if self._ddp_init is not None and getattr(ddp.__init__, "__trainmon_original__", None) is self._ddp_init:
            ddp.__init__ = self._ddp_init  # type: ignore[method-assign,assignment]
        self._ddp_init = None

    def _patch_ddp(self) -> None:
        """Every `DistributedDataParallel` built while we are installed gets our comm hook, however it was
        built (HF `Trainer`, Accelerate, Lightning, a user's wrapper): without a hook its reducer
        all-reduces in C++, where no wrapper sees it."""
        ddp = torch.nn.parallel.DistributedDataParallel
        original = ddp.__init__
        watch = self.watch_ddp

        @functools.wraps(original)
        def __init__(model: Any, *args: Any, **kwargs: Any) -> None:
            original(model, *args, **kwargs)
            try:
                watch(model)
            except Exception:
                self.errors += 1

        __init__.__trainmon_original__ = original  # type: ignore[attr-defined]  # a marker on a function object
        ddp.__init__ = __init__  # type: ignore[method-assign,assignment]
        self._ddp_init = original

    def _patch_coalesced_launches(self) -> None:
        """The `ProcessGroup` methods a coalescing manager launches with (`_launched_from_here`)."""
        for name in COALESCED_LAUNCHES:
            method = getattr(dist.ProcessGroup, name, None)
            if method is not None:
                original = getattr(method, "__trainmon_original__", method)
                setattr(dist.ProcessGroup, name, self._launched_from_here(original))
                self._class_patches.append((dist.ProcessGroup, name, original))

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

    def _patch_work(self) -> None:
        """`Work.wait`/`is_completed` complete our pending works; other works pass straight through.

        `wait` is only patched while async works may be pending (`_intercept_waits`): every blocking
        collective waits on its own `Work` too, and a pass-through frame there is one more Python call each.
        The first async call patches it, and the step end with nothing pending restores it."""
        pending, finish, cuda_wait = self._pending, self._finish, self._cuda_wait
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

        self._class_patches += [(dist.Work, "wait", original_wait), (dist.Work, "is_completed", original_completed)]
        self._waits = (original_wait, wait)
        dist.Work.is_completed = is_completed  # type: ignore[method-assign,assignment]  # on the class: Work has no __dict__

    def _cuda_wait(self, original_wait: Callable[..., Any], work: Any, timeout: Any,
                   collective: OpenCollective) -> Any:
        """torch's `wait()` between two events on the current stream: on NCCL it makes the stream wait for the
        collective, so the pair's GPU time is the stall, whatever ran between issue and wait."""
        before = None
        try:
            if self.spans is not None and not capturing():
                before = self.spans.mark()
        except Exception:
            self.errors += 1
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
            self.errors += 1
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

    def _intercept_waits(self, on: bool) -> None:
        """Patch `Work.wait` (an async work is pending) or restore it (none is, at the step end).

        A framework thread issuing an async call while the training thread ends its step can leave it
        restored with a work pending: `poll` still completes that one, without its exposed wait."""
        original, patched = self._waits
        dist.Work.wait = patched if on else original  # type: ignore[method-assign]

    def wrapper_globals(self, fn: Callable[..., Any]) -> dict[str, Any]:
        """The names a wrapper of `fn` runs with, besides its defaults (tests/torch/rendered_wrapper.py types them)."""
        call, log_exception = past_exception_logger(fn)
        return {
            "recorder": self, "fn": fn, "call": call, "opened": self.state.open,
            "tensor_type": torch.Tensor, "nbytes_of": _nbytes, "spans": self.spans, "is_cuda": _is_cuda,
            "perf_counter": perf_counter, "MAX_UNSETTLED": MAX_UNSETTLED, "settle": self.state.settle,
            "BLOCKED": BLOCKED, "SECONDS": SECONDS, "failed": functools.partial(self._failed, log_exception),
            "finished": self._finished, "pending": self._pending, "work_types": (dist.Work, torch._C.Future),
            "work_type": dist.Work, "patched_wait": self._waits[1], "intercept": self._intercept_waits,
            "MAX_PENDING_WORKS": MAX_PENDING_WORKS, "forget": self._forget, "suppressing": self.suppressing,
            "coalescing": self.coalescing, "get_ident": threading.get_ident, "cuda_start": self._cuda_start,
            "Captured": Captured,
        }

    def _cuda_start(self, async_call: bool) -> torch.cuda.Event | str:
        """A CUDA collective's marker: `NO_START` for an async call, else the start event of its pair.

        Raises:
            Captured: the current stream captures a CUDA graph (the call is counted once, as captured).
        """
        if capturing():
            self.captured += 1
            raise Captured
        if async_call or self.spans is None:
            return NO_START
        return self.spans.mark()

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

    def _finished(self, result: Any, entry: OpenCollective, event: torch.cuda.Event | str | None) -> None:
        """After a call that returned neither a `Work` nor a `Future`: on CUDA, or on the CPU with a result."""
        try:
            if event is None:  # a blocking call that returned something
                entry[BLOCKED] = entry[SECONDS] = perf_counter() - entry[ISSUED_AT]
            elif isinstance(event, str) or self.spans is None:  # CUDA, said async but nothing to wait on
                self.state.complete(entry, UNTIMED, 0.0)
            else:
                self._close_blocking(self.spans, event, entry)
        except Exception:
            self.errors += 1
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

    # -- bookkeeping ----------------------------------------------------------------------------

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
                self.errors += 1

    def _resolve(self, group: Any) -> GroupSeqs | None:
        """`RankState.resolve`: the numbers of a group the wrapper recorded as torch got it."""
        try:
            return self.group(group)
        except Exception:  # its completions are dropped, and counted here
            self.errors += 1
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
                self.errors += 1
            return fn(*args, **kwargs)

        trainmon_destroy_process_group.__trainmon_original__ = fn  # type: ignore[attr-defined]
        return trainmon_destroy_process_group

    def _coalescing(self, manager: Callable[..., Any]) -> Callable[..., Any]:
        """`_coalescing_manager` (Megatron's grad sync, `batch_isend_irecv` on NCCL): the calls inside only
        queue their ops, torch launches them as one at the exit. They are one collective, issued there, with
        each call's bytes under its op: a blocking manager completes when its exit returns, an async one
        when the real `Work` it leaves in `cm.works` does (`cm.wait()`, or seen done), never through the
        placeholder works the calls returned."""
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
                    self.coalescing[thread] = calls
                    self.suppressing.add(thread)
                    try:
                        yield cm
                    finally:
                        self.suppressing.discard(thread)
                        self.coalescing.pop(thread, None)
                    launched = self._launch_coalesced(parameters.bind(*args, **kwargs).arguments, calls)
            finally:
                self._launching.pop(thread, None)
            if launched is not None:  # the manager has launched (and, blocking, waited)
                self._coalesced_launched(cm, launched)

        trainmon_coalescing_manager.__trainmon_original__ = manager  # type: ignore[attr-defined]
        return trainmon_coalescing_manager

    def _launch_coalesced(self, arguments: dict[str, Any], calls: list[tuple[str, object]],
                          ) -> CoalescedLaunch | None:
        """Issue the coalesced collective of `calls` (None when there are none) as the manager launches it;
        on the CPU, the `ProcessGroup` method it launches with issues it again (`_patch_coalesced_launches`)."""
        if not calls:
            return None
        try:
            by_op: dict[str, list[int]] = {}
            for op, payload in calls:
                counts = by_op.setdefault(op, [0, 0])
                counts[0] += 1
                counts[1] += _nbytes(payload)
            parts: CoalescedCalls = tuple((op, n, nbytes) for op, (n, nbytes) in by_op.items())
            async_ops = bool(arguments.get("async_ops", False))
            cuda = self.spans is not None and any(_is_cuda(payload) for _, payload in calls)
            end = self._cuda_start(async_ops) if cuda else WorkEnd()
            exit_at = perf_counter()
            entry = self.state.issue(arguments.get("group"), calls[0][0], exit_at, sum(n for _, _, n in parts))
            entry.append(parts)
            if isinstance(end, WorkEnd):
                self._launching[threading.get_ident()] = (entry, end)
            return CoalescedLaunch(entry, end, async_ops, exit_at)
        except Captured:
            return None
        except Exception:
            self.errors += 1
            return None

    def _coalesced_launched(self, cm: Any, launch: CoalescedLaunch) -> None:
        works = getattr(cm, "works", None)
        if launch.async_ops and works:
            self._pending[id(works[-1])] = (works[-1], launch.entry, launch.end)
            if dist.Work.wait is not self._waits[1]:
                self._intercept_waits(True)
        elif isinstance(launch.end, WorkEnd):  # CPU, blocking: the exit launched and waited
            now = perf_counter()
            self.state.complete(launch.entry, launch.end.seconds(launch.entry[ISSUED_AT], now), now - launch.exit_at)
        else:  # CUDA, or nothing to wait for
            self._finished(None, launch.entry, launch.end)

    def _finish(self, entry: Pending, now: float, blocked_since: float | None) -> None:
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
            self.errors += 1
            complete(collective, UNTIMED, 0.0)

    def _forget(self, key: int) -> None:
        entry = self._pending.pop(key, None)
        if entry is not None:
            self.state.complete(entry[1], UNTIMED, 0.0)

    def poll(self, *, step_end: bool = False) -> None:
        """Complete async collectives that finished without anyone asking (step end, and before each report).

        At the step end (the training thread) with none pending, torch's `Work.wait` comes back."""
        if not self._pending:
            if step_end and dist.Work.wait is self._waits[1]:
                self._intercept_waits(False)
            return
        for key, entry in self._pending.copy().items():  # a C copy that runs no Python: safe against other threads
            try:
                work = entry[0]
                if type(work) is ILLEGAL_WORK:  # from a coalescing manager we did not wrap: it never completes
                    self._forget(key)
                    continue
                future = isinstance(work, torch._C.Future)
                done = work.done() if future else dist.Work.is_completed(work)  # a Work completes itself
            except Exception:  # a work that cannot say: stop tracking it rather than call it in flight forever
                self.errors += 1
                self._forget(key)
                continue
            if done and future:
                claimed = self._pending.pop(key, None)
                if claimed is not None:
                    self._finish(claimed, perf_counter(), None)

    # -- DDP ------------------------------------------------------------------------------------

    def watch_ddp(self, model: torch.nn.parallel.DistributedDataParallel) -> bool:
        """Time DDP's gradient all-reduce through its comm hook; False when a hook is already set (ours,
        set when the model was built, or the user's).

        A hook the user registers later replaces the inner hook in our slot, so it is timed too.
        """
        if model._comm_hooks:
            return False
        seqs = self.group(model.process_group)
        if seqs is None:
            return False
        slot = HookSlot(default_hooks.allreduce_hook, model.process_group)

        # No annotations: DDP compares them with the real classes, and this module's are strings.
        def trainmon_ddp_comm_hook(state, bucket):  # type: ignore[no-untyped-def]
            return self._time_bucket(slot, bucket, seqs)

        model.register_comm_hook(None, trainmon_ddp_comm_hook)

        def register_comm_hook(state: object, hook: Callable[..., Any]) -> None:
            model._check_comm_hook(hook)
            slot.hook, slot.state = hook, state
            model._comm_hooks.append((hook, state))

        model.register_comm_hook = register_comm_hook  # type: ignore[method-assign]  # this instance only
        return True

    def _time_bucket(self, slot: HookSlot, bucket: GradBucket, seqs: GroupSeqs) -> Any:
        """One bucket: issued when DDP hands it over, complete when the hook's future is (the `.then`
        DDP needs anyway), so the default hook's division by the world size is inside the time."""
        complete = self.state.complete
        try:
            buffer = bucket.buffer()
            nbytes = buffer.nbytes
            event = self._cuda_start(False) if self.spans is not None and buffer.is_cuda else None
            last = bucket.is_last()
            t0 = perf_counter()
            bucket_entry = self.state.issue(seqs, "all_reduce", t0, nbytes)
        except Captured:
            return self._run_suppressed(slot, bucket)
        except Exception:
            self.errors += 1
            return slot.hook(slot.state, bucket)
        try:
            future = self._run_suppressed(slot, bucket)
        except BaseException:
            complete(bucket_entry, UNTIMED, 0.0)
            raise

        def resolved(seconds: float | None) -> None:
            # The last bucket's wait ends backward: its launch-to-completion is exposed.
            if seconds is None:
                complete(bucket_entry, UNTIMED, 0.0)
            else:
                complete(bucket_entry, seconds, seconds if last else 0.0)

        def done(fut: torch.futures.Future[Any]) -> Any:
            try:
                if isinstance(event, torch.cuda.Event) and self.spans is not None:
                    self.spans.close(event, resolved)
                else:
                    resolved(perf_counter() - t0)
            except Exception:
                self.errors += 1
            return fut.value()

        return future.then(done)

    def _run_suppressed(self, slot: HookSlot, bucket: GradBucket) -> Any:
        """The inner hook, whose own collectives this thread does not count again."""
        thread = threading.get_ident()
        self.suppressing.add(thread)
        try:
            return slot.hook(slot.state, bucket)
        finally:
            self.suppressing.discard(thread)
