"""The hook's CUDA paths on the CPU, through a stand-in for `torch.cuda` (tests/torch/cuda_standin.py) and
real gloo collectives: which thread calls CUDA, what a graph capture leaves out, a span CUDA cannot read,
and what a side stream's collective exposes. tests/torch/test_cuda.py runs the same paths on a GPU."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tests.torch.cuda_standin import StandInCuda, standin_cuda
from tests.torch.test_monitor import ListTransport
from trainmon import wire
from trainmon.torch import TrainingMonitor

__all__ = ["standin_cuda"]  # the fixture, used by name
Monitors = Callable[[ListTransport, str], TrainingMonitor]
CUDA_CALLS = ("record", "query", "elapsed_time", "synchronize", "memory_stats", "is_completed")


@pytest.fixture
def gloo(tmp_path: Path) -> Iterator[None]:
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture
def monitors() -> Iterator[Callable[[ListTransport, str], TrainingMonitor]]:
    """Makes the test's monitor (reporting every `interval` seconds); closed however the test ends."""
    made: list[TrainingMonitor] = []

    def monitor(transport: ListTransport, interval: str = "60") -> TrainingMonitor:
        made.append(TrainingMonitor(job_id="standin", transport=transport,
                                    env={"TRAINMON_REPORT_INTERVAL": interval, "TRAINMON_GPU_UUID": "GPU-standin"}))
        return made[-1]

    yield monitor
    for mon in made:
        mon.close()


def sent_after(transport: ListTransport, count: int, deadline_s: float = 20.0) -> bool:
    """Whether `count` more datagrams went out before the deadline (a liveness check, not a time bound)."""
    target, deadline = len(transport.sent) + count, time.monotonic() + deadline_s
    while len(transport.sent) < target and time.monotonic() < deadline:
        time.sleep(0.005)
    return len(transport.sent) >= target


def test_only_the_training_thread_calls_cuda_while_the_reporter_reports(
        standin_cuda: StandInCuda, gloo: None, monitors: Monitors) -> None:
    """Events, `Work.is_completed` and `memory_stats` are called on the training thread only, however
    often the reporter thread reports; its reports still carry every completion."""
    transport = ListTransport()
    mon = monitors(transport, "0.005")
    tensor = torch.ones(8)
    for _ in range(30):
        with mon.step(samples=1):
            dist.all_reduce(tensor)
            dist.all_reduce(tensor, async_op=True).wait()
            dist.broadcast(tensor, src=0, async_op=True)  # seen done by the step end's poll
        sent_after(transport, 1)
    mon.close()
    bye = wire.decode(transport.sent[-1])

    assert {threading.main_thread().name} == standin_cuda.threads(*CUDA_CALLS)
    assert {"query", "elapsed_time", "memory_stats", "is_completed"} <= {name for name, _ in standin_cuda.calls}
    assert {("all_reduce", 60), ("broadcast", 30)} == {(c.op, c.calls) for c in bye.collectives}
    assert [(90, 90)] == [(g.issued, g.completed) for g in bye.group_seqs]
    assert 30 == bye.steps and bye.cuda_ooms == 0


def test_the_heartbeat_goes_on_while_the_training_thread_holds_cuda(
        standin_cuda: StandInCuda, gloo: None, monitors: Monitors) -> None:
    """A rank that sits in a synchronise (the CUDA context held) keeps reporting: the last values and the
    in-flight collective's age from the CPU clock, growing."""
    transport = ListTransport()
    mon = monitors(transport, "0.01")
    mon.step_begin()
    dist.all_reduce(torch.ones(8))  # on the GPU until the step end resolves its events
    sent_after(transport, 1)
    with standin_cuda.context:  # the training thread "synchronises"
        alive = sent_after(transport, 5)
    mon.step_end()
    mon.close()
    ages = [wire.decode(d).inflight_age.get("default_pg") for d in transport.sent]

    assert alive
    held = [a for a in ages if a is not None]
    assert len(held) >= 5 and held == sorted(held)


