"""PyTorch Lightning: `Trainer(callbacks=[TrainmonCallback(job_id="...")])`.

One monitor step per optimizer step (several batches under gradient accumulation); validation
runs inside the `eval` phase; the DDP model, optimizer and mixed-precision scaler are watched when
training starts.

The loss of a step is the mean of its micro-batches' losses: Lightning hands `on_train_batch_end`
each loss divided by `accumulate_grad_batches`, so their sum over the step is that mean. The
gradient norm (2-norm over all parameters, after unscaling) is taken on the device in
`on_before_optimizer_step`, where Lightning calls its own `grad_norm` hook, and read without a sync;
only where every rank holds whole gradients (single device, DDP): under FSDP or DeepSpeed a rank's
local gradients are shards, and the norm is left out.

Data-loader wait is the time Lightning's fit loop spends fetching each training batch: Lightning times
that fetch through its profiler, as the action `[_TrainingEpochLoop].train_dataloader_next` (the line
`SimpleProfiler` prints), and the callback times the same action on whichever profiler the trainer
has, from training start to teardown. The copy of the batch to the device comes after it and is not
counted; nor is the batch Lightning prefetches before training starts from a loader without a length.
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:  # type-checked against the standalone distribution, the one the test extra installs
    from pytorch_lightning import Callback
    from pytorch_lightning.strategies import DDPStrategy, DeepSpeedStrategy, SingleDeviceStrategy
else:
    try:
        from lightning.pytorch import Callback
        from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy, SingleDeviceStrategy
    except ImportError:  # the standalone distribution
        try:
            from pytorch_lightning import Callback
            from pytorch_lightning.strategies import DDPStrategy, DeepSpeedStrategy, SingleDeviceStrategy
        except ImportError as exc:
            raise ImportError("trainmon.torch.adapters.lightning needs PyTorch Lightning: "
                              "pip install pytorch-lightning") from exc

from trainmon.torch._monitor import Phase, TrainingMonitor


def batch_size(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor."""
    while isinstance(batch, (list, tuple, dict)) and batch:
        batch = next(iter(batch.values())) if isinstance(batch, dict) else batch[0]
    shape = getattr(batch, "shape", None)
    return int(shape[0]) if shape else 0


FETCH_ACTION = ".train_dataloader_next"  # Lightning's profiler action around each training batch's fetch


class FetchTimer:
    """Adds the time of each training-batch fetch, as Lightning's profiler sees it, to the monitor's data wait."""

    def __init__(self, profiler: Any, monitor: TrainingMonitor) -> None:
        self._profiler = profiler
        self._monitor = monitor
        self._start: Callable[[str], None] = profiler.start
        self._stop: Callable[[str], None] = profiler.stop
        self._began: float | None = None
        profiler.start, profiler.stop = self.start, self.stop

    def start(self, action_name: str) -> None:
        self._start(action_name)
        if action_name.endswith(FETCH_ACTION):
            self._began = perf_counter()

    def stop(self, action_name: str) -> None:
        if action_name.endswith(FETCH_ACTION) and self._began is not None:
            if self._monitor.enabled:
                self._monitor.state.data_wait += perf_counter() - self._began
            self._began = None
        self._stop(action_name)

    def remove(self) -> None:
        """Give the profiler its own methods back."""
        if self._profiler.start == self.start:
            del self._profiler.start, self._profiler.stop


def whole_gradients(strategy: Any) -> bool:
    """Whether each rank holds every parameter's whole gradient (DeepSpeed subclasses DDP but shards)."""
    return isinstance(strategy, (SingleDeviceStrategy, DDPStrategy)) and not isinstance(strategy, DeepSpeedStrategy)


class TrainmonCallback(Callback):
    """Reports a Lightning run through a `TrainingMonitor`.

    Args:
        monitor: the monitor to drive; one is created (and closed at teardown) when None.
        job_id: for the monitor created here.
        samples: samples in a batch (default: the first dimension of the batch's first tensor).
        tokens: tokens in a batch (default: none counted).
        grad_norm: report the gradient norm (one norm over the gradients per optimizer step, on the device).
    """

    def __init__(self, monitor: TrainingMonitor | None = None, *, job_id: str | None = None,
                 samples: Callable[[Any], int] = batch_size, tokens: Callable[[Any], int] | None = None,
                 grad_norm: bool = True) -> None:
        self._owned = monitor is None
        self._monitor = monitor
        self._job_id = job_id
        self._samples = samples
        self._tokens = tokens
        self._open_at: int | None = None  # trainer.global_step when the open step began
        self._pending = [0, 0, 0]  # samples, tokens and micro-batches of the open step
        self._loss: Any = None  # sum of the open step's normalised micro-batch losses (a tensor, never read here)
        self._grad_norm: Any = None
        self._want_grad_norm = grad_norm
        self._eval: Phase | None = None
        self._fetches: FetchTimer | None = None

    @property
    def monitor(self) -> TrainingMonitor:
        if self._monitor is None:
            self._monitor = TrainingMonitor(job_id=self._job_id)
        return self._monitor

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.monitor.set_framework("lightning")
        self.monitor.watch(model=trainer.strategy.model, scaler=getattr(trainer.precision_plugin, "scaler", None))
        if self._fetches is None:
            self._fetches = FetchTimer(trainer.profiler, self.monitor)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self._open_at is None:
            self._open_at = trainer.global_step
            self.monitor.step_begin()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._pending[0] += self._samples(batch)
        self._pending[1] += self._tokens(batch) if self._tokens is not None else 0
        self._pending[2] += 1
        loss: Any = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None:
            loss = loss.detach() if isinstance(loss, torch.Tensor) else float(loss)
            self._loss = loss if self._loss is None else self._loss + loss
        if self._open_at is None or trainer.global_step == self._open_at:
            return  # accumulating gradients: the optimizer has not stepped yet
        self.monitor.step_end(samples=self._pending[0], tokens=self._pending[1], loss=self._loss,
                              grad_norm=self._grad_norm, microbatches=self._pending[2])
        self._open_at, self._pending, self._loss, self._grad_norm = None, [0, 0, 0], None, None

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if not self._want_grad_norm or not whole_gradients(trainer.strategy):
            return
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        if grads:
            self._grad_norm = torch.nn.utils.get_total_norm(grads).detach()

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._eval = self.monitor.phase("eval").__enter__()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._eval is not None:
            self._eval.__exit__(None, None, None)
            self._eval = None

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self._fetches is not None and stage == "fit":
            self._fetches.remove()
            self._fetches = None
        if self._owned and self._monitor is not None and stage == "fit":
            self._monitor.close()
