"""TrainingMonitor in this process: loss scalers, steps, phases, safety; reports read from the wire."""

from __future__ import annotations

import json
import math
import socket
import sys
import threading
import types
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.distributed as dist

from trainmon import wire
from trainmon.torch import TrainingMonitor


class ListTransport:
    """Keeps every datagram, or raises `error` on send."""

    def __init__(self, error: OSError | None = None) -> None:
        self.sent: list[bytes] = []
        self.error = error

    def send(self, payload: bytes) -> None:
        if self.error is not None:
            raise self.error
        self.sent.append(payload)

    def close(self) -> None:
        pass


@pytest.fixture
def transport() -> ListTransport:
    return ListTransport()


@pytest.fixture
def mon(transport: ListTransport) -> Iterator[TrainingMonitor]:
    monitor = TrainingMonitor(job_id="unit", transport=transport, env={"TRAINMON_REPORT_INTERVAL": "60"})
    yield monitor
    monitor.close()


def test_grad_scaler_skips_are_counted_exactly_and_the_scale_halves(mon: TrainingMonitor) -> None:
    """Two steps with planted inf gradients: two skipped steps, and the scale halves twice."""
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    mon.watch(model=model, optimizer=opt, scaler=scaler)
    for i in range(6):
        with mon.step(samples=2):
            opt.zero_grad()
            scaler.scale(model(torch.ones(2, 4)).sum()).backward()
            if i in (1, 4):
                model.weight.grad[0, 0] = math.inf  # type: ignore[index]
            scaler.step(opt)
            scaler.update()
    report = wire.decode(wire.encode(mon.report()))

    assert (6, 2, 2.0**14, "torch_amp") == (report.steps, report.skipped_steps, report.loss_scale, report.loss_scaler)


def test_without_a_scaler_there_is_no_loss_scale(mon: TrainingMonitor) -> None:
    """bf16 and fp32 jobs have no loss scale: the value is absent, not 1."""
    with mon.step():
        pass

    assert (None, "none") == (mon.report().loss_scale, mon.report().loss_scaler)


class MegatronStyleOptimizer:
    """The Megatron optimizer contract: step() -> (update_successful, grad_norm, num_zeros)."""

    def __init__(self) -> None:
        self.grad_scaler = object()
        self.results = iter([(True, 1.5, 0), (False, None, None), (True, 0.5, 0)])
        self.scale = torch.tensor(4096.0)

    def step(self) -> tuple[bool, float | None, int | None]:
        return next(self.results)

    def get_loss_scale(self) -> torch.Tensor:
        return self.scale


def test_megatron_style_optimizer_reports_skips_scale_and_grad_norm(mon: TrainingMonitor) -> None:
    opt = MegatronStyleOptimizer()
    mon.watch(optimizer=opt)
    for _ in range(3):
        with mon.step():
            opt.step()
    report = mon.report()

    assert (1, 4096.0, 0.5, "megatron") == (report.skipped_steps, report.loss_scale, report.grad_norm,
                                             report.loss_scaler)


class DeepSpeedStyleEngine:
    """The DeepSpeed engine attributes the hook reads: skipped_steps, fp16_enabled(), optimizer.cur_scale."""

    def __init__(self) -> None:
        self.skipped_steps = 0
        self.optimizer = type("Opt", (), {"cur_scale": 1024.0})()

    def fp16_enabled(self) -> bool:
        return True

    def step(self) -> None:
        self.skipped_steps += 1
        self.optimizer.cur_scale /= 2


def test_deepspeed_style_engine_reports_skips_and_scale(mon: TrainingMonitor) -> None:
    engine = DeepSpeedStyleEngine()
    mon.watch(model=engine)
    engine.step()
    engine.step()

    assert (2, 256.0, "deepspeed") == (mon.report().skipped_steps, mon.report().loss_scale,
                                       mon.report().loss_scaler)


def test_losses_phases_and_data_wait(mon: TrainingMonitor) -> None:
    """Non-finite losses are counted, a phase shows while open, data wait adds up."""
    for loss in (1.0, math.nan, math.inf, 0.5):
        mon.step_begin()
        mon.step_end(samples=1, tokens=10, loss=torch.tensor(loss))
    with mon.phase("checkpoint"):
        in_phase = mon.report().phase
    batches = list(mon.dataloader(range(3)))
    report = mon.report()

    assert (4, 40, 2, 0.5, "checkpoint", None) == (report.steps, report.tokens, report.nonfinite_losses,
                                                   report.loss, in_phase, report.phase)
    assert [0, 1, 2] == batches and report.data_wait > 0


