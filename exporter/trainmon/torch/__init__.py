"""The training hook: `TrainingMonitor` reports step-level metrics of one PyTorch process (SPEC §5).

    from trainmon.torch import TrainingMonitor
    mon = TrainingMonitor(job_id="llama-8b")
    mon.watch(model=ddp_model, optimizer=opt, scaler=scaler)
    for batch in mon.dataloader(loader):
        with mon.step(samples=len(batch)):
            ...

PyTorch is the optional extra `trainmon[torch]`; it is imported when `TrainingMonitor` (or `Phase`,
`Patches`, for integrations such as verl's) is first used. The standard-library core it builds on is
`trainmon.hook`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainmon.torch._monitor import Phase, TrainingMonitor
    from trainmon.torch._scaler import Patches

__all__ = ["Patches", "Phase", "TrainingMonitor"]


def __getattr__(name: str) -> object:
    if name in ("Phase", "TrainingMonitor"):
        from trainmon.torch import _monitor

        return getattr(_monitor, name)
    if name == "Patches":
        from trainmon.torch._scaler import Patches

        return Patches
    raise AttributeError(f"module 'trainmon.torch' has no attribute {name!r}")
