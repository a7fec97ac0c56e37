"""Runs the collectors every interval in the background and publishes one snapshot per cycle.

Each collector has its own worker thread, so one that raises or hangs fails alone. A cycle waits
for each collector at most `settings.collector_timeout`; a collector still running then is
reported as failing, and no second call is started on top of it (a hung ctypes call into NVML
cannot be cancelled), until it returns.

Collectors run one after another, not all at once: in CPython, threads that all want the GIL
cost nearly twice the CPU of the same work done in turn. A collector that takes longer than a
quarter of the timeout stops holding up the next one, which then starts beside it.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prometheus_client import ProcessCollector

from trainmon import __version__
from trainmon.catalog import daemon as catalog
from trainmon.collectors.base import Collection, Collector
from trainmon.errors import CollectorError, NoData, error_line
from trainmon.families import Metric, gauge, info
from trainmon.snapshot import CollectorState, CollectorStatus, Snapshot, SnapshotStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Outcome:
    collection: Collection | None
    error: BaseException | None
    duration_s: float


class CollectorRunner:
    """One daemon thread per collector; at most one `collect()` in flight."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self._requests: queue.SimpleQueue[concurrent.futures.Future[Outcome] | None] = queue.SimpleQueue()
        self._pending: concurrent.futures.Future[Outcome] | None = None
        self._started_at = 0.0
        self._thread = threading.Thread(target=self._loop, name=f"collector-{collector.name}", daemon=True)
        self._thread.start()

    @property
    def busy_for(self) -> float | None:
        """Seconds the call in flight has run, or None when idle."""
        if self._pending is None or self._pending.done():
            return None
        return time.monotonic() - self._started_at

    def submit(self) -> concurrent.futures.Future[Outcome] | None:
        """Start a collection, or return None while the previous one is still running."""
        if self.busy_for is not None:
            return None
        future: concurrent.futures.Future[Outcome] = concurrent.futures.Future()
        self._pending = future
        self._started_at = time.monotonic()
        self._requests.put(future)
        return future

    def stop(self) -> None:
        self._requests.put(None)

    def _loop(self) -> None:
        while (future := self._requests.get()) is not None:
            start = time.monotonic()
            try:
                outcome = Outcome(self.collector.collect(), None, time.monotonic() - start)
            except Exception as exc:
                outcome = Outcome(None, exc, time.monotonic() - start)
            future.set_result(outcome)


class Scheduler:
    def __init__(
        self,
        collectors: Sequence[Collector],
        store: SnapshotStore,
        interval: float,
        timeout: float,
        clock: Callable[[], float] = time.time,
        before_cycle: Callable[[], None] = lambda: None,
        simulated: bool = False,
    ) -> None:
        self._runners = [CollectorRunner(c) for c in collectors]
        self._simulated = simulated
        self._store = store
        self._interval = interval
        self._timeout = timeout
        self._clock = clock
        self._before_cycle = before_cycle
        self._last_success: dict[str, float] = {}
        self._previous_state: dict[str, CollectorState] = {}
        self._process = ProcessCollector(registry=None)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the cycle thread and the collectors; a hung collector is abandoned, not joined."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        for runner in self._runners:
            runner.stop()
        for runner in self._runners:
            if runner.busy_for is None:
                try:
                    runner.collector.close()
                except Exception:
                    log.exception("collector close failed collector=%s", runner.collector.name)

    def run_cycle(self) -> Snapshot:
        """Collect once from every collector (bounded by the timeout) and publish the snapshot."""
        self._before_cycle()
        started = time.monotonic()
        deadline = started + self._timeout
        submitted: dict[CollectorRunner, concurrent.futures.Future[Outcome] | None] = {}
        for runner in self._runners:
            future = submitted[runner] = runner.submit()
            if future is not None:
                concurrent.futures.wait([future], timeout=min(self._timeout / 4, max(0.0, deadline - time.monotonic())))
        futures = [f for f in submitted.values() if f is not None]
        concurrent.futures.wait(futures, timeout=max(0.0, deadline - time.monotonic()))
        now = self._clock()
        statuses: list[CollectorStatus] = []
        families: list[Metric] = []
        for runner, future in submitted.items():
            status, collected = self._status(runner, future, now, time.monotonic() - started)
            self._log_change(status)
            statuses.append(status)
            families.extend(collected)
        families.extend(self._self_metrics(statuses))
        families.extend(self._process.collect())
        snapshot = Snapshot(families=tuple(families), statuses=tuple(statuses), taken_at=now)
        self._store.publish(snapshot)
        return snapshot

    def _status(
        self,
        runner: CollectorRunner,
        future: concurrent.futures.Future[Outcome] | None,
        now: float,
        waited: float,
    ) -> tuple[CollectorStatus, tuple[Metric, ...]]:
        name = runner.collector.name
        if future is None or not future.done():
            running = runner.busy_for or waited
            error = f"still running after {running:.1f}s (timeout {self._timeout:.1f}s); not restarted while in flight"
            return self._failing(name, running, error), ()
        outcome = future.result()
        if outcome.error is None and outcome.collection is not None:
            self._last_success[name] = now
            c = outcome.collection
            status = CollectorStatus(name=name, state="ok", duration_s=outcome.duration_s, last_success=now,
                                     found=c.found, skipped=c.skipped, details=c.details)
            return status, c.families
        if isinstance(outcome.error, NoData):
            self._last_success[name] = now
            status = CollectorStatus(name=name, state="no_data", duration_s=outcome.duration_s,
                                     error=str(outcome.error), last_success=now)
            return status, ()
        partial = outcome.error.families if isinstance(outcome.error, CollectorError) else ()
        return self._failing(name, outcome.duration_s, error_line(outcome.error)), partial

    def _failing(self, name: str, duration: float, error: str) -> CollectorStatus:
        return CollectorStatus(name=name, state="failing", duration_s=duration, error=error,
                               last_success=self._last_success.get(name))

    def _log_change(self, status: CollectorStatus) -> None:
        previous = self._previous_state.get(status.name)
        self._previous_state[status.name] = status.state
        if previous == status.state:
            return
        if status.state == "failing":
            log.warning("collector failing collector=%s error=%s", status.name, status.error)
        elif status.state == "no_data":
            log.info("collector found no hardware collector=%s reason=%s", status.name, status.error)
        elif previous is not None:
            log.info("collector recovered collector=%s", status.name)

    def _self_metrics(self, statuses: Sequence[CollectorStatus]) -> list[Metric]:
        build = info(catalog.BUILD_INFO)
        build.add_metric([__version__], {})
        success, duration = gauge(catalog.COLLECTOR_SUCCESS), gauge(catalog.COLLECTOR_DURATION_SECONDS)
        last = gauge(catalog.COLLECTOR_LAST_SUCCESS_TIMESTAMP_SECONDS)
        for status in statuses:
            success.add_metric([status.name], 1 if status.ok else 0)
            duration.add_metric([status.name], status.duration_s)
            if status.last_success is not None:
                last.add_metric([status.name], status.last_success)
        if not self._simulated:
            return [build, success, duration, last]
        marker = info(catalog.DEMO_INFO)
        marker.add_metric(["true"], {})
        return [build, marker, success, duration, last]

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.run_cycle()
            except Exception:
                log.exception("collection cycle failed")
            self._stop.wait(max(0.0, self._interval - (time.monotonic() - started)))
