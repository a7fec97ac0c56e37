"""A 3-rank gloo job for the hang test, started by `torchrun`: after HANG_AFTER steps rank 2 stops
issuing collectives (it sleeps inside its step) while ranks 0 and 1 block in their all-reduce.

    torchrun --nproc-per-node 3 -m tests.e2e.hang_job

The job id and ingest socket come from TRAINMON_* variables; each rank's GPU uuid is `GPU-e2e-<rank>`.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from trainmon.torch import TrainingMonitor

HANG_AFTER = 5
STEP_S = 0.05


def main() -> None:
    rank = int(os.environ["RANK"])
    os.environ["TRAINMON_GPU_UUID"] = f"GPU-e2e-{rank}"
    dist.init_process_group("gloo")
    mon = TrainingMonitor()
    gradient = torch.ones(1024)
    for step in range(10_000):
        with mon.step(samples=8):
            time.sleep(STEP_S)
            if step >= HANG_AFTER and rank == 2:
                time.sleep(3600)
            dist.all_reduce(gradient)
    mon.close()


if __name__ == "__main__":
    main()
