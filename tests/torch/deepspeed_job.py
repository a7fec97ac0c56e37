"""One rank of a 2-rank DeepSpeed job on gloo (CPU accelerator) under `torch.profiler`.

    python -m tests.torch.deepspeed_job MODE STEPS OUT_DIR

MODE: `zero1`, `zero2`, `zero3`, with the suffixes `-overlap` for `overlap_comm=True` and `-fp16` for fp16
with DeepSpeed's dynamic loss scaler (its first steps overflow and are skipped). The monitor is
made as a user's job makes it (before `deepspeed.initialize`, then `mon.watch(model=engine)`), one
`mon.step()` per `engine.step()`, the loss and `engine.get_global_grad_norm()` passed by hand.

OUT_DIR/<MODE>-<rank>.json: what `tests.torch.framework_job.window` measured over STEPS steps after a
warm-up step (the profiler's `c10d::*` ops and `gloo:*` events against the hook's calls, bytes and
seconds per op; comm_wait, steps, loss, grad norm), the training thread's time in DeepSpeed's collective
calls and their waits (`exposed`, see `time_calls`), the engine's step count over the window, what the
engine said after each step, the warm-up's first (`engine`: loss, grad norm, skipped steps, loss scale),
and the report's loss scaler, loss scale and skipped steps.
JOB_RAISE=1 makes the rank raise once the job is done, as a crash would (its goodbye must say `error`).

fp16 on CPU: DeepSpeed's CPU accelerator says fp16 is unsupported unless mkldnn has fp16 kernels (not
on most x86 CPUs) and the engine refuses the config; this job alone says it is supported (torch runs
fp16 on the CPU, slowly), so that the engine's real loss scaler runs. On CPU, DeepSpeed's comm backend
also JIT-compiles its shared-memory op (`deepspeed_shm_comm`, a C++ build of ~40 s needing g++) at
`init_distributed`; only `inference_all_reduce` (inference's tensor parallelism) uses it, not training,
so this job skips the build, as a GPU accelerator has no such op.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deepspeed
import torch
import torch.distributed as dist
from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator
from deepspeed.comm.torch import TorchBackend

from tests.torch.framework_job import FEATURES, window
from trainmon.torch import TrainingMonitor

BATCH = 8
# the collective methods of deepspeed.comm's backend: what its engines and ZeRO stages call
COLLECTIVES = ("all_reduce", "all_reduce_coalesced", "inference_all_reduce", "all_gather", "all_gather_into_tensor",
               "all_gather_base", "all_gather_coalesced", "reduce_scatter", "reduce_scatter_tensor",
               "all_to_all_single", "all_to_all", "broadcast", "reduce", "gather", "scatter", "barrier")


def config(mode: str) -> dict[str, Any]:
    stage = int(mode.removeprefix("zero")[0])
    # fp16: a loss scale of 2**18 overflows the first steps, each skipped with the scale halved (hysteresis 1)
    fp16 = {"enabled": "-fp16" in mode, "initial_scale_power": 18, "hysteresis": 1, "loss_scale_window": 1000}
    return {"train_micro_batch_size_per_gpu": BATCH, "gradient_accumulation_steps": 1, "steps_per_print": 10**9,
            "zero_allow_untested_optimizer": True, "fp16": fp16,
            "zero_optimization": {"stage": stage, "overlap_comm": "-overlap" in mode,
                                  "reduce_bucket_size": 40_000, "allgather_bucket_size": 40_000,
                                  "stage3_prefetch_bucket_size": 40_000,
                                  "stage3_param_persistence_threshold": 0}}  # ZeRO-3: no parameter stays whole


class TimedWork:
    """A collective's work object whose `wait()` adds to the exposed time."""

    def __init__(self, work: Any, exposed: list[float]) -> None:
        self._work, self._exposed = work, exposed

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        return timed(self._exposed, self._work.wait)(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def timed(exposed: list[float], call: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            exposed[0] += time.perf_counter() - t0

    return wrapper


def time_calls(exposed: list[float]) -> None:
    """The truth for comm_wait: the training thread's time in each collective call of DeepSpeed's torch
    backend and in the `wait()` of the work it returns (ZeRO-3 waits for its prefetched all-gathers)."""

    def returning_timed_work(call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            work = timed(exposed, call)(*args, **kwargs)
            return TimedWork(work, exposed) if hasattr(work, "wait") else work

        return functools.wraps(call)(wrapper)

    for name in COLLECTIVES:
        setattr(TorchBackend, name, returning_timed_work(getattr(TorchBackend, name)))


def main(mode: str, steps: int, out: Path) -> None:
    CPU_Accelerator.is_fp16_supported = lambda self: True  # see above
    # see above; `deepspeed.comm.torch` names the torch package there, hence the module by its class
    comm_backend: Any = sys.modules[TorchBackend.__module__]
    comm_backend.build_shm_op = lambda: None
    mon = TrainingMonitor(job_id=f"deepspeed-{mode}")  # TRAINMON_* from the environment, as a user's job
    deepspeed.init_distributed(dist_backend="gloo")
    exposed = [0.0]
    time_calls(exposed)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(FEATURES, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                              torch.nn.ReLU(), torch.nn.Linear(512, 1))
    engine, *_ = deepspeed.initialize(model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.01),
                                      config=config(mode))
    mon.watch(model=engine)
    torch.manual_seed(dist.get_rank())
    dtype = torch.float16 if engine.fp16_enabled() else torch.float32
    x, y = torch.randn(BATCH, FEATURES, dtype=dtype), torch.randn(BATCH, 1, dtype=dtype)
    engine_seen: list[dict[str, Any]] = []

    def step() -> None:
        with mon.step(samples=BATCH) as s:
            loss = torch.nn.functional.mse_loss(engine(x), y)
            engine.backward(loss)
            engine.step()
            s.loss = loss.item()
            norm = engine.get_global_grad_norm()
            s.grad_norm = None if norm is None else float(norm)
        engine_seen.append({"loss": s.loss, "grad_norm": s.grad_norm, "skipped": engine.skipped_steps,
                            "scale": getattr(engine.optimizer, "cur_scale", None)})

    step()  # warm-up outside the window
    exposed[0] = 0.0
    first = engine.global_steps

    def train() -> dict[str, Any]:
        for _ in range(steps):
            step()
        return {"engine_steps": engine.global_steps - first, "engine": engine_seen}

    result = window(mon, train)
    report = mon.report()
    result.update(exposed=exposed[0], loss_scale=report.loss_scale, loss_scaler=report.loss_scaler,
                  skipped_steps=report.skipped_steps)
    (out / f"{mode}-{dist.get_rank()}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()
    if os.environ.get("JOB_RAISE"):
        raise RuntimeError("planted failure after the last step")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]))
