"""Hugging Face `Trainer`: `Trainer(..., callbacks=[TrainmonCallback(job_id="...")])`.

One monitor step per optimizer step; the loss and gradient norm are taken from the Trainer's logs
(so only at logging steps, with no extra sync); the fp16 `GradScaler` Accelerate keeps on the
optimizer is watched. The Trainer wraps the model for DDP inside `train()` and passes callbacks the
unwrapped model: the monitor is made with the callback, so the DDP built later gets trainmon's comm
hook as it is constructed; given `trainer=` (`trainer.add_callback(TrainmonCallback(trainer=trainer))`)
the callback also watches `trainer.model_wrapped`.

Data-loader wait is the time inside `next()` of the training `DataLoader`'s iterators, as
`mon.dataloader` counts it: from `on_train_begin` to `on_train_end`, the loader the Trainer iterates
is given a subclass of its own class whose `__iter__` goes through `mon.dataloader`. The Trainer hands
its callbacks that loader as Accelerate prepared it, an adapter whose `__class__` is read-only and
which iterates its `base_dataloader` (the `DataLoader` the Trainer built): that one is timed. This
counts every micro-batch under gradient accumulation (the Trainer fetches a step's micro-batches
together, between two steps) and the batch Accelerate fetches one ahead; not Accelerate's copy of a
batch to the device, nor, after a resume, the epoch the Trainer fast-forwards through a new loader.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from typing import Any

try:
    from transformers import TrainerCallback
except ImportError as exc:
    raise ImportError("trainmon.torch.adapters.hf needs transformers: pip install transformers") from exc

from trainmon.torch._monitor import TrainingMonitor

log = logging.getLogger(__name__)


def time_iteration(loader: Any, monitor: TrainingMonitor) -> Callable[[], None]:
    """Make `loader`'s iterators count their wait in `monitor`; returns what undoes it.

    The loader gets a subclass of its class, the same layout with only `__iter__` changed; a loader
    whose class cannot be changed is left alone (logged), and its wait is not counted.
    """
    original = type(loader)

    def timed_iter(self: Any) -> Iterator[Any]:
        return monitor.dataloader(original.__iter__(self))

    timed = type(original.__name__, (original,), {"__iter__": timed_iter, "__slots__": (),
                                                  "__qualname__": original.__qualname__})
    try:
        loader.__class__ = timed
    except (TypeError, AttributeError) as exc:
        log.warning("trainmon: the Trainer's data-loader wait is not measured: its %s cannot be wrapped (%s)",
                    original.__name__, exc)
        return lambda: None

    def undo() -> None:
        if type(loader) is timed:
            loader.__class__ = original

    return undo



class TrainmonCallback(TrainerCallback):
    """Reports a `transformers.Trainer` run through a `TrainingMonitor`.

    Args:
        monitor: the monitor to drive; one is created (and closed when training ends) when None.
        job_id: for the monitor created here.
        tokens_per_sample: tokens counted per sample (e.g. the sequence length), or 0.
        trainer: the `Trainer`, whose `model_wrapped` (the DDP wrapper) is watched at the start of training.
    """

    def __init__(self, monitor: TrainingMonitor | None = None, *, job_id: str | None = None,
                 tokens_per_sample: int = 0, trainer: Any = None) -> None:
        self._owned = monitor is None
        # Made now, so it is live before the Trainer builds its DDP.
        self._monitor = TrainingMonitor(job_id=job_id) if monitor is None else monitor
        self._tokens_per_sample = tokens_per_sample
        self._trainer = trainer
        self._untime: Callable[[], None] = lambda: None

    @property
    def monitor(self) -> TrainingMonitor:
        return self._monitor

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                       train_dataloader: Any = None, **kwargs: Any) -> None:
        self.monitor.set_framework("hf")
        wrapped = getattr(self._trainer, "model_wrapped", None)
        self.monitor.watch(model=wrapped if wrapped is not None else model, scaler=getattr(optimizer, "scaler", None))
        if train_dataloader is not None:  # Accelerate's adapter iterates the loader it wraps
            self._untime = time_iteration(getattr(train_dataloader, "base_dataloader", train_dataloader),
                                          self.monitor)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.monitor.step_begin()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        samples = args.per_device_train_batch_size * args.gradient_accumulation_steps
        self.monitor.step_end(samples=samples, tokens=samples * self._tokens_per_sample,
                              microbatches=args.gradient_accumulation_steps)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kwargs: Any) -> None:
        mon_state = self.monitor.state
        for key, value in (logs or {}).items():
            if key == "loss" and isinstance(value, (int, float)):
                mon_state.set_loss(float(value))
            elif key == "grad_norm" and isinstance(value, (int, float)) and math.isfinite(value):
                mon_state.set_grad_norm(float(value))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._untime()
        self._untime = lambda: None
        if self._owned:
            self._monitor.close()
