"""Megatron (megatron-core, Megatron-LM): `train_step = monitored_train_step(mon, train_step, optimizer=opt)`.

One monitor step per call of the training step (one optimizer step: Megatron runs its micro-batches
inside `train_step`). The optimizer is watched: the `ChainedOptimizer` `get_megatron_optimizer`
returns gives skipped steps, the grad norm and, with fp16, the loss scale of its chained optimizers.
The loss and grad norm are read from the step's result as Megatron-LM's `train_step` returns it
(`(loss_dict, skipped_iter, should_checkpoint, should_exit, exit_code, grad_norm, num_zeros_in_grad)`,
`"lm loss"` in `loss_dict`; only the last pipeline stage has it). Megatron's gradient sync (its
`_coalescing_manager` buckets, overlapped or not) is timed by the collective hook itself. The micro-batches
of a step are `microbatches_per_step`, or what Megatron's micro-batch calculator says when it is loaded (it
changes under batch-size ramp-up); the pipeline stage comes from `parallel_state` (the monitor reads it).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from trainmon.torch._monitor import TrainingMonitor

Result = TypeVar("Result")
LOSS_KEY = "lm loss"


def monitored_train_step(monitor: TrainingMonitor, train_step: Callable[..., Result], *, optimizer: Any = None,
                         samples_per_step: int = 0, tokens_per_step: int = 0, microbatches_per_step: int = 0,
                         loss_key: str = LOSS_KEY) -> Callable[..., Result]:
    """`train_step`, bracketed as one monitor step; `optimizer` (Megatron's) is watched. `tokens_per_step`: the
    real tokens of the rank's step, padding left out."""
    monitor.set_framework("megatron")
    if optimizer is not None:
        monitor.watch(optimizer=optimizer)

    @functools.wraps(train_step)
    def trainmon_train_step(*args: Any, **kwargs: Any) -> Result:
        monitor.step_begin()
        result = train_step(*args, **kwargs)
        monitor.step_end(samples=samples_per_step, tokens=tokens_per_step, loss=loss_of(result, loss_key),
                         grad_norm=grad_norm_of(result),
                         microbatches=microbatches_per_step or megatron_microbatches())
        return result

    return trainmon_train_step


MICROBATCH_CALCULATOR = "megatron.core.num_microbatches_calculator"


def megatron_microbatches() -> int:
    """The micro-batches of a step from Megatron's calculator, if Megatron loaded one (never imported here), or 0."""
    module = sys.modules.get(MICROBATCH_CALCULATOR)
    try:
        count = module.get_num_microbatches() if module is not None else 0
    except Exception:  # loaded, not initialised
        return 0
    return count if type(count) is int and count > 0 else 0


def loss_of(result: object, key: str = LOSS_KEY) -> Any:
    """The loss in a Megatron-LM `train_step` result (`(loss_dict, ...)`), or None."""
    loss_dict = result[0] if isinstance(result, tuple) and result else None
    return loss_dict.get(key) if isinstance(loss_dict, Mapping) else None


GRAD_NORM_INDEX = 5


def grad_norm_of(result: object) -> float | None:
    """The grad norm in a Megatron-LM `train_step` result, or None."""
    value = result[GRAD_NORM_INDEX] if isinstance(result, tuple) and len(result) > GRAD_NORM_INDEX else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
