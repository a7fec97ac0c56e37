"""PyTorch Lightning: `Trainer(callbacks=[TrainmonCallback(job_id="...")])`.

One monitor step per optimizer step (several batches under gradient accumulation); validation
runs inside the `eval` phase; the DDP model, optimizer and mixed-precision scaler are watched when
training starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # type-checked against the standalone distribution, the one the test extra installs
    from pytorch_lightning import Callback
else:
    try:
        from lightning.pytorch import Callback
    except ImportError:  # the standalone distribution
        try:
            from pytorch_lightning import Callback
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


class TrainmonCallback(Callback):
    """Reports a Lightning run through a `TrainingMonitor`.

    Args:
        monitor: the monitor to drive; one is created (and closed at teardown) when None.
        job_id: for the monitor created here.
        samples: samples in a batch (default: the first dimension of the batch's first tensor).
        tokens: tokens in a batch (default: none counted).
    """

    def __init__(self, monitor: TrainingMonitor | None = None, *, job_id: str | None = None,
                 samples: Callable[[Any], int] = batch_size, tokens: Callable[[Any], int] | None = None) -> None:
        self._owned = monitor is None
        self._monitor = monitor
        self._job_id = job_id
        self._samples = samples
        self._tokens = tokens
        self._open_at: int | None = None  # trainer.global_step when the open step began
        self._pending = [0, 0]  # samples, tokens of the open step
        self._eval: Phase | None = None

    @property
    def monitor(self) -> TrainingMonitor:
        if self._monitor is None:
            self._monitor = TrainingMonitor(job_id=self._job_id)
        return self._monitor

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.monitor.set_framework("lightning")
        self.monitor.watch(model=trainer.strategy.model, scaler=getattr(trainer.precision_plugin, "scaler", None))

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self._open_at is None:
            self._open_at = trainer.global_step
            self.monitor.step_begin()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._pending[0] += self._samples(batch)
        self._pending[1] += self._tokens(batch) if self._tokens is not None else 0
        if self._open_at is None or trainer.global_step == self._open_at:
            return  # accumulating gradients: the optimizer has not stepped yet
        loss: Any = outputs.get("loss") if isinstance(outputs, dict) else outputs
        self.monitor.step_end(samples=self._pending[0], tokens=self._pending[1],
                              loss=loss.detach() if hasattr(loss, "detach") else loss)
        self._open_at, self._pending = None, [0, 0]

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._eval = self.monitor.phase("eval").__enter__()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._eval is not None:
            self._eval.__exit__(None, None, None)
            self._eval = None

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self._owned and self._monitor is not None and stage == "fit":
            self._monitor.close()
