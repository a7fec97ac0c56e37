"""The CUDA paths of the hook: event pairs and pinned copies read lazily, no device sync.

Marked `gpu`, which the default run deselects (CI is CPU-only); on a GPU machine run
`python -m pytest -m gpu tests/torch/test_cuda.py`. One process, NCCL with world size 1.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist

from tests.helpers.net import free_port
from tests.torch.test_monitor import ListTransport
from trainmon.torch import TrainingMonitor

pytestmark = pytest.mark.gpu


@pytest.fixture
def nccl() -> Iterator[None]:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_steps_collectives_and_loss_on_cuda_add_no_sync(nccl: None) -> None:
    """Under sync debug mode "error" a loop with the hook runs; values resolve on later steps."""
    mon = TrainingMonitor(job_id="gpu", transport=ListTransport(), env={"TRAINMON_REPORT_INTERVAL": "60"})
    weight = torch.randn(512, 512, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(10):
            with mon.step(samples=4) as step:
                out = weight @ weight
                dist.all_reduce(out)
                dist.all_reduce(out, async_op=True).wait()
                step.loss = out.mean()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    with mon.step():  # its poll resolves every earlier step
        pass
    report = mon.report()
    mon.close()
    (all_reduce,) = report.collectives

    assert (11, 20) == (report.steps, all_reduce.calls)
    assert report.step_buckets[-1] >= 10 and report.step_seconds_sum > 0
    assert all_reduce.seconds > 0 and report.comm_wait > 0
    assert report.loss is not None and math.isfinite(report.loss)
    assert report.uuid.startswith("GPU-") and report.cuda_ooms == 0


def test_grad_scaler_on_cuda_counts_skips_exactly(nccl: None) -> None:
    mon = TrainingMonitor(job_id="gpu", transport=ListTransport(), env={"TRAINMON_REPORT_INTERVAL": "60"})
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64).cuda(), device_ids=[0])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**16)
    mon.watch(model=model, optimizer=opt, scaler=scaler)
    for i in range(6):
        with mon.step(samples=8):
            opt.zero_grad()
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(torch.randn(8, 64, device="cuda")).float().pow(2).mean()
            scaler.scale(loss).backward()
            if i in (1, 4):
                model.module.weight.grad[0, 0] = math.inf
            scaler.step(opt)
            scaler.update()
    torch.cuda.synchronize()
    with mon.step():
        pass
    report = mon.report()
    mon.close()

    assert (2, 2.0**14, "torch_amp", "ddp") == (report.skipped_steps, report.loss_scale, report.loss_scaler,
                                                 report.framework)
    assert report.collectives and report.collectives[0].seconds > 0


def test_a_coalescing_manager_on_cuda_completes_through_its_events(nccl: None) -> None:
    """Megatron's grad sync on NCCL: blocking and async managers (one waited, one dropped) are one
    collective each, complete once the GPU passes their end events; nothing stays in flight."""
    from torch.distributed.distributed_c10d import _coalescing_manager

    from tests.torch.collective_job import coalesced_all_reduces

    mon = TrainingMonitor(job_id="gpu", transport=ListTransport(), env={"TRAINMON_REPORT_INTERVAL": "60"})
    grads = [torch.ones(1024, device="cuda"), torch.ones(256, device="cuda")]
    for _ in range(3):
        mon.step_begin()
        coalesced_all_reduces(grads)
        with _coalescing_manager(async_ops=True):
            dist.all_reduce(grads[0], async_op=True)
        mon.step_end()
    torch.cuda.synchronize()
    mon.report()  # resolves the last end events
    report = mon.report()
    mon.close()

    assert [("all_reduce", 15, 3 * (2 * (1024 + 256) + 1024) * 4)] == [
        (c.op, c.calls, c.bytes) for c in report.collectives]
    assert [(9, 9)] == [(g.issued, g.completed) for g in report.group_seqs]
    assert not report.inflight


def test_an_async_all_reduce_has_the_backends_time_or_none_and_its_wait_is_the_streams_stall(nccl: None) -> None:
    """Compute queued between issue and wait (a 50 ms sleep kernel) is neither the collective's time nor a
    stall: without the opt-in the collective has no time; with TRAINMON_NCCL_TIMING=1 it has the backend's
    own (`Work._get_duration()`)."""
    x = torch.ones(1 << 20, device="cuda")
    cycles = 50_000_000  # `torch.cuda._sleep` spins this many clock cycles: tens of ms
    seen = []
    for env in ({}, {"TRAINMON_NCCL_TIMING": "1"}):
        mon = TrainingMonitor(job_id="gpu", transport=ListTransport(), env={"TRAINMON_REPORT_INTERVAL": "60", **env})
        with mon.step():
            work = dist.all_reduce(x, async_op=True)
            torch.cuda._sleep(cycles)
            work.wait()
        torch.cuda.synchronize()
        with mon.step():
            pass
        report = mon.report()
        mon.close()
        (collective,) = report.collectives
        seen.append((collective.calls, collective.seconds, report.comm_wait, work))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    sleep_s = start.elapsed_time(end) / 1000
    (calls, untimed, wait_untimed, _), (timed_calls, timed, wait_timed, timed_work) = seen

    assert (1, 0.0, 1) == (calls, untimed, timed_calls)
    assert timed == pytest.approx(timed_work._get_duration() / 1000) and 0 < timed < sleep_s
    assert wait_untimed < sleep_s / 2 and wait_timed < sleep_s / 2


def test_a_blocking_collective_on_a_side_stream_adds_time_but_no_wait(nccl: None) -> None:
    mon = TrainingMonitor(job_id="gpu", transport=ListTransport(), env={"TRAINMON_REPORT_INTERVAL": "60"})
    x = torch.ones(1 << 20, device="cuda")
    side = torch.cuda.Stream()
    with mon.step():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            dist.all_reduce(x)
        torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    with mon.step():
        pass
    report = mon.report()
    mon.close()
    (collective,) = report.collectives

    assert collective.seconds > 0 and report.comm_wait == 0.0


def test_a_graph_captured_while_the_reporter_reports_is_counted_as_captured(nccl: None) -> None:
    """A capture in the default global mode while the reporter sends every millisecond: the capture holds
    (the reporter makes no CUDA call), its collective is counted once as captured, replays add nothing, and
    the reports go on."""
    transport = ListTransport()
    mon = TrainingMonitor(job_id="gpu", transport=transport, env={"TRAINMON_REPORT_INTERVAL": "0.01"})
    x = torch.ones(1024, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as torch.cuda.graph requires
        dist.all_reduce(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    for _ in range(20):  # each capture spans several reports
        with torch.cuda.graph(graph):
            dist.all_reduce(x)
            torch.cuda._sleep(1_000_000)
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    with mon.step():
        pass
    sent = len(transport.sent)
    report = mon.report()
    mon.close()

    assert 20 == report.collectives_captured
    assert [("all_reduce", 1)] == [(c.op, c.calls) for c in report.collectives]
    assert [(1, 1)] == [(g.issued, g.completed) for g in report.group_seqs]
    assert sent > 0 and not report.hook_errors
