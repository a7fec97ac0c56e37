"""Loss scale and skipped steps from torch GradScaler, Megatron-style optimizers and DeepSpeed.

Values that live on the GPU are copied into pinned host memory with `non_blocking=True` behind an
event and read at a later step once `query()` says the copy landed (`HostCopies`), so reading them
adds no sync. Each probe wraps one method of the user's object on the instance and puts it back
on `restore()`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from trainmon.hook.state import RankState
from trainmon.torch._timing import capturing

ValuesSink = Callable[[list[float]], None]
MAX_PENDING = 256


class HostCopies:
    """Small tensors read without a sync: CPU ones at once, CUDA ones when their copy has landed."""

    def __init__(self) -> None:
        self._pending: deque[tuple[torch.Tensor, torch.cuda.Event, ValuesSink]] = deque()
        self.dropped = 0

    def read(self, values: list[torch.Tensor], sink: ValuesSink) -> None:
        """Call `sink` with the values of these one-element tensors, now or at a later `poll()`."""
        flat = torch.stack([v.detach().reshape(()).float() for v in values])
        if not flat.is_cuda:
            sink(flat.tolist())
            return
        if capturing():  # a value inside a CUDA graph capture is not this step's: an event recorded here never reads
            self.dropped += 1
            return
        host = torch.empty(flat.shape, dtype=flat.dtype, pin_memory=True)
        host.copy_(flat, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        if len(self._pending) >= MAX_PENDING:
            self._pending.popleft()
            self.dropped += 1
        self._pending.append((host, event, sink))

    def poll(self) -> None:
        """Hand over the copies the GPU has made, in order; one whose event raises is dropped."""
        while self._pending:
            try:
                if not self._pending[0][1].query():
                    return
            except Exception:
                self._pending.popleft()
                self.dropped += 1
                continue
            host, _, sink = self._pending.popleft()
            sink(host.tolist())


class Patches:
    """Instance attributes we set, and what to put back."""

    def __init__(self) -> None:
        self._undo: list[tuple[object, str, bool, object]] = []

    def wrap(self, obj: object, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        original = getattr(obj, name)
        had_own = name in getattr(obj, "__dict__", {})
        setattr(obj, name, make(original))
        self._undo.append((obj, name, had_own, original))

    def restore(self) -> None:
        for obj, name, had_own, original in reversed(self._undo):
            if had_own:
                setattr(obj, name, original)
            else:
                delattr(obj, name)
        self._undo.clear()


def _guarded(errors: list[int], probe: Callable[..., None]) -> Callable[..., None]:
    def run(*args: Any) -> None:
        try:
            probe(*args)
        except Exception:
            errors[0] += 1

    return run


def watch_grad_scaler(scaler: Any, state: RankState, copies: HostCopies, patches: Patches, errors: list[int]) -> bool:
    """`torch.amp.GradScaler`: a step is skipped when any optimizer found inf/NaN (read before
    `update()` clears it); the scale is `_scale` after `update()`. False when the scaler is disabled."""
    if not scaler.is_enabled():
        return False

    def record(values: list[float]) -> None:
        found, scale = values
        state.skipped_steps += found > 0
        state.loss_scale = scale

    def before(new_scale: Any) -> torch.Tensor | None:
        found = [f for s in scaler._per_optimizer_states.values() for f in s["found_inf_per_device"].values()]
        if new_scale is not None or not found:
            return None
        # Summed before update(), which adds the other found_inf tensors into the first in place.
        return torch.stack([f.float().reshape(()) for f in found]).sum()

    def after(found: torch.Tensor | None) -> None:
        if found is not None and scaler._scale is not None:
            copies.read([found, scaler._scale], record)

    def make(update: Callable[..., Any]) -> Callable[..., Any]:
        def trainmon_update(new_scale: Any = None) -> Any:
            found: list[torch.Tensor | None] = [None]
            _guarded(errors, lambda: found.__setitem__(0, before(new_scale)))()
            result = update(new_scale)
            _guarded(errors, after)(found[0])
            return result

        return trainmon_update

    patches.wrap(scaler, "update", make)
    return True


def has_grad_scaler(optimizer: Any) -> bool:
    """Whether a Megatron optimizer scales its loss: its own `grad_scaler`, or for the `ChainedOptimizer`
    megatron-core's `get_megatron_optimizer` returns, one of its `chained_optimizers` (whose
    `get_loss_scale()` the chain returns)."""
    chained = getattr(optimizer, "chained_optimizers", None)
    if chained is not None:
        return any(has_grad_scaler(inner) for inner in chained)
    return getattr(optimizer, "grad_scaler", None) is not None


def watch_megatron(optimizer: Any, state: RankState, copies: HostCopies, patches: Patches, errors: list[int]) -> str:
    """Megatron-style: `step()` returns `(update_successful, grad_norm, ...)`; `get_loss_scale()` is
    a tensor. Returns the `loss_scaler` label: `megatron` with a grad scaler, `none` (bf16) without."""
    has_scaler = has_grad_scaler(optimizer)

    def scale(values: list[float]) -> None:
        state.loss_scale = values[0]

    def after(result: Any) -> None:
        if not isinstance(result, tuple) or not result:
            return
        state.skipped_steps += not result[0]
        if len(result) > 1 and isinstance(result[1], (int, float)):
            state.grad_norm = float(result[1])
        if has_scaler:
            copies.read([optimizer.get_loss_scale()], scale)

    def make(step: Callable[..., Any]) -> Callable[..., Any]:
        def trainmon_step(*args: Any, **kwargs: Any) -> Any:
            result = step(*args, **kwargs)
            _guarded(errors, after)(result)
            return result

        return trainmon_step

    patches.wrap(optimizer, "step", make)
    return "megatron" if has_scaler else "none"


def watch_deepspeed(engine: Any, state: RankState, patches: Patches, errors: list[int]) -> str:
    """DeepSpeed engine: `skipped_steps` and the optimizer's `cur_scale`/`loss_scale` are plain
    Python values DeepSpeed has already synced. Returns the `loss_scaler` label."""
    fp16 = bool(getattr(engine, "fp16_enabled", lambda: False)())

    def after() -> None:
        state.skipped_steps = int(engine.skipped_steps)
        optimizer = getattr(engine, "optimizer", None)
        scale = getattr(optimizer, "cur_scale", None) or getattr(optimizer, "loss_scale", None)
        if fp16 and isinstance(scale, (int, float)):
            state.loss_scale = float(scale)

    def make(step: Callable[..., Any]) -> Callable[..., Any]:
        def trainmon_step(*args: Any, **kwargs: Any) -> Any:
            result = step(*args, **kwargs)
            _guarded(errors, after)()
            return result

        return trainmon_step

    patches.wrap(engine, "step", make)
    return "deepspeed" if fp16 else "none"
