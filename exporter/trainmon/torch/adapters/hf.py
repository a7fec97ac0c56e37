"""Hugging Face `Trainer`: `Trainer(..., callbacks=[TrainmonCallback(job_id="...")])`.

One monitor step per optimizer step; the loss and gradient norm are taken from the Trainer's logs
(so only at logging steps, with no extra sync); the fp16 `GradScaler` Accelerate keeps on the
optimizer is watched. The Trainer wraps the model for DDP inside `train()` and passes callbacks the
unwrapped model: the monitor is made with the callback, so the DDP built later gets trainmon's comm
hook as it is constructed; given `trainer=` (`trainer.add_callback(TrainmonCallback(trainer=trainer))`)
the callback also watches `trainer.model_wrapped`.
"""

from __future__ import annotations

import math
from typing import Any

try:
    from transformers import TrainerCallback
except ImportError as exc:
    raise ImportError("trainmon.torch.adapters.hf needs transformers: pip install transformers") from exc

from trainmon.torch._monitor import TrainingMonitor


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

    @property
    def monitor(self) -> TrainingMonitor:
        return self._monitor

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                       **kwargs: Any) -> None:
        self.monitor.set_framework("hf")
        wrapped = getattr(self._trainer, "model_wrapped", None)
        self.monitor.watch(model=wrapped if wrapped is not None else model, scaler=getattr(optimizer, "scaler", None))

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.monitor.step_begin()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        samples = args.per_device_train_batch_size * args.gradient_accumulation_steps
        self.monitor.step_end(samples=samples, tokens=samples * self._tokens_per_sample)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kwargs: Any) -> None:
        mon_state = self.monitor.state
        for key, value in (logs or {}).items():
            if key == "loss" and isinstance(value, (int, float)):
                mon_state.set_loss(float(value))
            elif key == "grad_norm" and isinstance(value, (int, float)) and math.isfinite(value):
                mon_state.set_grad_norm(float(value))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._owned:
            self._monitor.close()
