"""DDP's gradient all-reduce, timed through its comm hook: without a hook its reducer all-reduces in C++, where
no wrapper sees it.

Every `DistributedDataParallel` built while the recorder is installed gets the hook, however it was built (HF
`Trainer`, Accelerate, Lightning, a user's wrapper). A hook the user registers later replaces the inner hook in
our slot, so it is timed too.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from time import perf_counter
from typing import TYPE_CHECKING, Any

import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from trainmon.hook.state import UNTIMED, GroupSeqs
from trainmon.torch._works import Captured, Completions

if TYPE_CHECKING:  # torch.distributed imports it without re-exporting it
    from torch._C._distributed_c10d import GradBucket


class HookSlot:
    """The comm hook DDP actually runs: ours, which times whatever hook sits in this slot."""

    def __init__(self, hook: Callable[..., Any], state: object) -> None:
        self.hook = hook
        self.state = state


class DdpHooks:
    """Sets the timing comm hook on each DDP model, and restores torch's `DistributedDataParallel.__init__`."""

    def __init__(self, completions: Completions, suppressing: set[int],
                 group: Callable[[Any], GroupSeqs | None]) -> None:
        """`suppressing`: threads inside a hook's inner hook, whose own collectives count no twice (shared with
        the wrappers); `group`: a process group's numbers, None where this rank is not a member."""
        self.completions = completions
        self.suppressing = suppressing
        self.group = group
        self._init: Callable[..., None] | None = None  # torch's DistributedDataParallel.__init__ while ours is set

    def patch(self) -> None:
        ddp = torch.nn.parallel.DistributedDataParallel
        original = ddp.__init__
        watch, tally = self.watch, self.completions.tally

        @functools.wraps(original)
        def __init__(model: Any, *args: Any, **kwargs: Any) -> None:
            original(model, *args, **kwargs)
            try:
                watch(model)
            except Exception:
                tally.errors += 1

        __init__.__trainmon_original__ = original  # type: ignore[attr-defined]  # a marker on a function object
        ddp.__init__ = __init__  # type: ignore[method-assign,assignment]
        self._init = original

    def unpatch(self) -> None:
        ddp = torch.nn.parallel.DistributedDataParallel
        if self._init is not None and getattr(ddp.__init__, "__trainmon_original__", None) is self._init:
            ddp.__init__ = self._init  # type: ignore[method-assign,assignment]
        self._init = None

    def watch(self, model: torch.nn.parallel.DistributedDataParallel) -> bool:
        """Time DDP's gradient all-reduce through its comm hook; False when a hook is already set (ours,
        set when the model was built, or the user's)."""
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
        completions = self.completions
        complete, spans = completions.state.complete, completions.spans
        try:
            buffer = bucket.buffer()
            nbytes = buffer.nbytes
            event = completions.cuda_start(False) if spans is not None and buffer.is_cuda else None
            last = bucket.is_last()
            t0 = perf_counter()
            bucket_entry = completions.state.issue(seqs, "all_reduce", t0, nbytes)
        except Captured:
            return self._run_suppressed(slot, bucket)
        except Exception:
            completions.tally.errors += 1
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
                if isinstance(event, torch.cuda.Event) and spans is not None:
                    spans.close(event, resolved)
                else:
                    resolved(perf_counter() - t0)
            except Exception:
                completions.tally.errors += 1
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
