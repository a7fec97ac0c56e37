"""The Hugging Face callback counts optimizer steps, not micro-batches, under gradient accumulation."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.helpers.tools import require_module
from tests.torch.test_monitor import ListTransport
from trainmon import wire
from trainmon.torch import TrainingMonitor

STEPS = 4
BATCH = 4
ACCUMULATE = 3


def test_hf_callback_counts_optimizer_steps_under_accumulation(tmp_path: Path) -> None:
    transformers = require_module("transformers")
    require_module("accelerate")
    from trainmon.torch.adapters.hf import TrainmonCallback

    optimizer_steps = [0]

    class Regression(torch.nn.Linear):
        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:  # type: ignore[override]
            return {"loss": torch.nn.functional.mse_loss(super().forward(x), labels)}

    class CountingSGD(torch.optim.SGD):
        def step(self, closure: None = None) -> None:  # type: ignore[override]
            optimizer_steps[0] += 1
            super().step()

    data = [{"x": torch.randn(4), "labels": torch.randn(1)} for _ in range(STEPS * BATCH * ACCUMULATE)]
    mon = TrainingMonitor(job_id="hf", transport=ListTransport(), env={"TRAINMON_REPORT_INTERVAL": "60"})
    model = Regression(4, 1)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=STEPS, per_device_train_batch_size=BATCH,
                                          gradient_accumulation_steps=ACCUMULATE, logging_steps=1, report_to=[],
                                          save_strategy="no", use_cpu=True, disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data,
                                   optimizers=(CountingSGD(model.parameters(), lr=0.1), None),
                                   callbacks=[TrainmonCallback(mon)])
    trainer.train()
    report = wire.decode(wire.encode(mon.report()))
    mon.close()

    assert optimizer_steps[0] == STEPS == trainer.state.global_step
    assert (STEPS, STEPS * BATCH * ACCUMULATE, STEPS * ACCUMULATE) == (report.steps, report.samples,
                                                                      report.microbatches)
    assert STEPS == report.step_buckets[-1]
