"""Time in collectives: wrappers around `torch.distributed` functions and a DDP comm hook.

Per call the wrapper counts the call and its input bytes, then times it without syncing:

* CPU tensors (gloo): `perf_counter` around blocking calls; an async call returns a `TimedWork`
  whose `wait()`/`is_completed()` counts it and stamps completion (no `Future.then`: it costs
  40-50 µs), and works nobody waited on are counted and stamped at the next step end.
* CUDA tensors: an event pair on the current stream (before the call, and after it or after
  `wait()`), resolved later by `DeviceSpans.poll()`.

`comm_wait` (exposed time) is the time the training thread was blocked: a blocking call, a
`wait()`, or DDP's end-of-backward wait for its last bucket. Names a framework bound at import time
(`dist_reduce_scatter_func = torch.distributed.reduce_scatter_tensor`) are found by scanning
`sys.modules` for the original function objects.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from trainmon.torch._state import RankState
from trainmon.torch._timing import DeviceSpans

MAX_PENDING_WORKS = 1024
MAX_CACHED_GROUPS = 256

# function -> (SPEC op, name of the argument whose size counts as the collective's bytes)
FUNCTIONS: dict[str, tuple[str, str | None]] = {
    "all_reduce": ("all_reduce", "tensor"),
    "reduce_scatter": ("reduce_scatter", "input_list"),
    "reduce_scatter_tensor": ("reduce_scatter", "input"),
    "_reduce_scatter_base": ("reduce_scatter", "input"),
    "all_gather": ("all_gather", "tensor"),
    "all_gather_into_tensor": ("all_gather", "input_tensor"),
    "_all_gather_base": ("all_gather", "input_tensor"),
    "broadcast": ("broadcast", "tensor"),
    "all_to_all": ("all_to_all", "input_tensor_list"),
    "all_to_all_single": ("all_to_all", "input"),
    "send": ("send_recv", "tensor"),
    "recv": ("send_recv", "tensor"),
    "isend": ("send_recv", "tensor"),
    "irecv": ("send_recv", "tensor"),
    "barrier": ("barrier", None),
    "reduce": ("other", "tensor"),
    "gather": ("other", "tensor"),
    "scatter": ("other", "tensor"),
}


@dataclass(frozen=True, slots=True)
class Spec:
    op: str
    payload_name: str | None
    payload_index: int
    group_index: int


def _spec(fn: Callable[..., Any], op: str, payload: str | None) -> Spec:
    params = list(inspect.signature(fn).parameters)
    return Spec(op, payload, params.index(payload) if payload else 10**6, params.index("group"))


def _nbytes(payload: object) -> int:
    if isinstance(payload, torch.Tensor):
        return payload.numel() * payload.element_size()
    if isinstance(payload, (list, tuple)):
        return sum(t.numel() * t.element_size() for t in payload if isinstance(t, torch.Tensor))
    return 0


def _is_cuda(payload: object) -> bool:
    if isinstance(payload, (list, tuple)):
        payload = payload[0] if payload else None
    return isinstance(payload, torch.Tensor) and payload.is_cuda


def _group_label(pg: Any) -> str:
    desc = getattr(pg, "group_desc", "")
    if desc and desc != "undefined":
        return str(desc)
    return str(getattr(pg, "group_name", "") or "unnamed")


class TimedWork:
    """Stands in for the `Work` of an async collective; completion is stamped on wait/is_completed."""

    __slots__ = ("_done", "_event", "_group", "_nbytes", "_op", "_recorder", "_t0", "_work")

    def __init__(self, work: Any, recorder: CollectiveRecorder, op: str, group: str, nbytes: int, t0: float,
                 event: torch.cuda.Event | None) -> None:
        self._work = work
        self._recorder = recorder
        self._op = op
        self._group = group
        self._nbytes = nbytes
        self._t0 = t0
        self._event = event
        self._done = False

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        t = perf_counter()
        result = self._work.wait(*args, **kwargs)
        if not self._done:
            self._finish(perf_counter(), t, waited=True)
        return result

    def is_completed(self) -> bool:
        completed = self._work.is_completed()
        if completed and not self._done:
            self._finish(perf_counter(), None, waited=False)
        return bool(completed)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)

    def _finish(self, now: float, blocked_since: float | None, waited: bool) -> None:
        """Count the call; add its time: CPU at once, CUDA through an event pair and only after `wait()`."""
        self._done = True
        self._recorder._pending.pop(id(self), None)
        op, group, add = self._op, self._group, self._recorder.state.add_collective
        try:
            if self._event is None:
                add(op, group, 1, self._nbytes, now - self._t0,
                    now - blocked_since if blocked_since is not None else 0.0)
                return
            add(op, group, 1, self._nbytes, 0.0, 0.0)
            if waited:  # the current stream waits for the collective from here
                self._recorder.spans.close(self._event, lambda s: add(op, group, 0, 0, s, 0.0))  # type: ignore[union-attr]
        except Exception:
            self._recorder.errors += 1


class HookSlot:
    """The comm hook DDP actually runs: ours, which times whatever hook sits in this slot."""

    def __init__(self, hook: Callable[..., Any], state: object) -> None:
        self.hook = hook
        self.state = state


class CollectiveRecorder:
    """Owns the patches and the bookkeeping of collectives for one monitor."""

    def __init__(self, state: RankState, spans: DeviceSpans | None) -> None:
        self.state = state
        self.spans = spans
        self.suppressed = False  # set while our DDP hook runs its inner hook, so nothing counts twice
        self.errors = 0
        self._groups: dict[int, tuple[str, Any]] = {}  # id(group) -> (label, group kept alive)
        self._pending: dict[int, TimedWork] = {}  # async works not yet seen complete, by id
        self._patches: list[tuple[dict[str, Any], str, Any, Any]] = []

    # -- patching -------------------------------------------------------------------------------

    def install(self) -> int:
        """Wrap the collectives wherever the original functions are bound; return how many names."""
        wrappers: dict[int, tuple[Any, Any]] = {}
        for name, (op, payload) in FUNCTIONS.items():
            fn = getattr(dist, name, None)
            if fn is None or hasattr(fn, "__trainmon_original__"):
                continue
            wrappers[id(fn)] = (fn, self._wrap(fn, _spec(fn, op, payload)))
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

    def _wrap(self, fn: Callable[..., Any], spec: Spec) -> Callable[..., Any]:
        compiling = torch.compiler.is_compiling
        work_type = dist.Work
        op, payload_index, payload_name, group_index = spec.op, spec.payload_index, spec.payload_name, spec.group_index
        add = self.state.add_collective

        @functools.wraps(fn)
        def trainmon_collective(*args: Any, **kwargs: Any) -> Any:
            if self.suppressed or compiling():
                return fn(*args, **kwargs)
            try:
                payload = args[payload_index] if len(args) > payload_index else kwargs.get(payload_name)
                group = self.group(args[group_index] if len(args) > group_index else kwargs.get("group"))
                nbytes = _nbytes(payload)
                event = self.spans.mark() if self.spans is not None and _is_cuda(payload) else None
            except Exception:
                self.errors += 1
                return fn(*args, **kwargs)
            t0 = perf_counter()
            result = fn(*args, **kwargs)
            try:
                if isinstance(result, work_type):  # async: counted and timed when it completes
                    work = TimedWork(result, self, op, group, nbytes, t0, event)
                    self._pending[id(work)] = work
                    if len(self._pending) > MAX_PENDING_WORKS:  # never waited on: forget the oldest
                        del self._pending[next(iter(self._pending))]
                    return work
                if event is None:  # CPU: the call blocked until the collective finished
                    seconds = perf_counter() - t0
                    add(op, group, 1, nbytes, seconds, seconds)
                else:  # CUDA: the current stream now waits for the collective, so all of it is exposed
                    add(op, group, 1, nbytes, 0.0, 0.0)
                    self.spans.close(event, lambda s: add(op, group, 0, 0, s, s))  # type: ignore[union-attr]
            except Exception:
                self.errors += 1
            return result

        trainmon_collective.__trainmon_original__ = fn  # type: ignore[attr-defined]
        return trainmon_collective

    # -- bookkeeping ----------------------------------------------------------------------------

    def group(self, group: Any) -> str:
        hit = self._groups.get(id(group))
        if hit is None:
            if len(self._groups) > MAX_CACHED_GROUPS:  # a loop that makes groups as it goes
                self._groups.clear()
            pg = group if group is not None else dist.distributed_c10d._get_default_group()
            hit = self._groups[id(group)] = (self.state.group_label(_group_label(pg), pg.size()), group)
        return hit[0]

    def poll(self) -> None:
        """At a step end: count async works that completed without anyone asking (CPU ones timed)."""
        if not self._pending:
            return
        now = perf_counter()
        for work in [w for w in self._pending.values() if w._work.is_completed()]:
            work._finish(now, None, waited=False)

    # -- DDP ------------------------------------------------------------------------------------

    def watch_ddp(self, model: torch.nn.parallel.DistributedDataParallel) -> bool:
        """Time DDP's gradient all-reduce through its comm hook; False when a hook is already set.

        A hook the user registers later replaces the inner hook in our slot, so it is timed too.
        """
        if model._comm_hooks:
            return False
        slot = HookSlot(default_hooks.allreduce_hook, model.process_group)
        group = self.group(model.process_group)

        # No annotations: DDP compares them with the real classes, and this module's are strings.
        def trainmon_ddp_comm_hook(state, bucket):  # type: ignore[no-untyped-def]
            return self._time_bucket(slot, bucket, group)

        model.register_comm_hook(None, trainmon_ddp_comm_hook)

        def register_comm_hook(state: object, hook: Callable[..., Any]) -> None:
            model._check_comm_hook(hook)
            slot.hook, slot.state = hook, state
            model._comm_hooks.append((hook, state))

        model.register_comm_hook = register_comm_hook  # type: ignore[method-assign]
        return True

    def _time_bucket(self, slot: HookSlot, bucket: dist.GradBucket, group: str) -> Any:
        try:
            buffer = bucket.buffer()
            self.state.add_collective("all_reduce", group, 1, buffer.numel() * buffer.element_size(), 0.0, 0.0)
            event = self.spans.mark() if self.spans is not None and buffer.is_cuda else None
            t0 = perf_counter()
            last = bucket.is_last()
        except Exception:
            self.errors += 1
            return slot.hook(slot.state, bucket)
        self.suppressed = True
        try:
            future = slot.hook(slot.state, bucket)
        finally:
            self.suppressed = False

        def done(fut: torch.futures.Future[Any]) -> Any:
            try:
                # The last bucket's wait ends backward: its launch-to-completion is exposed.
                add = self.state.add_collective
                if event is not None:
                    self.spans.close(event, lambda s: add("all_reduce", group, 0, 0, s, s if last else 0.0))  # type: ignore[union-attr]
                else:
                    seconds = perf_counter() - t0
                    add("all_reduce", group, 0, 0, seconds, seconds if last else 0.0)
            except Exception:
                self.errors += 1
            return fut.value()

        return future.then(done)
