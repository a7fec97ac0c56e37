"""A 2-rank gloo training job whose behaviour the alerting test switches while it runs.

    python -m tests.e2e.alerting_job OUT_DIR

Before every step each rank reads OUT_DIR/phase:
  healthy    every rank computes the same time, then all-reduces its gradients
  comm       the ranks take turns computing 20x longer, so each waits for the other in half of its steps
  straggler  rank 1 computes 4x longer than a healthy step in every step while rank 0 waits for it
  stall      rank 1 stops inside a step; rank 0 blocks in its all-reduce
  spike      every rank passes a grad norm 1000x and a loss 100x the real ones (the values the hook judges)
  slow       the last rank computes 50% longer in every step (a slow GPU among its peers)
  stop       leave the loop and exit cleanly
The job id, ingest socket and GPU uuid come from TRAINMON_* variables, as in a real job.

A healthy step computes 100 ms, so a rank that waits tens of ms for a core on a loaded machine (and its peer
that waits for it in the all-reduce) stays far below the 40% communication share that pages; a waiting rank
in the other phases waits 380 ms of a 400 ms step. The straggler's peer computes a healthy step: the score
compares compute per step, measured as step time less communication wait over the rules' shortened windows
(5 s here), and a window edge that falls between a rank's collective and the end of its step counts that
collective's wait but not its step. With 20 ms of compute those edges drove the fast rank's compute to zero in
some windows (it is then no one's yardstick), and a loaded machine broke the alert's `for:` that way.
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

HEALTHY_COMPUTE_S = 0.1
FAST_COMPUTE_S = 0.02
SLOW_COMPUTE_S = 0.4
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
    if phase == "comm":
        return SLOW_COMPUTE_S if step % 2 == rank else FAST_COMPUTE_S
    if phase == "straggler":
        return SLOW_COMPUTE_S if rank == 1 else HEALTHY_COMPUTE_S
    if phase == "slow" and rank == dist.get_world_size() - 1:
        return HEALTHY_COMPUTE_S * 1.5
    return HEALTHY_COMPUTE_S


def main(out: Path) -> None:
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    mon = TrainingMonitor(flops_per_token=1e9)  # feeds the MFU panels
    mon.watch(model=model, optimizer=opt, scaler=scaler)
    probe_x, probe_y = torch.randn(64, 16, generator=torch.Generator().manual_seed(7)), torch.ones(64, 1)
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
            grad_norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()
                                                              if p.grad is not None]))
            scaler.step(opt)
            scaler.update()
            planted = phase == "spike"
            # The loss of one 8-sample random batch swings past 2x its mean by chance (a real job averages
            # millions of tokens): the job reports the loss on a fixed batch, which moves smoothly.
            with torch.no_grad():
                probe_loss = torch.nn.functional.mse_loss(model(probe_x), probe_y)
            timed.loss = probe_loss * (100 if planted else 1)
            timed.grad_norm = grad_norm * (1000 if planted else 1)
    mon.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