def test_a_step_reports_its_real_tokens_its_microbatches_and_the_pipeline_stage(transport: ListTransport) -> None:
    mon = TrainingMonitor(job_id="unit", transport=transport, env={"TRAINMON_REPORT_INTERVAL": "60"}, pipeline_stage=3)
    with mon.step(samples=2, tokens=700, microbatches=4):
        pass
    mon.step_begin()
    mon.step_end(samples=2, tokens=300, microbatches=4)
    report = wire.decode(wire.encode(mon.report()))
    mon.close()

    assert (2, 1000, 8, 3) == (report.steps, report.tokens, report.microbatches, report.pipeline_stage)


def test_a_loop_that_gives_no_microbatches_or_stage_sends_neither(mon: TrainingMonitor) -> None:
    with mon.step(samples=1, tokens=10):
        pass
    sent = json.loads(wire.encode(mon.report()))

    assert "microbatches" not in sent and "pipeline_stage" not in sent["info"]


@pytest.mark.parametrize("stage", [-1, 1.5, True, "0"])
def test_a_pipeline_stage_that_is_not_one_is_refused(transport: ListTransport, stage: object) -> None:
    with pytest.raises(ValueError, match="pipeline_stage"):
        TrainingMonitor(job_id="unit", transport=transport, pipeline_stage=stage)  # type: ignore[arg-type]


class NumpyLikeFloat(float):
    """A float subclass, as `numpy.float64` is: not the plain float that `step_end` observes at once."""


@pytest.mark.parametrize("passed", [torch.tensor, float, NumpyLikeFloat])
def test_spikes_in_values_passed_to_step_end_are_counted_with_the_monitors_factors(
        transport: ListTransport, passed: Callable[[float], object]) -> None:
    mon = TrainingMonitor(job_id="unit", transport=transport, env={"TRAINMON_REPORT_INTERVAL": "60"},
                          loss_spike_factor=1.5, grad_norm_spike_factor=4.0, spike_window=10)
    for loss, grad_norm in [(2.0, 0.3)] * 10 + [(3.5, 1.5), (2.0, 0.3)]:  # 3.5 > 1.5 x 2.0; 1.5 > 4 x 0.3
        mon.step_begin()
        mon.step_end(samples=1, loss=passed(loss), grad_norm=passed(grad_norm))
    report = mon.report()
    mon.close()
    assert (report.loss_spikes, report.grad_norm_spikes, report.loss_max, report.grad_norm_max) == (1, 1, 3.5, 1.5)
    assert type(report.loss) is float and report.loss == 2.0  # the last values, as floats
    assert report.grad_norm == pytest.approx(0.3)


def test_spike_factors_that_cannot_work_are_refused() -> None:
    with pytest.raises(ValueError, match="loss_factor"):
        TrainingMonitor(job_id="unit", env={"TRAINMON_DISABLE": "1"}, loss_spike_factor=0.5)


def test_close_says_goodbye_and_removes_every_patch(transport: ListTransport) -> None:
    original = dist.all_reduce
    mon = TrainingMonitor(job_id="unit", transport=transport, env={})
    patched = dist.all_reduce
    mon.close()

    assert patched is not original and dist.all_reduce is original
    assert "bye" == wire.decode(transport.sent[-1]).kind


def test_disabled_monitor_patches_and_sends_nothing(transport: ListTransport) -> None:
    original = dist.all_reduce
    mon = TrainingMonitor(job_id="unit", transport=transport, env={"TRAINMON_DISABLE": "1"})
    with mon.step():
        pass
    mon.close()

    assert (dist.all_reduce, [], None) == (original, transport.sent, mon.reporter)


@pytest.mark.parametrize("error", [BlockingIOError(11, "full"), ConnectionRefusedError(111, "refused"),
                                   FileNotFoundError(2, "no socket")])
def test_send_failures_are_counted_never_raised(error: OSError) -> None:
    """A full queue (EAGAIN) counts as dropped, a missing daemon as unreachable; nothing raises."""
    mon = TrainingMonitor(job_id="unit", transport=ListTransport(error), env={"TRAINMON_REPORT_INTERVAL": "60"})
    with mon.step():
        pass
    reporter = mon.reporter
    assert reporter is not None
    reporter.send_now()
    mon.close()

    full = isinstance(error, BlockingIOError)
    # three sends: the first report, send_now() and the goodbye
    assert (0, 3 if full else 0, 0 if full else 3) == (reporter.sent, reporter.dropped, reporter.unreachable)


def test_swallowed_errors_and_failed_sends_are_reported_by_kind() -> None:
    """A hook error and an unreachable daemon show in the next report's hook_errors, by kind."""
    mon = TrainingMonitor(job_id="unit", transport=ListTransport(FileNotFoundError(2, "no socket")),
                          env={"TRAINMON_REPORT_INTERVAL": "60"})
    with mon.step() as s:
        s.loss = object()  # not a number: the hook swallows the error, the step still counts
    reporter = mon.reporter
    assert reporter is not None
    reporter.send_now()
    report = mon.report()
    mon.close()

    assert report.steps == 1
    assert report.hook_errors.keys() == {"monitor", "send_unreachable"}
    assert report.hook_errors["monitor"] == 1
    assert report.hook_errors["send_unreachable"] >= 1  # send_now's, and the reporter thread's first if it ran


