from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol

import pytest

from tests.helpers.catalog import assert_declared
from tests.helpers.metrics import registry_of
from trainmon import __version__
from trainmon.catalog import Family, Kind, daemon
from trainmon.collectors.base import Collection
from trainmon.errors import CollectorError, NoData
from trainmon.families import gauge
from trainmon.scheduler import Scheduler
from trainmon.snapshot import SnapshotStore


class Constant:
    """A collector that always answers one gauge."""

    def __init__(self, name: str, value: float = 1.0) -> None:
        self.name = name
        self.value = value
        self.calls = 0

    def collect(self) -> Collection:
        self.calls += 1
        family = gauge(Family(f"trainmon_test_{self.name}", Kind.GAUGE, "test"))
        family.add_metric([], self.value)
        return Collection(families=(family,), found=(f"{self.name} found",))

    def close(self) -> None:
        pass


class Raising(Constant):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.fail = True

    def collect(self) -> Collection:
        if self.fail:
            self.calls += 1
            raise OSError("device went away")
        return super().collect()


class Hanging(Constant):
    """Blocks in collect() until released, like a ctypes call into a wedged driver."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.release = threading.Event()

    def collect(self) -> Collection:
        self.calls += 1
        self.release.wait(30)
        return super().collect()


class Absent(Constant):
    def collect(self) -> Collection:
        raise NoData("no such hardware here")


class Build(Protocol):
    def __call__(self, *collectors: Constant, timeout: float = 0.3, interval: float = 1.0,
                 clock: Callable[[], float] = time.time) -> tuple[Scheduler, SnapshotStore]: ...


@pytest.fixture
def scheduler() -> Iterator[Build]:
    """Builds schedulers and, even when a test fails, releases their hung collectors and stops them."""
    built: list[tuple[Scheduler, tuple[Constant, ...]]] = []

    def build(*collectors: Constant, timeout: float = 0.3, interval: float = 1.0,
              clock: Callable[[], float] = time.time) -> tuple[Scheduler, SnapshotStore]:
        store = SnapshotStore()
        sched = Scheduler(list(collectors), store, interval=interval, timeout=timeout, clock=clock)
        built.append((sched, collectors))
        return sched, store

    yield build
    for sched, collectors in built:
        for collector in collectors:
            if isinstance(collector, Hanging):
                collector.release.set()
        sched.stop()


def test_a_raising_collector_fails_alone(scheduler: Build) -> None:
    good, bad = Constant("good"), Raising("bad")
    sched, _ = scheduler(good, bad)

    snapshot = sched.run_cycle()
    registry = registry_of(snapshot.families)

    assert 1 == registry.get_sample_value("trainmon_test_good")
    assert 1 == registry.get_sample_value("trainmon_collector_success", {"collector": "good"})
    assert 0 == registry.get_sample_value("trainmon_collector_success", {"collector": "bad"})
    assert "OSError: device went away" == snapshot.status("bad").error  # type: ignore[union-attr]


class FailingWithWhatItKnows(Constant):
    def collect(self) -> Collection:
        known = gauge(Family("trainmon_test_known", Kind.GAUGE, "what the collector can still vouch for"))
        known.add_metric([], 0.0)
        raise CollectorError("driver gone", families=(known,))


def test_a_failing_collector_may_still_serve_what_it_knows(scheduler: Build) -> None:
    sched, _ = scheduler(FailingWithWhatItKnows("partial"))

    registry = registry_of(sched.run_cycle().families)

    assert 0 == registry.get_sample_value("trainmon_collector_success", {"collector": "partial"})
    assert 0 == registry.get_sample_value("trainmon_test_known")


def test_a_hanging_collector_is_bounded_and_not_restarted_while_in_flight(scheduler: Build) -> None:
    good, hung = Constant("good"), Hanging("hung")
    sched, _ = scheduler(good, hung)

    first = sched.run_cycle()
    second = sched.run_cycle()

    assert 2 == good.calls
    assert 1 == hung.calls  # the second cycle did not start another call on top of the hung one
    for snapshot in (first, second):
        registry = registry_of(snapshot.families)
        assert 1 == registry.get_sample_value("trainmon_test_good")
        assert 0 == registry.get_sample_value("trainmon_collector_success", {"collector": "hung"})
        assert "still running" in (snapshot.status("hung").error or "")  # type: ignore[union-attr]


def test_a_hung_collector_recovers_once_its_call_returns(scheduler: Build) -> None:
    hung = Hanging("hung")
    sched, _ = scheduler(hung)
    sched.run_cycle()
    hung.release.set()

    for _ in range(100):  # the late call finishes in the background; the next cycle starts a fresh one
        snapshot = sched.run_cycle()
        if snapshot.status("hung").ok:  # type: ignore[union-attr]
            break

    assert 1 == registry_of(snapshot.families).get_sample_value("trainmon_collector_success", {"collector": "hung"})


def test_absent_hardware_is_not_a_failure(scheduler: Build) -> None:
    sched, _ = scheduler(Absent("ib"))

    snapshot = sched.run_cycle()

    assert "no_data" == snapshot.status("ib").state  # type: ignore[union-attr]
    assert 1 == registry_of(snapshot.families).get_sample_value("trainmon_collector_success", {"collector": "ib"})


def test_state_changes_are_logged_once(scheduler: Build, caplog: pytest.LogCaptureFixture) -> None:
    flaky = Raising("flaky")
    sched, _ = scheduler(flaky)
    caplog.set_level(logging.INFO, logger="trainmon.scheduler")

    for _ in range(3):
        sched.run_cycle()
    flaky.fail = False
    for _ in range(3):
        sched.run_cycle()

    messages = [r.getMessage() for r in caplog.records]
    assert 1 == sum("collector failing collector=flaky" in m for m in messages)
    assert 1 == sum("collector recovered collector=flaky" in m for m in messages)


def test_self_metrics_and_last_success(scheduler: Build) -> None:
    clock = iter([100.0, 105.0])
    flaky = Raising("flaky")
    flaky.fail = False
    sched, store = scheduler(flaky, clock=lambda: next(clock))

    sched.run_cycle()
    flaky.fail = True
    snapshot = sched.run_cycle()
    registry = registry_of(snapshot.families)

    assert 100.0 == registry.get_sample_value("trainmon_collector_last_success_timestamp_seconds",
                                              {"collector": "flaky"})
    assert registry.get_sample_value("trainmon_collector_duration_seconds", {"collector": "flaky"}) is not None
    assert 1 == registry.get_sample_value("trainmon_build_info", {"version": __version__})
    assert registry.get_sample_value("process_resident_memory_bytes") is not None
    assert registry.get_sample_value("trainmon_info", {"simulated": "true"}) is None  # the demo's marker only
    assert store.latest() is snapshot


def test_the_self_metrics_and_the_demos_marker_are_declared_in_the_catalogue() -> None:
    sched = Scheduler([Constant("good")], SnapshotStore(), interval=1.0, timeout=0.3, simulated=True)
    try:
        snapshot = sched.run_cycle()
    finally:
        sched.stop()
    own = [f for f in snapshot.families if not f.name.startswith(("process_", "trainmon_test_"))]

    assert {family.name for family in daemon.FAMILIES} == assert_declared(own, "daemon")


def test_background_thread_publishes_and_stops_promptly(scheduler: Build) -> None:
    sched, store = scheduler(Constant("good"), interval=0.05)

    sched.start()
    assert store.wait(5) is not None
    sched.stop(timeout=2)

    assert not sched._thread.is_alive()


class Timed(Constant):
    """Records when each call ran, into a list the test owns."""

    def __init__(self, name: str, spans: list[tuple[str, float, float]]) -> None:
        super().__init__(name)
        self.spans = spans

    def collect(self) -> Collection:
        start = time.monotonic()
        time.sleep(0.02)
        result = super().collect()
        self.spans.append((self.name, start, time.monotonic()))
        return result


def test_quick_collectors_run_one_after_another(scheduler: Build) -> None:
    """No two collectors hold the GIL against each other when each finishes in good time.

    "Good time" is a quarter of the timeout: 15 s here for 20 ms collectors, so a loaded machine that delays
    a thread by seconds still runs them one after another (the cycle ends when the last one does)."""
    spans: list[tuple[str, float, float]] = []
    sched, _ = scheduler(Timed("a", spans), Timed("b", spans), Timed("c", spans), timeout=60.0)

    sched.run_cycle()

    (_, _, a_end), (_, b_start, b_end), (_, c_start, _) = sorted(spans, key=lambda span: span[1])
    assert a_end <= b_start and b_end <= c_start


def test_a_hanging_collector_first_does_not_starve_the_next(scheduler: Build) -> None:
    hung, good = Hanging("hung"), Constant("good")
    # `good` starts after a quarter of the timeout and has the other 1.5 s, seconds more than it needs even on
    # a loaded machine; `hung` waits on an Event the fixture sets, not on a clock
    sched, _ = scheduler(hung, good, timeout=2.0)

    registry = registry_of(sched.run_cycle().families)

    assert 1 == registry.get_sample_value("trainmon_collector_success", {"collector": "good"})
    assert 0 == registry.get_sample_value("trainmon_collector_success", {"collector": "hung"})
