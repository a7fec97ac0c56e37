"""One rank of a gloo job that issues collectives one way, under `torch.profiler`, run by the tests.

    python -m tests.torch.collective_job MODES STEPS OUT_DIR

MODES, comma-separated, run one after the other in one process group: `direct` (every
`torch.distributed` collective, forwarders and object forms included), `bound` (DeepSpeed-style
names bound at import time), `ddp`, `fsdp1`, `fsdp2` (`fully_shard`), `compiled` (`torch.compile`
of a DDP model), `timing` (rank 0 waits for rank 1 in blocking all_reduce calls;
OUT_DIR/timing-<rank>.json has the time around the calls and the hook's time), and `side_thread`
(DDP steps while another thread issues `SIDE_CALLS` all_reduces on its own group;
OUT_DIR/side_thread-<rank>.json has what the hook counted on that group). RANK, WORLD_SIZE
and MASTER_* come from the environment (tests.torch.jobs or torchrun). OUT_DIR/<mode>-<rank>.json
gets what the profiler saw over STEPS steps (`c10d::*` dispatcher ops: one per collective issued;
`gloo:*` events: what the backend ran, with input bytes) and what the hook counted over the same
window.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import all_gather_into_tensor as bound_all_gather
from torch.distributed import all_reduce as bound_all_reduce
from torch.distributed import reduce_scatter_tensor as bound_reduce_scatter
from torch.distributed.distributed_c10d import _coalescing_manager
from torch.profiler import ProfilerActivity, profile

from trainmon.torch import TrainingMonitor
from trainmon.wire import Report

SIDE_CALLS = 1000
DTYPE_BYTES = {"float": 4, "double": 8, "int": 4, "long int": 8, "unsigned char": 1, "signed char": 1, "bool": 1,
               "c10::Half": 2, "c10::BFloat16": 2, "short int": 2}


def model() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def direct(rank: int, world: int) -> Callable[[], None]:
    """Every collective of torch.distributed once per step; `CALLED` names them for the coverage test."""
    peer = (rank + 1) % world
    t = torch.ones(16)
    pair = dist.new_group(list(range(world)), group_desc="pair")

    def step() -> None:
        dist.all_reduce(t)
        dist.all_reduce(t, group=pair)
        dist.all_reduce(t, async_op=True).wait()
        dist.all_reduce_coalesced([t, torch.ones(4)])
        dist.all_gather([torch.empty(16) for _ in range(world)], t)
        dist.all_gather_coalesced([[torch.empty(4)] for _ in range(world)], [torch.ones(4)])
        dist.all_gather_into_tensor(torch.empty(16 * world), t)
        dist._all_gather_base(torch.empty(16 * world), t)  # type: ignore[attr-defined]
        dist.all_gather_single(torch.empty(16 * world), t, async_op=True).wait()
        dist.reduce_scatter(torch.empty(16), [torch.ones(16) for _ in range(world)])
        dist.reduce_scatter_tensor(torch.empty(16 // world), t)
        dist._reduce_scatter_base(torch.empty(16 // world), t)  # type: ignore[attr-defined]
        dist.reduce_scatter_single(torch.empty(16 // world), t)
        dist.all_to_all([torch.empty(4) for _ in range(world)], [torch.ones(4) for _ in range(world)])
        dist.all_to_all_single(torch.empty(16), t)
        dist.broadcast(t, src=0)
        dist.reduce(t, dst=0)
        dist.gather(t, [torch.empty(16) for _ in range(world)] if rank == 0 else None, dst=0)
        dist.scatter(torch.empty(16), [torch.ones(16) for _ in range(world)] if rank == 0 else None, src=0)
        dist.barrier()
        dist.monitored_barrier()
        if rank % 2 == 0:
            dist.send(t, peer)
            dist.recv(t, peer)
        else:
            dist.recv(t, (rank - 1) % world)
            dist.send(t, (rank - 1) % world)
        ops = [dist.P2POp(dist.isend, t, peer), dist.P2POp(dist.irecv, torch.empty(16), (rank - 1) % world)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        objects: list[Any] = [None] * world
        dist.all_gather_object(objects, {"rank": rank})
        dist.broadcast_object_list([{"step": 1}], src=0)
        dist.gather_object(rank, objects if rank == 0 else None, dst=0)
        dist.scatter_object_list([None], list(range(world)) if rank == 0 else None, src=0)

    return step


CALLED = {
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_coalesced", "all_gather_single",
    "reduce_scatter", "reduce_scatter_single", "all_to_all", "all_to_all_single", "broadcast", "reduce",
    "gather", "scatter", "barrier", "monitored_barrier", "isend", "irecv",
}  # fmt: skip


def bound() -> Callable[[], None]:
    t = torch.ones(16)

    def step() -> None:
        bound_all_reduce(t)
        bound_all_gather(torch.empty(16 * dist.get_world_size()), t)
        bound_reduce_scatter(torch.empty(16 // dist.get_world_size()), t, async_op=True).wait()

    return step


def coalesced_all_reduces(grads: list[torch.Tensor]) -> None:
    """Megatron's grad-sync all-reduce both ways: a blocking coalescing manager, and an async one waited
    through `cm.wait()`."""
    with _coalescing_manager():
        for g in grads:
            dist.all_reduce(g)
    with _coalescing_manager(async_ops=True) as cm:
        for g in grads:
            dist.all_reduce(g, async_op=True)
    cm.wait()


def coalesced(rank: int, world: int) -> Callable[[], None]:
    """Megatron's grad sync: `_coalescing_manager`, blocking and async (waited through `cm.wait()`, and
    one dropped without a wait), with each op torch coalesces."""
    grads = [torch.ones(64), torch.ones(32)]
    shards = [torch.empty(64 // world), torch.empty(32 // world)]

    def step() -> None:
        coalesced_all_reduces(grads)
        with _coalescing_manager(async_ops=True) as cm:
            for g, shard in zip(grads, shards, strict=True):
                dist.reduce_scatter_tensor(shard, g, async_op=True)
        cm.wait()
        with _coalescing_manager(async_ops=True):  # dropped: nobody waits
            for g, shard in zip(grads, shards, strict=True):
                dist.all_gather_into_tensor(g, shard, async_op=True)

    return step


def training(module: torch.nn.Module, forward: Callable[[torch.Tensor], torch.Tensor] | None = None,
             ) -> Callable[[], None]:
    """Steps of `module` (called through `forward`, its compiled form, when given)."""
    opt = torch.optim.SGD(module.parameters(), lr=0.05)
    run = module if forward is None else forward
    x = torch.randn(8, 16)

    def step() -> None:
        run(x).sum().backward()
        opt.step()
        opt.zero_grad()

    return step


def workload(mode: str, mon: TrainingMonitor, rank: int, world: int) -> Callable[[], None]:
    if mode == "direct":
        return direct(rank, world)
    if mode == "bound":
        return bound()
    if mode == "coalesced":
        return coalesced(rank, world)
    if mode in ("ddp", "compiled"):
        ddp = torch.nn.parallel.DistributedDataParallel(model())
        mon.watch(model=ddp)
        return training(ddp, torch.compile(ddp, backend="aot_eager") if mode == "compiled" else None)
    if mode == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel

        return training(FullyShardedDataParallel(model(), device_id=torch.device("cpu")))
    if mode == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,))
        net = model()
        fully_shard(net[0], mesh=mesh)
        fully_shard(net, mesh=mesh)
        return training(net)
    raise ValueError(f"unknown mode {mode}")


def totals(report: Report) -> tuple[int, int]:
    return sum(c.calls for c in report.collectives), sum(c.bytes for c in report.collectives)


def main(modes: str, steps: int, out: Path) -> None:
    dist.init_process_group("gloo")
    for mode in modes.split(","):
        if mode == "timing":
            timing(steps, out)
        elif mode == "side_thread":
            side_thread(steps, out)
        else:
            run(mode, steps, out)
    dist.destroy_process_group()


def timing(steps: int, out: Path) -> None:
    """`timing`: rank 0 waits about 0.1 s in each blocking all_reduce for rank 1, timing the call itself."""
    rank = dist.get_rank()
    mon = TrainingMonitor(job_id="timing", env={"TRAINMON_INGEST_SOCKET": str(out / "nobody.sock")})
    t = torch.ones(1024)
    outer = 0.0
    for _ in range(steps):
        if rank:
            time.sleep(0.1)
        t0 = time.perf_counter()
        dist.all_reduce(t)
        outer += time.perf_counter() - t0
    report = mon.report()
    result: dict[str, object] = {"outer": outer, "hook": sum(c.seconds for c in report.collectives),
                                 "comm_wait": report.comm_wait}
    for async_ops in (False, True):  # Megatron's grad sync, waited at once: all of it exposed
        outer = 0.0
        for _ in range(steps):
            if rank:
                time.sleep(0.1)
            t0 = time.perf_counter()
            with _coalescing_manager(async_ops=async_ops) as cm:
                dist.all_reduce(t, async_op=async_ops)
                dist.all_reduce(t[:256], async_op=async_ops)
            cm.wait()
            outer += time.perf_counter() - t0
        before, report = report, mon.report()
        result[f"coalesced-{async_ops}"] = {
            "outer": outer, "comm_wait": report.comm_wait - before.comm_wait,
            "hook": sum(c.seconds for c in report.collectives) - sum(c.seconds for c in before.collectives)}
    (out / f"timing-{rank}.json").write_text(json.dumps(result))
    mon.close()


def side_thread(steps: int, out: Path) -> None:
    """`side_thread`: STEPS DDP steps (a bucket per parameter, so the comm hook runs often) while a second
    thread issues SIDE_CALLS blocking all_reduces on a group of its own."""
    rank = dist.get_rank()
    mon = TrainingMonitor(job_id="side-thread", env={"TRAINMON_INGEST_SOCKET": str(out / "nobody.sock")})
    side = dist.new_group(list(range(dist.get_world_size())), group_desc="side")
    ddp = torch.nn.parallel.DistributedDataParallel(model(), bucket_cap_mb=1e-6)
    mon.watch(model=ddp)
    step = training(ddp)

    def issue() -> None:
        t = torch.ones(4)
        for _ in range(SIDE_CALLS):
            dist.all_reduce(t, group=side)

    thread = threading.Thread(target=issue, name="side")
    thread.start()
    for _ in range(steps):
        with mon.step():
            step()
    thread.join()
    report = mon.report()
    mon.close()
    result = {"ops": {f"{c.op}/{c.group}": c.calls for c in report.collectives},
              "groups": {g.group: [g.issued, g.completed] for g in report.group_seqs}}
    (out / f"side_thread-{rank}.json").write_text(json.dumps(result))


def run(mode: str, steps: int, out: Path) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    mon = TrainingMonitor(job_id=f"coverage-{mode}", env={"TRAINMON_INGEST_SOCKET": str(out / "nobody.sock")})
    step = workload(mode, mon, rank, world)
    for _ in range(2):  # warm-up outside the window: compilation, FSDP's lazy init, DDP's bucket rebuild
        step()  # (which broadcasts from C++, where no Python wrapper sees it)
    settled(mon)
    first = mon.report()
    before, before_seqs = totals(first), first.group_seqs
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(steps):
            with mon.step():
                step()
        settled(mon)  # inside: a work nobody waits on has run (and the profiler saw it) once it is settled
    after = mon.report()
    calls, nbytes = totals(after)
    events = [e for e in prof.events() if e.name.startswith("gloo:")]
    ops = [e.name for e in prof.events() if e.name.startswith("c10d::")]
    result = {
        "profiler": {"calls": len(ops), "bytes": sum(
            _numel(shape) * DTYPE_BYTES[dtype] for e in events for shape, dtype in zip(e.input_shapes, e.input_dtypes,
                                                                                       strict=False) if shape)},
        "hook": {"calls": calls - before[0], "bytes": nbytes - before[1]},
        "names": dict(Counter(e.name for e in events)),
        "c10d": dict(Counter(ops)),
        "ops": {f"{c.op}/{c.group}": c.calls for c in after.collectives},
        "groups": [[g.group, g.issued, g.completed] for g in after.group_seqs],
        "inflight": len(after.inflight),
        "completed": sum(g.completed for g in after.group_seqs) - sum(g.completed for g in before_seqs),
    }
    (out / f"{mode}-{rank}.json").write_text(json.dumps(result))
    mon.close()


def settled(mon: TrainingMonitor) -> None:
    """Report until nothing is in flight: a collective whose work nobody waits on is settled by the
    reports once it is done (within a few; 2 s is plenty)."""
    deadline = time.monotonic() + 2
    while mon.report().inflight and time.monotonic() < deadline:
        time.sleep(0.01)


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]))
