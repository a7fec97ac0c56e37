"""A gloo job that hangs one way, for the hang tests.

    torchrun --nproc-per-node 3 -m tests.e2e.hang_job           # rank 2 stops issuing collectives
    python -m tests.e2e.hang_job SCENARIO HANG_AT OUT             # one rank per process (RANK, WORLD_SIZE, ...)

From step HANG_AT on, one rank (`CULPRITS`) hangs and the others block:

- `host`: rank 2 sleeps inside its step, never issuing the all-reduce the others wait in;
- `data`: rank 2 sleeps in its data loader;
- `diverge`: rank 1 skips the all-reduce and waits in one on another group no other rank enters;
- `inside`: rank 3 blocks inside the all-reduce it issued (its peers' gloo never hears from it);
- `killed`: rank 0 sleeps in its step until the test kills it (SIGKILL). gloo, unlike NCCL, fails a
  collective at once when a peer's socket closes, so the others wait for rank 0 on a store of their own
  (`HANG_STORE_PORT`, rank 1 serves it) as NCCL ranks would wait in the collective.

The rank that hangs writes the Unix time it began to OUT/onset. The job id and ingest socket come from
TRAINMON_* variables; each rank's GPU uuid is `GPU-e2e-<rank>`.
"""

from __future__ import annotations

import datetime
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import TCPStore
from torch.distributed import distributed_c10d

from trainmon.torch import TrainingMonitor

HANG_AFTER = 5
STEP_S = 0.05
FOREVER_S = 3600
CULPRITS = {"host": 2, "data": 2, "diverge": 1, "inside": 3, "killed": 0}


def mark_onset(out: Path | None) -> None:
    if out is not None:
        (out / "onset.partial").write_text(repr(time.time()))
        (out / "onset.partial").replace(out / "onset")


def hang(out: Path | None) -> None:
    mark_onset(out)
    time.sleep(FOREVER_S)


def block_inside_all_reduce(due: Callable[[], bool], out: Path | None) -> None:
    """Put a function in torch's `all_reduce` place that blocks once `due`: the hook wraps it as torch's."""
    original = distributed_c10d.all_reduce

    def all_reduce(tensor: torch.Tensor, op: object = dist.ReduceOp.SUM, group: object = None,
                   async_op: bool = False) -> object:
        if due():
            hang(out)
        return original(tensor, op, group, async_op)

    distributed_c10d.all_reduce = all_reduce  # type: ignore[assignment]
    dist.all_reduce = all_reduce  # type: ignore[assignment]


def batches(stuck: bool, hang_at: int, out: Path | None) -> Iterator[int]:
    for step in range(10_000):
        if stuck and step >= hang_at:
            hang(out)
        yield step


def main(argv: list[str]) -> None:
    scenario, hang_at, out = (argv[0], int(argv[1]), Path(argv[2])) if argv else ("host", HANG_AFTER, None)
    rank = int(os.environ["RANK"])
    culprit = rank == CULPRITS[scenario]
    os.environ["TRAINMON_GPU_UUID"] = f"GPU-e2e-{rank}"
    done = [0]
    if scenario == "inside" and culprit:
        block_inside_all_reduce(lambda: done[0] >= hang_at, out)
    side = None
    if scenario == "killed" and not culprit:
        side = TCPStore("127.0.0.1", int(os.environ["HANG_STORE_PORT"]), is_master=rank == 1,
                             wait_for_workers=False, timeout=datetime.timedelta(seconds=FOREVER_S))
    dist.init_process_group("gloo")
    other = dist.new_group(list(range(dist.get_world_size())))
    mon = TrainingMonitor()
    gradient = torch.ones(1024)
    for step in mon.dataloader(batches(scenario == "data" and culprit, hang_at, out)):
        with mon.step(samples=8):
            time.sleep(STEP_S)
            if step >= hang_at:
                if culprit and scenario in ("host", "killed"):
                    hang(out)
                if culprit and scenario == "diverge":
                    mark_onset(out)
                    dist.all_reduce(gradient, group=other)
                if side is not None:
                    side.wait(["rank 0 came back"])
            dist.all_reduce(gradient)
        done[0] = step + 1
    mon.close()


if __name__ == "__main__":
    main(sys.argv[1:])
