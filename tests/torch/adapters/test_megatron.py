"""The Megatron adapter and the loss scale of megatron-core's `ChainedOptimizer` (the real class).

megatron-core 0.16.1's fp16 optimizer (`Float16OptimizerWithFloat16Params`) and its grad scalers put
their scalars on `device='cuda'` when built, so without CUDA the chained optimizers are objects with
the attributes `ChainedOptimizer.step` and trainmon use of them (`config`, `grad_scaler.scale`,
`prepare_grads`, `get_grad_norm`, `get_parameters`, `step_with_ready_grads`, `get_loss_scale`).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from tests.helpers.tools import require_module
from tests.torch.test_monitor import ListTransport
from trainmon.torch import TrainingMonitor
from trainmon.torch.adapters.megatron import monitored_train_step


class Fp16Optimizer:
    """One chained optimizer: fp16 with a grad scaler at `scale`, or bf16 (`scale` None)."""

    def __init__(self, scale: float | None, found_inf: list[bool]) -> None:
        from megatron.core.optimizer import OptimizerConfig

        self.config = OptimizerConfig(clip_grad=0.0)
        self.grad_scaler = None if scale is None else SimpleNamespace(scale=torch.tensor([scale]))
        self.found_inf = found_inf

    def prepare_grads(self) -> bool:
        return self.found_inf.pop(0)

    def get_grad_norm(self) -> float:
        return 2.5

    def get_parameters(self) -> list[torch.Tensor]:
        return []

    def step_with_ready_grads(self) -> bool:
        return True

    def get_loss_scale(self) -> torch.Tensor:
        return self.grad_scaler.scale if self.grad_scaler is not None else torch.tensor([1.0])


def monitor(transport: ListTransport) -> TrainingMonitor:
    return TrainingMonitor(job_id="megatron", transport=transport, env={"TRAINMON_REPORT_INTERVAL": "60"})


def test_the_loss_scale_is_read_through_a_chained_optimizer() -> None:
    """`get_megatron_optimizer` returns a `ChainedOptimizer`, which has no `grad_scaler` of its own."""
    chained_optimizer = require_module("megatron.core.optimizer", quiet=True).ChainedOptimizer
    optimizer = chained_optimizer([Fp16Optimizer(65536.0, [False, True, False])])
    mon = monitor(ListTransport())
    losses = iter([1.5, 1.25, 1.0])

    def train_step() -> tuple[object, ...]:
        updated, grad_norm, num_zeros = optimizer.step()
        return {"lm loss": torch.tensor(next(losses))}, int(not updated), False, False, 0, grad_norm, num_zeros

    step = monitored_train_step(mon, train_step, optimizer=optimizer, samples_per_step=8)
    for _ in range(3):
        step()
    report = mon.report()
    mon.close()

    assert not hasattr(optimizer, "grad_scaler")
    assert ("megatron", "megatron") == (report.framework, report.loss_scaler)
    assert (65536.0, 1, 2.5) == (report.loss_scale, report.skipped_steps, report.grad_norm)
    assert (3, 24, 1.0) == (report.steps, report.samples, report.loss)


def test_a_bf16_chain_has_no_loss_scale() -> None:
    chained_optimizer = require_module("megatron.core.optimizer", quiet=True).ChainedOptimizer
    optimizer = chained_optimizer([Fp16Optimizer(None, [False])])
    mon = monitor(ListTransport())
    step = monitored_train_step(mon, lambda: optimizer.step(), optimizer=optimizer)
    step()
    report = mon.report()
    mon.close()

    assert ("none", None, 1, 0) == (report.loss_scaler, report.loss_scale, report.steps, report.skipped_steps)


def test_the_microbatches_of_a_step_are_megatrons_calculators() -> None:
    calculator = require_module("megatron.core.num_microbatches_calculator", quiet=True)
    calculator.init_num_microbatches_calculator(0, None, global_batch_size=32, micro_batch_size=4,
                                                data_parallel_size=2)
    mon = monitor(ListTransport())
    try:
        step = monitored_train_step(mon, lambda: None, tokens_per_step=4096)
        step()
        step()
        report = mon.report()
    finally:
        mon.close()
        calculator.destroy_num_microbatches_calculator()

    assert (2, 8, 8192) == (report.steps, report.microbatches, report.tokens)


def test_microbatches_given_win_over_the_calculator() -> None:
    mon = monitor(ListTransport())
    step = monitored_train_step(mon, lambda: None, microbatches_per_step=3)
    step()
    report = mon.report()
    mon.close()

    assert 3 == report.microbatches