def test_nothing_is_recorded_or_issued_while_a_graph_is_captured(
        standin_cuda: StandInCuda, gloo: None, monitors: Monitors) -> None:
    """Collectives inside a capture are counted once as captured, never issued (a replay runs no Python);
    no event is recorded there, and the steps around it report as before."""
    transport = ListTransport()
    mon = monitors(transport, "60")
    tensor = torch.ones(8)
    with mon.step():
        dist.all_reduce(tensor)
    records = len([c for c in standin_cuda.calls if c[0] == "record"])
    with standin_cuda.capture():
        mon.step_begin()
        dist.all_reduce(tensor)
        dist.all_reduce(tensor, async_op=True).wait()
        mon.step_end()
    captured_records = len([c for c in standin_cuda.calls if c[0] == "record"]) - records
    with mon.step():
        dist.all_reduce(tensor)
    report = mon.report()
    mon.close()

    assert 0 == captured_records
    assert 2 == report.collectives_captured
    assert [("all_reduce", 2)] == [(c.op, c.calls) for c in report.collectives]
    assert [(2, 2)] == [(g.issued, g.completed) for g in report.group_seqs]
    assert "device_span_dropped" not in report.hook_errors


def test_a_span_cuda_cannot_read_is_dropped_and_counted_and_the_rest_still_report(
        standin_cuda: StandInCuda, gloo: None, monitors: Monitors) -> None:
    """One collective whose events raise on `query()`: it completes without a time, the drop is counted,
    and the collectives after it resolve and report."""
    transport = ListTransport()
    mon = monitors(transport, "60")
    tensor = torch.ones(8)
    mon.step_begin()
    standin_cuda.poisoned = True
    dist.all_reduce(tensor)
    standin_cuda.poisoned = False
    for _ in range(3):
        dist.all_reduce(tensor)
    mon.step_end()
    first = mon.report()
    with mon.step():
        dist.broadcast(tensor, src=0)
    second = mon.report()
    mon.close()

    assert {"device_span_dropped": 1} == first.hook_errors
    assert [("all_reduce", 4)] == [(c.op, c.calls) for c in first.collectives]
    assert (wire.UntimedCalls("all_reduce", "default_pg", 1),) == first.collectives_untimed
    assert [(4, 4)] == [(g.issued, g.completed) for g in first.group_seqs]
    assert [(5, 5)] == [(g.issued, g.completed) for g in second.group_seqs]


def test_a_blocking_collective_on_a_side_stream_exposes_nothing(
        standin_cuda: StandInCuda, gloo: None, monitors: Monitors) -> None:
    """FSDP2 issues its all-gathers blocking on its own stream (an all_reduce here): their time counts,
    their exposure does not; the same call on the step's stream is all exposed."""
    mon = monitors(ListTransport(), "60")
    tensor = torch.ones(8)
    with mon.step(), standin_cuda.side_stream():
        dist.all_reduce(tensor)
    side = mon.report()
    with mon.step():
        dist.all_reduce(tensor)
    main = mon.report()
    mon.close()
    (side_reduce,), (main_reduce,) = side.collectives, main.collectives

    assert side_reduce.seconds > 0 and side.comm_wait == 0.0
    assert main.comm_wait == pytest.approx(main_reduce.seconds - side_reduce.seconds)


def test_an_async_collectives_time_is_never_its_issue_to_wait_span(
        standin_cuda: StandInCuda, gloo: None, monitors: Monitors) -> None:
    """Compute queued between an async call and its wait is not the collective's time: without the backend's
    duration it has none; the exposed part is the pair around the wait."""
    mon = monitors(ListTransport(), "60")
    tensor = torch.ones(8)
    with mon.step():
        work = dist.all_reduce(tensor, async_op=True)
        time.sleep(0.05)  # the rest of backward
        work.wait()
    report = mon.report()
    mon.close()
    (collective,) = report.collectives

    assert (1, 0.0) == (collective.calls, collective.seconds)
    assert (wire.UntimedCalls("all_reduce", "default_pg", 1),) == report.collectives_untimed
    assert 0 < report.comm_wait < 0.05
