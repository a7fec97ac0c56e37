"""A 2-rank gloo training job whose behaviour the alerting test switches while it runs.

    python -m tests.e2e.alerting_job OUT_DIR

Before every step each rank reads OUT_DIR/phase:
  healthy    every rank computes the same short time, then all-reduces its gradients
  comm       the ranks take turns computing longer, so each waits for the other in half of its steps
  straggler  rank 1 computes longer in every step while rank 0 waits for it
  stall      rank 1 stops inside a step; rank 0 blocks in its all-reduce
  stop       leave the loop and exit cleanly
The job id, ingest socket and GPU uuid come from TRAINMON_* variables, as in a real job.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist

from trainmon.torch import TrainingMonitor

COMPUTE_S = 0.03
SLOW_COMPUTE_S = 0.15
BATCH = 8


def read_phase(out: Path) -> str:
    try:
        return (out / "phase").read_text().strip()
    except OSError:
        return "healthy"


def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(int(os.environ["RANK"]))
    for _ in itertools.count():
        yield torch.randn(BATCH, 16, generator=gen), torch.randn(BATCH, 1, generator=gen)


def compute_seconds(phase: str, rank: int, step: int) -> float:
    slow = (phase == "comm" and step % 2 == rank) or (phase == "straggler" and rank == 1)
    return SLOW_COMPUTE_S if slow else COMPUTE_S


def main(out: Path) -> None:
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    mon = TrainingMonitor(flops_per_token=1e9)  # feeds the MFU panels
    mon.watch(model=model, optimizer=opt, scaler=scaler)
    for step, (x, y) in enumerate(mon.dataloader(batches())):
        phase = read_phase(out)
        if phase == "stop":
            break
        with mon.step(samples=BATCH, tokens=BATCH * 16) as timed:
            if phase == "stall" and rank == 1:
                time.sleep(3600)
            time.sleep(compute_seconds(phase, rank, step))
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            scaler.scale(loss).backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= dist.get_world_size()  # type: ignore[operator,assignment]
            scaler.step(opt)
            scaler.update()
            timed.loss = loss.detach()
    mon.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
