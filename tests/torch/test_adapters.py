"""The Hugging Face callback drives a monitor from the real `Trainer` loop (Lightning: tests/torch/adapters)."""

from __future__ import annotations

import torch

from tests.helpers.tools import require_module
from tests.torch.test_monitor import ListTransport
from trainmon import wire
from trainmon.torch import TrainingMonitor

STEPS = 4


def monitor(transport: ListTransport) -> TrainingMonitor:
    return TrainingMonitor(job_id="adapter", transport=transport, env={"TRAINMON_REPORT_INTERVAL": "60"})


def test_hf_callback_counts_steps_and_logged_loss(tmp_path: object) -> None:
    transformers = require_module("transformers")
    require_module("accelerate")
    from trainmon.torch.adapters.hf import TrainmonCallback

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"loss": torch.nn.functional.mse_loss(self.layer(x), labels)}

    data = [{"x": torch.randn(4), "labels": torch.randn(1)} for _ in range(64)]
    transport = ListTransport()
    mon = monitor(transport)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=STEPS, per_device_train_batch_size=4,
                                          logging_steps=1, report_to=[], save_strategy="no", use_cpu=True,
                                          disable_tqdm=True)
    trainer = transformers.Trainer(model=Tiny(), args=args, train_dataset=data,
                                   callbacks=[TrainmonCallback(mon, tokens_per_sample=10)])
    trainer.train()
    report = wire.decode(wire.encode(mon.report()))
    mon.close()

    assert (STEPS, STEPS * 4, STEPS * 40, "hf") == (report.steps, report.samples, report.tokens, report.framework)
    assert report.loss is not None
