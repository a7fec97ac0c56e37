"""One rank of a gloo job that trains through a real framework from PyPI under `torch.profiler`.

    python -m tests.torch.framework_job MODE STEPS OUT_DIR

MODE: `hf` (transformers `Trainer` with `TrainmonCallback`, DDP built by the Trainer), `accelerate`
(a loop over what `Accelerator.prepare` returns, the monitor made before it), `megatron` with any of
the suffixes `-overlap` (`overlap_grad_reduce=True`) and `-distopt` (`use_distributed_optimizer=True`):
megatron-core's own `DistributedDataParallel` and `finalize_model_grads`, its steps bracketed by
`trainmon.torch.adapters.megatron.monitored_train_step`.

OUT_DIR/<MODE>-<rank>.json: what the profiler saw over the training window (`c10d::*` ops by name,
`gloo:*` events by name with their input bytes and seconds, and per `c10d::*` op the `backend_spans`)
and what the hook reported over the same window (per op calls, bytes, seconds; comm_wait; steps; in
flight), and for Megatron the time the training thread spent in Megatron's grad-sync waits (`time_waits`).

The Megatron model is wide enough (`MEGATRON_WIDTH`: 17 MB of gradients, each bucket's collective tens
of milliseconds) that a thread hand-off of a few hundred microseconds on a busy 2-core machine is a few
percent of a collective's time, not a third of it.

Megatron on CPU: megatron-core 0.16.1 allocates its grad buffer on `torch.cuda.current_device()`
(`param_and_grad_buffer.py`), which asserts without CUDA; this job alone points it at the CPU. Its
optimizers put their scalars on `device='cuda'` outright, so the step is done by hand on
`param.main_grad` (what its `FP32Optimizer` does).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

from tests.torch.collective_job import DTYPE_BYTES, _numel, settled
from trainmon.torch import TrainingMonitor
from trainmon.wire import Report

FEATURES = 64
MEGATRON_WIDTH = 2048
# The gloo event each coalesced op runs as (gloo reduce-scatters with an all-reduce).
GLOO_EVENT_OF = {"c10d::allreduce_coalesced_": "gloo:all_reduce",
                 "c10d::reduce_scatter_tensor_coalesced_": "gloo:all_reduce",
                 "c10d::allgather_into_tensor_coalesced_": "gloo:all_gather"}


def monitor(mode: str, out: Path) -> TrainingMonitor:
    return TrainingMonitor(job_id=f"framework-{mode}", env={"TRAINMON_INGEST_SOCKET": str(out / "nobody.sock"),
                                                            "TRAINMON_REPORT_INTERVAL": "60"})


def hook_totals(report: Report) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {}
    for c in report.collectives:
        totals = found.setdefault(c.op, [0, 0, 0.0])
        totals[0] += c.calls
        totals[1] += c.bytes
        totals[2] += c.seconds
    return found


def window(mon: TrainingMonitor, train: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run `train` under the profiler; the hook's numbers over the same window."""
    settled(mon)
    before = mon.report()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        extra = train()
    settled(mon)
    after = mon.report()
    gloo: dict[str, list[float]] = {}
    for e in prof.events():
        if e.name.startswith("gloo:"):
            totals = gloo.setdefault(e.name, [0, 0, 0.0])
            totals[0] += 1
            totals[1] += sum(_numel(shape) * DTYPE_BYTES[dtype]  # a 0-dim tensor's shape is [] too
                             for shape, dtype in zip(e.input_shapes, e.input_dtypes, strict=False)
                             if dtype in DTYPE_BYTES)
            totals[2] += e.cpu_time_total / 1e6
    first, last = hook_totals(before), hook_totals(after)
    return {
        **extra,
        "c10d": dict(Counter(e.name for e in prof.events() if e.name.startswith("c10d::"))),
        "spans": backend_spans(prof.events()),
        "gloo": gloo,
        "hook": {op: [v - w for v, w in zip(totals, first.get(op, [0, 0, 0.0]), strict=True)]
                 for op, totals in last.items()},
        "comm_wait": after.comm_wait - before.comm_wait,
        "steps": after.steps - before.steps,
        "inflight": len(after.inflight),
        "framework": after.framework,
        "microbatches": (after.microbatches or 0) - (before.microbatches or 0),
        "pipeline_stage": after.pipeline_stage,
        "loss": after.loss,
        "grad_norm": after.grad_norm,
    }


def backend_spans(events: Any) -> dict[str, float]:
    """Per coalesced `c10d::*` op, the seconds from each call's start on the calling thread to the end of
    the gloo event it ran as (the first one of its name starting after it): gloo's reduce-scatter clones
    its input there before its all-reduce event starts."""
    spans: dict[str, float] = {}
    for c10d, gloo in GLOO_EVENT_OF.items():
        runs = sorted((e.time_range for e in events if e.name == gloo), key=lambda r: r.start)
        for call in sorted((e.time_range for e in events if e.name == c10d), key=lambda r: r.start):
            run = next((r for r in runs if r.start >= call.start), None)
            if run is not None:
                runs.remove(run)
                spans[c10d] = spans.get(c10d, 0.0) + (run.end - call.start) / 1e6
    return spans


