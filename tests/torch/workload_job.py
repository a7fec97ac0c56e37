"""A small gloo training job with planted causes of lost time, one process per rank.

    python -m tests.torch.workload_job STEPS OUT_DIR      (STEPS 0: run until OUT_DIR/stop exists; every rank
                                                          stops at the same step, see `stop_agreed`)

Started through `tests.torch.jobs.start_job(..., module="tests.torch.workload_job")`; knobs come from the
environment (per rank through `rank_env`):
JOB_ID; JOB_FLOPS_PER_TOKEN (given to `TrainingMonitor`); JOB_COMPUTE_SECONDS (compute per step, a
sleep: a larger one on one rank makes it a straggler); JOB_ROTATING_SECONDS (on step i, rank
i % world sleeps this long before the all-reduce, so every rank waits in communication in turn: a
communication-bound job without a straggler); JOB_BATCH_SECONDS (the loader's time per batch);
JOB_PHASE, JOB_PHASE_SECONDS, JOB_PHASE_EVERY (enter that phase for that long every N steps); JOB_HOLD
(keep the monitor open after the last step until OUT_DIR/release exists); JOB_TOKENS (the real tokens of each
step, default 16 a sample), JOB_MICROBATCHES (passed to each step) and JOB_PIPELINE_STAGE (given to
`TrainingMonitor`): the work of a rank, as a loop reports it.
The last report is written to OUT_DIR/report-<rank>.json.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist

from trainmon.torch import TrainingMonitor

TOKENS_PER_SAMPLE = 16


def env_float(name: str) -> float:
    return float(os.environ.get(name, "0"))


def batches(batch_seconds: float) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1)
    while True:
        time.sleep(batch_seconds)
        yield torch.randn(8, 16, generator=gen), torch.randn(8, 1, generator=gen)


def stop_agreed(out: Path, step: int, rank: int) -> bool:
    """Whether a job run until told stops before `step`. Once OUT_DIR/stop exists, rank 0 names a step two ahead of
    its own and every rank stops there: the gradient all-reduce keeps the ranks within a step of each other, so no
    rank has passed it. A rank that stopped on its own left its peers in an all-reduce until `stop` killed them a
    minute later (no collective here: one would count in what the job reports)."""
    at = out / "stop-at"
    if rank == 0 and (out / "stop").exists() and not at.exists():
        (staged := out / "stop-at.staged").write_text(str(step + 2))
        staged.replace(at)
    return at.exists() and step >= int(at.read_text())


def main(steps: int, out: Path) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    compute, rotating = env_float("JOB_COMPUTE_SECONDS"), env_float("JOB_ROTATING_SECONDS")
    phase, phase_seconds = os.environ.get("JOB_PHASE", ""), env_float("JOB_PHASE_SECONDS")
    phase_every = int(os.environ.get("JOB_PHASE_EVERY", "0"))
    flops = os.environ.get("JOB_FLOPS_PER_TOKEN")
    stage = os.environ.get("JOB_PIPELINE_STAGE")
    microbatches = int(os.environ.get("JOB_MICROBATCHES", "0"))
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    dist.barrier()  # before the monitor patches collectives: start-up skew is not communication wait
    mon = TrainingMonitor(job_id=os.environ.get("JOB_ID", "workload"),
                          flops_per_token=float(flops) if flops else None,
                          pipeline_stage=int(stage) if stage else None)
    mon.watch(model=model, optimizer=opt)
    counter = range(steps) if steps else itertools.count()
    for i, (x, y) in zip(counter, mon.dataloader(batches(env_float("JOB_BATCH_SECONDS"))), strict=False):
        if steps == 0 and stop_agreed(out, i, rank):
            break
        if phase and phase_every and i and i % phase_every == 0:
            with mon.phase(phase):
                time.sleep(phase_seconds)
        tokens = int(os.environ.get("JOB_TOKENS", len(x) * TOKENS_PER_SAMPLE))
        with mon.step(samples=len(x), tokens=tokens, microbatches=microbatches):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            time.sleep(compute + (rotating if i % world == rank else 0.0))
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world  # type: ignore[operator,assignment]
            opt.step()
    while os.environ.get("JOB_HOLD") and not (out / "release").exists():
        time.sleep(0.05)
    dist.barrier()
    mon.close()
    (out / f"report-{rank}.json").write_text(json.dumps(dataclasses.asdict(mon.report())))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]))
