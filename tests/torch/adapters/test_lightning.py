"""The Lightning callback under gradient accumulation, in real `pytorch_lightning.Trainer.fit` runs.

Ground truth is what the LightningModule itself sees (`lightning_job.Tiny`): its raw per-micro-batch
losses and the gradient norm before each optimizer step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.tools import require_module
from tests.torch.jobs import run_job
from tests.torch.test_monitor import ListTransport
from trainmon import wire
from trainmon.torch import TrainingMonitor

# Lightning 2.6.6's own use of torch's pytree, not ours
pytestmark = pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:FutureWarning")

STEPS = 4
BATCH = 8


def fit(tmp_path: Path, accumulate: int, **callback: Any) -> tuple[wire.Report, list[float], list[float]]:
    """A `STEPS`-step run; the report after it, the raw micro-batch losses and the grad norm per optimizer step."""
    pl = require_module("pytorch_lightning")
    from tests.torch.adapters.lightning_job import Tiny
    from trainmon.torch.adapters.lightning import TrainmonCallback

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(STEPS * accumulate * BATCH, 4),
                                          torch.randn(STEPS * accumulate * BATCH, 1) * 3)
    mon = TrainingMonitor(job_id="lightning", transport=ListTransport(), env={"TRAINMON_REPORT_INTERVAL": "60"})
    trainer = pl.Trainer(max_steps=STEPS, accumulate_grad_batches=accumulate, accelerator="cpu", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=str(tmp_path), callbacks=[TrainmonCallback(mon, **callback)])
    module = Tiny()
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=BATCH))
    report = wire.decode(wire.encode(mon.report()))
    mon.close()
    return report, module.losses, module.norms


@pytest.mark.parametrize("accumulate", [1, 3])
def test_loss_is_the_mean_of_the_optimizer_steps_micro_batches(tmp_path: Path, accumulate: int) -> None:
    """Lightning hands the callback each loss divided by accumulate_grad_batches; the report holds the real one."""
    report, losses, _ = fit(tmp_path, accumulate)

    assert (STEPS, STEPS * accumulate * BATCH, "lightning") == (report.steps, report.samples, report.framework)
    assert STEPS == report.step_buckets[-1]
    assert len(losses) == STEPS * accumulate
    assert report.loss == pytest.approx(sum(losses[-accumulate:]) / accumulate, rel=1e-6)


def test_grad_norm_is_the_norm_before_the_last_optimizer_step(tmp_path: Path) -> None:
    report, _, norms = fit(tmp_path, accumulate=2)

    assert len(norms) == STEPS
    assert report.grad_norm == pytest.approx(norms[-1], rel=1e-6)
    assert norms[-1] != pytest.approx(norms[-2], rel=1e-6)  # the last step's, not any other's


def test_grad_norm_can_be_turned_off(tmp_path: Path) -> None:
    report, _, _ = fit(tmp_path, accumulate=2, grad_norm=False)

    assert report.grad_norm is None


def test_two_ddp_ranks_under_accumulation_report_each_ranks_exact_numbers(tmp_path: Path) -> None:
    """`strategy="ddp"` over 2 gloo processes, 3 micro-batches per step: DDP syncs gradients once per step."""
    require_module("pytorch_lightning")
    accumulate = 3
    run_job(str(accumulate), STEPS, tmp_path, ranks=2, module="tests.torch.adapters.lightning_job",
            env={"TRAINMON_INGEST_SOCKET": str(tmp_path / "absent.sock")})
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(2)]

    for seen in ranks:
        assert (STEPS, STEPS * accumulate * BATCH) == (seen["steps"], seen["samples"])
        assert STEPS == seen["global_step"] == len(seen["norms"])
        assert seen["loss"] == pytest.approx(sum(seen["losses"][-accumulate:]) / accumulate, rel=1e-6)
        assert seen["grad_norm"] == pytest.approx(seen["norms"][-1], rel=1e-6)
        assert seen["profiled_all_reduce"] == seen["calls"]["all_reduce"]
    assert ranks[0]["grad_norm"] == pytest.approx(ranks[1]["grad_norm"], rel=1e-6)  # all-reduced gradients
    assert ranks[0]["loss"] != pytest.approx(ranks[1]["loss"], rel=1e-6)  # each rank's own batches
