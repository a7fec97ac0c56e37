"""The training hook: `TrainingMonitor` reports step-level metrics of one PyTorch process (SPEC §5).

    from trainmon.torch import TrainingMonitor
    mon = TrainingMonitor(job_id="llama-8b")
    mon.watch(model=ddp_model, optimizer=opt, scaler=scaler)
    for batch in mon.dataloader(loader):
        with mon.step(samples=len(batch)):
            ...

PyTorch is the optional extra `trainmon[torch]`; it is imported when `TrainingMonitor` is first
used, so the standard-library parts (`_sender`, `_state`, `_identity`) serve processes without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainmon.torch._monitor import TrainingMonitor

__all__ = ["TrainingMonitor"]


def __getattr__(name: str) -> object:
    if name == "TrainingMonitor":
        from trainmon.torch._monitor import TrainingMonitor

        return TrainingMonitor
    raise AttributeError(f"module 'trainmon.torch' has no attribute {name!r}")
