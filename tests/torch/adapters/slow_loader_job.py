"""One rank of a 2-process run of a real framework over a planted slow data loader (test_data_wait.py).

    python -m tests.torch.adapters.slow_loader_job FRAMEWORK STEPS OUT

FRAMEWORK: `lightning` (`pytorch_lightning.Trainer`, `strategy="ddp"`) or `hf` (`transformers.Trainer`,
DDP over gloo), each with its `TrainmonCallback`, `ACCUMULATE` micro-batches per optimizer step. The
loader's collate function sleeps `SLOW_S` per batch and adds the time it took to the planted wait, the
truth the reported data wait is held to. Writes OUT/FRAMEWORK-N.json: `planted` (seconds), `batches`
(collate calls), `data_wait` and `steps` as the hook reported them.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from trainmon.torch import TrainingMonitor

SLOW_S = 0.3
ACCUMULATE = 2
BATCH = 4
FEATURES = 8


class SlowCollate:
    """`default_collate`, after a planted sleep; counts its calls and the time they took."""

    def __init__(self) -> None:
        self.planted = 0.0
        self.batches = 0

    def __call__(self, items: list[Any]) -> Any:
        began = time.perf_counter()
        time.sleep(SLOW_S)
        batch = torch.utils.data.default_collate(items)
        self.planted += time.perf_counter() - began
        self.batches += 1
        return batch


def lightning(steps: int, out: Path, collate: SlowCollate) -> TrainingMonitor:
    import pytorch_lightning as pl

    from tests.torch.adapters.lightning_job import Tiny
    from trainmon.torch.adapters.lightning import TrainmonCallback

    warnings.filterwarnings("ignore", category=FutureWarning)  # Lightning 2.6.6's own pytree use
    samples = 2 * steps * ACCUMULATE * BATCH
    data = torch.utils.data.TensorDataset(torch.randn(samples, 4), torch.randn(samples, 1))
    mon = TrainingMonitor(job_id="slow-loader-lightning")
    trainer = pl.Trainer(max_steps=steps, accumulate_grad_batches=ACCUMULATE, accelerator="cpu", devices=2,
                         strategy="ddp", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=str(out), callbacks=[TrainmonCallback(mon)])
    trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=BATCH, collate_fn=collate))
    return mon


def hf(steps: int, out: Path, collate: SlowCollate) -> TrainingMonitor:
    import transformers

    from trainmon.torch.adapters.hf import TrainmonCallback

    class Regression(torch.nn.Linear):
        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:  # type: ignore[override]
            return {"loss": torch.nn.functional.mse_loss(super().forward(x), labels)}

    data = [{"x": torch.randn(FEATURES), "labels": torch.randn(1)} for _ in range(2 * steps * ACCUMULATE * BATCH)]
    args = transformers.TrainingArguments(output_dir=str(out / "hf"), max_steps=steps,
                                          per_device_train_batch_size=BATCH, gradient_accumulation_steps=ACCUMULATE,
                                          logging_steps=1, report_to=[], save_strategy="no", use_cpu=True,
                                          disable_tqdm=True, ddp_backend="gloo", ddp_find_unused_parameters=False)
    callback = TrainmonCallback(job_id="slow-loader-hf")
    transformers.Trainer(model=Regression(FEATURES, 1), args=args, train_dataset=data, data_collator=collate,
                         callbacks=[callback]).train()
    return callback.monitor


def main(framework: str, steps: int, out: Path) -> None:
    torch.manual_seed(0)
    collate = SlowCollate()
    mon = lightning(steps, out, collate) if framework == "lightning" else hf(steps, out, collate)
    report = mon.report()
    result = {"planted": collate.planted, "batches": collate.batches, "data_wait": report.data_wait,
              "steps": report.steps}
    (out / f"{framework}-{dist.get_rank()}.json").write_text(json.dumps(result))
    mon.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]))
