"""One rank of a 2-process Lightning DDP run with gradient accumulation (tests/torch/adapters/test_lightning.py).

`python -m tests.torch.adapters.lightning_job ACCUMULATE STEPS OUT`, launched like torchrun (RANK,
LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT). Writes OUT/rank-N.json: what `tests.torch.framework_job.window`
measured over `fit` (the profiler's `c10d::*` ops and `gloo:*` events against the hook's calls, bytes and
seconds per op; comm_wait, steps, loss, grad norm), the samples counted, and what the LightningModule itself
saw (raw micro-batch losses, the grad norm before each optimizer step).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from tests.torch.framework_job import window
from trainmon.torch import TrainingMonitor
from trainmon.torch.adapters.lightning import TrainmonCallback

BATCH = 8


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.losses: list[float] = []
        self.norms: list[float] = []

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.losses.append(loss.item())
        return loss

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        self.norms.append(torch.nn.utils.get_total_norm(grads).item())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(accumulate: int, steps: int, out: Path) -> None:
    warnings.filterwarnings("ignore", category=FutureWarning)  # Lightning 2.6.6's own pytree use
    torch.manual_seed(0)
    samples = 2 * steps * accumulate * BATCH
    data = torch.utils.data.TensorDataset(torch.randn(samples, 4), torch.randn(samples, 1) * 3)
    mon = TrainingMonitor(job_id="lightning-ddp")
    module = Tiny()
    trainer = pl.Trainer(max_steps=steps, accumulate_grad_batches=accumulate, accelerator="cpu", devices=2,
                         strategy="ddp", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=str(out), callbacks=[TrainmonCallback(mon)])

    def train() -> dict[str, Any]:
        trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=BATCH))
        return {"losses": module.losses, "norms": module.norms, "global_step": trainer.global_step}

    # the ground truth: every collective torch dispatched, from Python or from DDP's C++ reducer
    result = window(mon, train)
    result["samples"] = mon.report().samples
    mon.close()
    (out / f"rank-{trainer.global_rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))
