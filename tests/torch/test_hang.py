"""Hang localisation: the hang threshold and the stuck thread's stack (`_hang`), and on real gloo ranks
sequence numbers, in-flight age that grows live, exit reasons."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch.distributed as dist

from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.net import free_port
from tests.torch.jobs import metrics_when, per_rank, samples, start_job
from tests.torch.test_monitor import ListTransport
from trainmon import wire
from trainmon.hook.hang import DEFAULT_FLOOR_S, HangWatch, floor_from, median_step_seconds, thread_stack, threshold
from trainmon.torch import TrainingMonitor
from trainmon.torch._groups import rank_ranges
from trainmon.wire import STEP_BUCKETS, Report


def buckets_of(seconds: float, steps: int) -> tuple[int, ...]:
    """A step histogram of `steps` steps of `seconds` each."""
    return tuple(steps if seconds <= bound else 0 for bound in (*STEP_BUCKETS, float("inf")))


def test_the_threshold_is_the_floor_or_five_median_steps_whichever_is_larger() -> None:
    """20 s steps: 100 s, not the 30 s floor; 0.1 s steps: the floor; no steps yet: the floor."""
    assert 10.0 < (median_step_seconds(buckets_of(20.0, 9)) or 0) <= 30.0
    assert threshold(30.0, buckets_of(20.0, 9)) > 50.0
    assert 30.0 == threshold(30.0, buckets_of(0.1, 9)) == threshold(30.0, buckets_of(0.1, 0))


def test_the_floor_comes_from_the_argument_then_the_environment() -> None:
    assert 5.0 == floor_from(5.0, {"TRAINMON_HANG_THRESHOLD_S": "7"})
    assert 7.0 == floor_from(None, {"TRAINMON_HANG_THRESHOLD_S": "7"})
    assert DEFAULT_FLOOR_S == floor_from(None, {"TRAINMON_HANG_THRESHOLD_S": "soon"}) == floor_from(None, {})
    with pytest.raises(ValueError, match="hang_threshold_s"):
        TrainingMonitor(job_id="unit", hang_threshold_s=-1.0, transport=ListTransport())


def stuck_in_the_loader(release: threading.Event) -> None:
    release.wait()


@pytest.fixture
def stuck_thread() -> Iterator[int]:
    release = threading.Event()
    thread = threading.Thread(target=stuck_in_the_loader, args=(release,))
    thread.start()
    yield thread.ident or 0
    release.set()
    thread.join()


def report_of(steps: int, *, idle: float = 0.0, inflight: float | None = None, phase: str | None = None) -> Report:
    return Report(job_id="j", rank=0, pid=1, start_time=1.0, seq=1, steps=steps, phase=phase,
                  step_buckets=buckets_of(0.1, steps), inflight_age={} if inflight is None else {"g": inflight})


def test_the_stack_is_sent_once_per_episode_and_a_new_step_starts_another(stuck_thread: int) -> None:
    watch = HangWatch(10.0)
    watch.thread = stuck_thread
    long_ago = time.time() - 60

    first = watch.mark(report_of(3), long_ago)
    second = watch.mark(report_of(3), long_ago)
    next_episode = watch.mark(report_of(4), long_ago)

    assert (1, 1, 1) == (first.hang_suspected, second.hang_suspected, next_episode.hang_suspected)
    assert first.stack is not None and next_episode.stack is not None and second.stack is None
    functions = [frame.split(":")[-1] for frame in first.stack]
    assert ["wait", "wait", "stuck_in_the_loader", "run"] == functions[:4]  # innermost first


def test_no_suspicion_before_the_first_step_inside_a_phase_or_below_the_threshold(stuck_thread: int) -> None:
    watch = HangWatch(10.0)
    watch.thread = stuck_thread
    long_ago = time.time() - 60

    assert 0 == watch.mark(report_of(0), None).hang_suspected
    assert 0 == watch.mark(report_of(3, phase="checkpoint"), long_ago).hang_suspected
    assert 0 == watch.mark(report_of(3), time.time() - 5).hang_suspected
    assert 1 == watch.mark(report_of(3, inflight=11.0), time.time() - 5).hang_suspected


def recurse(depth: int, ready: threading.Event, release: threading.Event) -> None:
    if depth:
        recurse(depth - 1, ready, release)
    else:
        ready.set()
        release.wait()


def test_a_deep_stack_is_cut_to_64_frames_and_4_kib_and_passes_the_wire() -> None:
    ready, release = threading.Event(), threading.Event()
    thread = threading.Thread(target=recurse, args=(300, ready, release))
    thread.start()
    ready.wait()
    try:
        stack = thread_stack(thread.ident or 0)
    finally:
        release.set()
        thread.join()
    report = wire.decode(wire.encode(Report(job_id="j", rank=0, pid=1, start_time=1.0, seq=1, stack=stack)))

    assert 0 < len(stack) <= 64 and sum(len(f.encode()) for f in stack) <= 4096
    assert stack == report.stack


def test_group_ranks_are_compact() -> None:
    assert "0-3" == rank_ranges([3, 1, 2, 0])
    assert "0-56:8" == rank_ranges(range(0, 64, 8))
    assert "0-1,4,6-7" == rank_ranges([0, 1, 4, 6, 7])
    assert rank_ranges([*range(0, 400, 3), 1000]) is None  # past 128 characters


def test_the_reporter_sends_the_training_threads_stack_once_blocked_in_the_loader() -> None:
    """A real monitor on a one-rank gloo group: the training thread steps, then blocks in its data loader;
    a report made on another thread (as the reporter's are) carries the stack, once, and the group's ranks."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    transport = ListTransport()
    mon = TrainingMonitor(job_id="unit", transport=transport, hang_threshold_s=0.3,
                          env={"TRAINMON_REPORT_INTERVAL": "60"})
    release, blocked = threading.Event(), threading.Event()

    def batches() -> Iterator[int]:
        yield 1
        blocked.set()
        release.wait()

    def train() -> None:
        for _ in mon.dataloader(batches()):
            with mon.step():
                dist.all_reduce(torch_ones())

    thread = threading.Thread(target=train)
    try:
        thread.start()
        blocked.wait()
        time.sleep(0.4)
        assert mon.reporter is not None
        mon.reporter.send_now()
        mon.reporter.send_now()
        first, second = (wire.decode(data) for data in transport.sent[-2:])
    finally:
        release.set()
        thread.join()
        mon.close()
        dist.destroy_process_group()

    assert (1, 1) == (first.hang_suspected, second.hang_suspected)
    assert first.stack is not None and second.stack is None
    assert any(frame.endswith(":_timed") for frame in first.stack)
    assert {"default_pg": "0"} == dict(first.group_ranks)


def torch_ones() -> object:
    import torch

    return torch.ones(4)


@pytest.mark.slow
def test_the_waiting_rank_shows_a_growing_inflight_age_and_the_stuck_rank_lags(
        tmp_path: Path, daemons: list[Daemon]) -> None:
    """Rank 1 stops before its collectives at step 3; rank 0 blocks in all_reduce: its reporter keeps
    reporting, so its oldest in-flight collective ages while it is blocked, and it has issued more."""
    daemon = start_daemon(tmp_path, ["--collectors", "training", "--interval", "0.2"])
    daemons.append(daemon)
    procs = start_job("manual", 100, tmp_path / "job", rank_env={1: {"JOB_HANG_AT": "3"}},
                      env={"TRAINMON_INGEST_SOCKET": str(tmp_path / "ingest.sock"), "JOB_ID": "hang"})
    try:
        def age(text: str) -> float:
            return per_rank(text, "trainmon_nccl_inflight_oldest_seconds", "hang", op="all_reduce").get(0, 0.0)

        first = metrics_when(daemon, lambda t: age(t) > 0.5)
        later = metrics_when(daemon, lambda t: age(t) > age(first) + 1.5)
        issued = per_rank(later, "trainmon_nccl_issued_total", "hang", group="default_pg")
        completed = per_rank(later, "trainmon_nccl_completed_total", "hang", group="default_pg")

        # 4 all_reduce per step: rank 0 issued the async one and the first blocking one of step 3
        assert {0: 3 * 4 + 2, 1: 3 * 4} == issued
        assert {0: 3 * 4, 1: 3 * 4} == completed
        assert 1 not in per_rank(later, "trainmon_nccl_inflight_oldest_seconds", "hang")
        assert procs[0].poll() is None and procs[1].poll() is None
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_a_rank_that_dies_of_an_uncaught_exception_exits_with_error(tmp_path: Path, daemons: list[Daemon]) -> None:
    """atexit still runs after an uncaught exception: the goodbye says `error`, not `clean`."""
    daemon = start_daemon(tmp_path, ["--collectors", "training", "--interval", "0.2"])
    daemons.append(daemon)
    procs = start_job("solo", 5, tmp_path / "job", ranks=2, rank_env={1: {"JOB_RAISE_AT": "2"}},
                      env={"TRAINMON_INGEST_SOCKET": str(tmp_path / "ingest.sock"), "JOB_ID": "exits"})
    codes = [proc.wait(timeout=120) for proc in procs]

    def exits(text: str) -> dict[str, float]:
        found = samples(text, "trainmon_train_rank_exits_total", job_id="exits")
        return {dict(labels)["reason"]: value for labels, value in found.items()}

    seen = metrics_when(daemon, lambda t: sum(exits(t).values()) == 2)

    assert [0, 1] == codes
    assert "planted failure at step 2" in (tmp_path / "job" / "rank-1.log").read_text()
    assert {"clean": 1.0, "error": 1.0} == exits(seen)
