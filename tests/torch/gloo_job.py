"""A small training job run by the tests, one process per rank (RANK, WORLD_SIZE, MASTER_* set).

    python -m tests.torch.gloo_job MODE STEPS OUT_DIR

MODE is `ddp` (a tiny model under DDP), `manual` (a hand-written loop that all-reduces each
gradient itself, one of them async, waited through `Work.wait()` or its future) or `solo` (no
process group: for kill and hang tests).
Per-rank knobs come from the environment: JOB_SLEEP_BEFORE_COMM (seconds this rank sleeps before
its collectives: a straggler), JOB_STEP_SLEEP (seconds per step), JOB_HANG_AT (the step that never
ends), JOB_RAISE_AT (the step whose body raises an uncaught exception),
JOB_USER_HOOK (register a DDP comm hook of our own after `watch`), JOB_KILL_AT (the step
at which the rank SIGKILLs itself), JOB_HOLD (hold the monitor open
after the last step until OUT_DIR/release exists, so a test can read the daemon before the goodbye).
The final parameters are written to OUT_DIR/params-<rank>.bin and the last report to
OUT_DIR/report-<rank>.json.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from trainmon.torch import TrainingMonitor


def model_and_data(rank: int) -> tuple[torch.nn.Module, list[tuple[torch.Tensor, torch.Tensor]]]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    gen = torch.Generator().manual_seed(100 + rank)
    data = [(torch.randn(8, 16, generator=gen), torch.randn(8, 1, generator=gen)) for _ in range(64)]
    return model, data


def main(mode: str, steps: int, out: Path) -> None:
    rank = int(os.environ.get("RANK", "0"))
    sleep_before_comm = float(os.environ.get("JOB_SLEEP_BEFORE_COMM", "0"))
    step_sleep = float(os.environ.get("JOB_STEP_SLEEP", "0"))
    hang_at = int(os.environ.get("JOB_HANG_AT", "-1"))
    kill_at = int(os.environ.get("JOB_KILL_AT", "-1"))
    raise_at = int(os.environ.get("JOB_RAISE_AT", "-1"))
    if mode != "solo":
        dist.init_process_group("gloo")
    model, data = model_and_data(rank)
    if mode == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    mon = TrainingMonitor(job_id=os.environ.get("JOB_ID", "test-job"))
    mon.watch(model=model, optimizer=opt)
    hook_calls = []
    if os.environ.get("JOB_USER_HOOK"):  # the user's own comm hook, registered after watch()

        def user_hook(state, bucket):  # type: ignore[no-untyped-def]
            hook_calls.append(bucket.index())
            return default_hooks.allreduce_hook(state, bucket)

        model.register_comm_hook(None, user_hook)  # type: ignore[operator]
    for i, (x, y) in enumerate(mon.dataloader(itertools.islice(itertools.cycle(data), steps))):
        if i == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        with mon.step(samples=len(x), tokens=len(x) * 16) as step:
            if i == hang_at:
                time.sleep(3600)
            if i == raise_at:
                raise RuntimeError(f"planted failure at step {i}")
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            if mode == "manual":
                time.sleep(sleep_before_comm)
                grads = [p.grad for p in model.parameters()]
                work = dist.all_reduce(grads[0], async_op=True)
                for g in grads[1:]:
                    dist.all_reduce(g)
                if i % 2:  # not through Work.wait(): counted when the step ends
                    work.get_future().wait()
                else:
                    work.wait()
                for g in grads:
                    g /= dist.get_world_size()  # type: ignore[operator,assignment]
            opt.step()
            time.sleep(step_sleep)
            step.loss = loss.detach()
    while os.environ.get("JOB_HOLD") and not (out / "release").exists():
        time.sleep(0.05)
    mon.close()
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    (out / f"params-{rank}.bin").write_bytes(params.numpy().tobytes())
    report = {**dataclasses.asdict(mon.report()), "user_hook_calls": len(hook_calls)}
    (out / f"report-{rank}.json").write_text(json.dumps(report))
    if mode != "solo":
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]))
