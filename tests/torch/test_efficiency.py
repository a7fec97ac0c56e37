"""The hook's efficiency fields: model FLOPs, time per phase, first step (in-process and on real gloo ranks)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.daemon import Daemon, start_daemon
from tests.torch.jobs import finish, metrics_when, per_rank, start_job
from tests.torch.test_monitor import ListTransport
from trainmon import wire
from trainmon.torch import TrainingMonitor

QUIET = {"TRAINMON_REPORT_INTERVAL": "60"}


@pytest.fixture
def mon() -> Iterator[TrainingMonitor]:
    monitor = TrainingMonitor(job_id="unit", transport=ListTransport(), env=QUIET, flops_per_token=1e6)
    yield monitor
    monitor.close()


def test_flops_accumulate_per_token_and_a_step_can_override_the_rate(mon: TrainingMonitor) -> None:
    for _ in range(3):
        with mon.step(samples=2, tokens=100):
            pass
    mon.step_begin()
    mon.step_end(samples=2, tokens=100, flops_per_step=5e9)

    assert 3 * 100 * 1e6 + 5e9 == mon.report().model_flops


def test_without_flops_the_field_stays_unknown() -> None:
    monitor = TrainingMonitor(job_id="unit", transport=ListTransport(), env=QUIET)
    with monitor.step(samples=1, tokens=1):
        pass
    report = monitor.report()
    monitor.close()

    assert report.model_flops is None and "model_flops" not in json.loads(wire.encode(report))


def test_two_flops_keywords_are_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="give one of"):
        TrainingMonitor(job_id="unit", transport=ListTransport(), env=QUIET, flops_per_token=1, flops_per_sample=2)


def test_a_bad_rate_on_step_end_is_counted_not_raised(mon: TrainingMonitor) -> None:
    mon.step_begin()
    mon.step_end(tokens=10, flops_per_token=-1.0)

    report = mon.report()

    assert (1, None, 1) == (report.steps, report.model_flops, report.hook_errors.get("monitor"))


def test_phase_time_goes_to_the_innermost_phase_and_shows_while_open(mon: TrainingMonitor) -> None:
    """Each figure lies between the spans the test reads just inside and just outside the monitor's own clock
    reads (no absolute bound: on a loaded machine a sleep overruns by any amount)."""
    clock = time.perf_counter
    checkpoint_entering = clock()
    with mon.phase("checkpoint"):
        checkpoint_entered = clock()
        time.sleep(0.05)
        eval_entering = clock()
        with mon.phase("eval"):
            eval_entered = clock()
            time.sleep(0.1)
            reporting = clock()
            open_report = mon.report().phase_seconds
            reported = clock()
        eval_left = clock()
        time.sleep(0.05)
        checkpoint_leaving = clock()
    checkpoint_left = clock()
    done = mon.report().phase_seconds

    assert reporting - eval_entered <= open_report["eval"] <= reported - eval_entering
    assert eval_entering - checkpoint_entered <= open_report["checkpoint"] <= eval_entered - checkpoint_entering
    assert reported - eval_entered <= done["eval"] <= eval_left - eval_entering
    assert ((eval_entering - checkpoint_entered) + (checkpoint_leaving - eval_left) <= done["checkpoint"]
            <= (eval_entered - checkpoint_entering) + (checkpoint_left - reported))
    assert done == mon.report().phase_seconds  # nothing accrues outside a phase


def test_phases_beyond_sixteen_names_are_added_up_as_other(mon: TrainingMonitor) -> None:
    for i in range(19):
        with mon.phase(f"p{i}"):
            pass
    names = set(mon.report().phase_seconds)

    assert {f"p{i}" for i in range(16)} | {"other"} == names
    wire.decode(wire.encode(mon.report()))  # the daemon accepts it


def test_first_step_is_when_the_first_step_began(mon: TrainingMonitor) -> None:
    assert mon.report().first_step is None
    before = time.time()
    with mon.step(samples=1, tokens=1):
        pass
    first = mon.report().first_step
    with mon.step(samples=1, tokens=1):
        pass

    assert first is not None and mon.identity.start_time <= before <= first <= time.time()
    assert first == mon.report().first_step


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    started = start_daemon(tmp_path_factory.mktemp("daemon"), ["--collectors", "training", "--interval", "0.2"])
    yield started
    started.stop()


@pytest.mark.slow
def test_gloo_ranks_report_flops_phase_time_and_first_step(daemon: Daemon, tmp_path: Path) -> None:
    """Two real ranks, 6 steps of 128 tokens at 1e9 FLOPs/token, a 0.3 s checkpoint every 2 steps."""
    env = {"TRAINMON_INGEST_SOCKET": str(daemon.log_path.parent / "ingest.sock"), "JOB_ID": "eff",
           "TRAINMON_GPU_UUID": "GPU-test", "JOB_FLOPS_PER_TOKEN": "1e9", "JOB_PHASE": "checkpoint",
           "JOB_PHASE_SECONDS": "0.3", "JOB_PHASE_EVERY": "2", "JOB_HOLD": "1"}
    procs = start_job("", 6, tmp_path, env=env, module="tests.torch.workload_job")
    try:
        text = metrics_when(daemon, lambda t: per_rank(t, "trainmon_train_steps_total", "eff") == {0: 6, 1: 6})
    finally:
        (tmp_path / "release").touch()
        finish(procs, tmp_path)

    assert {0: 6 * 128 * 1e9, 1: 6 * 128 * 1e9} == per_rank(text, "trainmon_train_model_flops_total", "eff")
    phase = per_rank(text, "trainmon_train_phase_seconds_total", "eff", phase="checkpoint")
    assert all(0.6 <= s < 3 for s in phase.values()) and set(phase) == {0, 1}  # two checkpoints of 0.3 s
    started = per_rank(text, "trainmon_train_process_start_timestamp_seconds", "eff")
    first = per_rank(text, "trainmon_train_first_step_timestamp_seconds", "eff")
    assert all(started[r] < first[r] < started[r] + 120 for r in (0, 1))