def test_names_bound_at_import_time_are_patched_and_restored(transport: ListTransport) -> None:
    """Like DeepSpeed's `from torch.distributed import reduce_scatter_single` at import time."""
    framework = types.ModuleType("framework_under_test")
    framework.dist_reduce_scatter_func = dist.reduce_scatter_single  # type: ignore[attr-defined]
    sys.modules[framework.__name__] = framework
    try:
        mon = TrainingMonitor(job_id="unit", transport=transport, env={"TRAINMON_REPORT_INTERVAL": "60"})
        patched = framework.dist_reduce_scatter_func  # type: ignore[attr-defined]
        mon.close()

        assert patched is not dist.reduce_scatter_single
        assert patched.__trainmon_original__ is dist.reduce_scatter_single
        assert framework.dist_reduce_scatter_func is dist.reduce_scatter_single  # type: ignore[attr-defined]
    finally:
        del sys.modules[framework.__name__]


def test_a_report_that_would_be_oversized_drops_the_nccl_environment_first(transport: ListTransport) -> None:
    env = {f"NCCL_{i:03d}_{'X' * 100}": "v" * 128 for i in range(32)} | {"TRAINMON_REPORT_INTERVAL": "60"}
    mon = TrainingMonitor(job_id="unit", transport=transport, env=env)
    for op in wire.OPS:
        for g in range(wire.MAX_GROUPS):
            seqs = mon.state.sequences(f"{g}{'g' * 120}")
            mon.state.complete(mon.state.issue(seqs, op, 0.0, 1), 0.1, 0.0)
    mon.close()
    bye = wire.decode(transport.sent[-1])

    assert len(transport.sent[-1]) <= wire.MAX_DATAGRAM
    assert ({}, len(wire.OPS) * wire.MAX_GROUPS) == (dict(bye.nccl_env), len(bye.collectives))


def test_udp_transport_from_the_environment() -> None:
    """TRAINMON_INGEST_UDP sends the same datagrams over UDP (Kubernetes: to the node's IP).

    With the rank known from RANK, reporting starts at once (else at watch() or the first step).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver:
        receiver.bind(("127.0.0.1", 0))
        receiver.settimeout(10)
        port = receiver.getsockname()[1]
        mon = TrainingMonitor(job_id="udp", env={"TRAINMON_INGEST_UDP": f"127.0.0.1:{port}", "RANK": "3",
                                                 "TRAINMON_REPORT_INTERVAL": "60"})
        first = wire.decode(receiver.recv(wire.MAX_DATAGRAM))
        mon.close()
        last = wire.decode(receiver.recv(wire.MAX_DATAGRAM))

    assert ("udp", 3, "report", "bye") == (first.job_id, first.rank, first.kind, last.kind)


def test_an_uncaught_exception_in_a_thread_makes_the_goodbye_say_error(transport: ListTransport) -> None:
    """threading.excepthook is chained (the previous hook still runs) and restored at close."""
    seen: list[type[BaseException]] = []

    def previous(args: threading.ExceptHookArgs) -> None:
        seen.append(args.exc_type)

    original, threading.excepthook = threading.excepthook, previous
    try:
        mon = TrainingMonitor(job_id="unit", transport=transport, env={"TRAINMON_REPORT_INTERVAL": "60"})
        clean = mon.report().exit_reason
        worker = threading.Thread(target=lambda: 1 / 0)
        worker.start()
        worker.join()
        mon.close()
        restored = threading.excepthook
    finally:
        threading.excepthook = original

    assert ("clean", [ZeroDivisionError], previous) == (clean, seen, restored)
    assert ("bye", "error") == (wire.decode(transport.sent[-1]).kind, wire.decode(transport.sent[-1]).exit_reason)


def test_a_second_live_monitor_in_the_process_is_refused_loudly(mon: TrainingMonitor) -> None:
    """The collectives' patches are the process's: a second monitor would count nothing, so it is refused
    (the first goes on counting); once the first is closed a new one is made, and a disabled one always."""
    with pytest.raises(RuntimeError, match="already live in this process"):
        TrainingMonitor(job_id="second", transport=ListTransport())
    TrainingMonitor(job_id="off", env={"TRAINMON_DISABLE": "1"}).close()
    mon.close()
    again = TrainingMonitor(job_id="again", transport=ListTransport(), env={"TRAINMON_REPORT_INTERVAL": "60"})
    again.close()

    assert not mon.enabled and not again.enabled
