"""Assembles the daemon: collectors, scheduler, snapshot store and HTTP server."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainmon.collectors import build_collector
from trainmon.collectors.base import Collection, Collector
from trainmon.errors import CollectorError
from trainmon.scheduler import Scheduler, describe
from trainmon.settings import Settings
from trainmon.snapshot import Snapshot, SnapshotStore

if TYPE_CHECKING:
    from trainmon.webconfig import WebConfig

log = logging.getLogger(__name__)


@dataclass
class UnbuildableCollector:
    """Stands in for a collector whose construction failed, so the failure shows every cycle."""

    name: str
    error: str

    def collect(self) -> Collection:
        raise CollectorError(f"could not start: {self.error}")

    def close(self) -> None:
        pass


def build_collectors(settings: Settings) -> list[Collector]:
    collectors: list[Collector] = []
    for name in settings.collectors:
        try:
            collectors.append(build_collector(name, settings))
        except Exception as exc:
            log.warning("collector could not start collector=%s error=%s", name, describe(exc))
            collectors.append(UnbuildableCollector(name, describe(exc)))
    return collectors


def make_scheduler(settings: Settings, collectors: Sequence[Collector], store: SnapshotStore) -> Scheduler:
    return Scheduler(collectors, store, interval=settings.interval, timeout=settings.collector_timeout)


def collect_once(settings: Settings) -> Snapshot:
    """One cycle of every enabled collector, for `trainmon check`."""
    collectors = build_collectors(settings)
    scheduler = make_scheduler(settings, collectors, SnapshotStore())
    try:
        return scheduler.run_cycle()
    finally:
        scheduler.stop()


def serve(settings: Settings, web: WebConfig | None = None) -> int:
    """Collect in the background and serve HTTP until a stop signal; `web` is the loaded --web-config."""
    from trainmon.http.app import create_app
    from trainmon.http.server import run_server

    store = SnapshotStore()
    scheduler = make_scheduler(settings, build_collectors(settings), store)
    scheduler.start()
    log.info("serving listen=%s collectors=%s interval=%ss%s", settings.listen, ",".join(settings.collectors),
             settings.interval, " SIMULATED node (trainmon demo)" if settings.simulated else "")
    try:
        run_server(create_app(store, simulated=settings.simulated), settings, web)
    finally:
        scheduler.stop()
    log.info("stopped")
    return 0