def hf(steps: int, out: Path) -> dict[str, Any]:
    import transformers

    from trainmon.torch.adapters.hf import TrainmonCallback

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(FEATURES, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"loss": torch.nn.functional.mse_loss(self.body(x), labels)}

    torch.manual_seed(0)
    data = [{"x": torch.randn(FEATURES), "labels": torch.randn(1)} for _ in range(256)]
    args = transformers.TrainingArguments(output_dir=str(out / "hf"), max_steps=steps, per_device_train_batch_size=4,
                                          logging_steps=1, report_to=[], save_strategy="no", use_cpu=True,
                                          disable_tqdm=True, ddp_backend="gloo", ddp_find_unused_parameters=False)
    callback = TrainmonCallback(job_id="framework-hf")
    trainer = transformers.Trainer(model=Net(), args=args, train_dataset=data, callbacks=[callback])

    def train() -> dict[str, Any]:
        trainer.train()
        return {"wrapped": type(trainer.model_wrapped).__name__}

    return window(callback.monitor, train)


def accelerate(steps: int, out: Path) -> dict[str, Any]:
    from accelerate import Accelerator

    mon = monitor("accelerate", out)  # before `prepare` builds the DDP: it gets the comm hook as it is built
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(FEATURES, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    model, optimizer = accelerator.prepare(net, torch.optim.SGD(net.parameters(), lr=0.01))
    x, y = torch.randn(8, FEATURES), torch.randn(8, 1)

    def train() -> dict[str, Any]:
        for _ in range(steps):
            with mon.step(samples=8) as step:
                loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                step.loss = loss.item()
        return {"wrapped": type(model).__name__}

    return window(mon, train)


def megatron(mode: str, steps: int, out: Path) -> dict[str, Any]:
    torch.cuda.current_device = lambda: torch.device("cpu")  # type: ignore[assignment,return-value]  # see above
    from megatron.core import num_microbatches_calculator, parallel_state
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
        finalize_model_grads,
        param_and_grad_buffer,
    )
    from megatron.core.transformer import TransformerConfig

    from trainmon.torch.adapters.megatron import monitored_train_step

    mon = monitor(mode, out)
    exposed = time_waits(param_and_grad_buffer)
    parallel_state.initialize_model_parallel(1, 1)
    num_microbatches_calculator.init_num_microbatches_calculator(  # 2 micro-batches a step
        dist.get_rank(), None, global_batch_size=16, micro_batch_size=4, data_parallel_size=dist.get_world_size())
    config = TransformerConfig(num_layers=1, hidden_size=16, num_attention_heads=1, use_cpu_initialization=True)
    ddp_config = DistributedDataParallelConfig(overlap_grad_reduce="-overlap" in mode,
                                               use_distributed_optimizer="-distopt" in mode, bucket_size=40_000)
    torch.manual_seed(0)
    width = MEGATRON_WIDTH
    net = torch.nn.Sequential(torch.nn.Linear(FEATURES, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                              torch.nn.ReLU(), torch.nn.Linear(width, 1))
    model = DistributedDataParallel(config, ddp_config, net)
    x, y = torch.randn(8, FEATURES), torch.randn(8, 1)

    def train_step() -> tuple[dict[str, torch.Tensor], int, bool, bool, int, float, None]:
        """Megatron-LM's `train_step` shape: (loss_dict, skipped_iter, should_checkpoint, should_exit,
        exit_code, grad_norm, num_zeros_in_grad)."""
        model.zero_grad_buffer()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        finalize_model_grads([model])
        grads = [p.main_grad for p in model.parameters()]
        with torch.no_grad():
            for p, g in zip(model.parameters(), grads, strict=True):
                p -= 0.01 * g
        if ddp_config.use_distributed_optimizer:  # a blocking all-gather of the updated params
            model.start_param_sync()
        return {"lm loss": loss.detach()}, 0, False, False, 0, float(torch.linalg.vector_norm(
            torch.stack([g.norm() for g in grads]))), None

    step = monitored_train_step(mon, train_step, samples_per_step=8)
    step()  # warm-up outside the window
    exposed[0] = 0.0

    def train() -> dict[str, Any]:
        for _ in range(steps):
            step()
        return {"buckets": sum(len(g.buckets) for g in model.bucket_groups),
                "bucket_groups": len(model.bucket_groups)}

    result = window(mon, train)
    result["exposed"] = exposed[0]
    return result


def time_waits(module: Any) -> list[float]:
    """The truth for comm_wait: the training thread's time in the launch-and-wait at the exit of each
    blocking `_coalescing_manager` `module` opens and in an async one's `cm.wait()`, timed around the
    calls (an async manager's exit only launches)."""
    exposed = [0.0]
    manager = module._coalescing_manager  # the hook's wrapper: what Megatron calls
    parameters = inspect.signature(manager)

    def timed(call: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        try:
            return call()
        finally:
            exposed[0] += time.perf_counter() - t0

    @contextlib.contextmanager
    def timed_manager(*args: Any, **kwargs: Any) -> Iterator[Any]:
        context = manager(*args, **kwargs)
        cm = context.__enter__()
        wait = cm.wait
        cm.wait = lambda: timed(wait)
        try:
            yield cm
        except BaseException as error:
            if not context.__exit__(type(error), error, error.__traceback__):
                raise
        else:
            if parameters.bind(*args, **kwargs).arguments.get("async_ops", False):
                context.__exit__(None, None, None)
            else:
                timed(lambda: context.__exit__(None, None, None))

    module._coalescing_manager = timed_manager
    return exposed


def main(mode: str, steps: int, out: Path) -> None:
    if mode != "hf":  # the Trainer makes its own
        dist.init_process_group("gloo")
    if mode == "hf":
        result = hf(steps, out)
    elif mode == "accelerate":
        result = accelerate(steps, out)
    else:
        result = megatron(mode, steps, out)
    (out / f"{mode}-{dist.get_rank()}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]))
