"""Assembles the daemon: the ingest server, collectors, scheduler, snapshot store and HTTP server."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainmon.collectors import build_collector
from trainmon.collectors.base import Collection, Collector, NodeResources, NvmlStandIn
from trainmon.errors import CollectorError, error_line
from trainmon.ingest.ranks import Procfs, RankTable
from trainmon.ingest.server import IngestServer
from trainmon.profiles import profile_shape
from trainmon.scheduler import Scheduler
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


def build_ingest(settings: Settings) -> IngestServer:
    """The ingest server and its rank table; the daemon maintains and closes it, the training collector reads it."""
    from trainmon.collectors.training import rank_series

    table = RankTable(max_ranks=settings.max_ranks, ttl=settings.rank_ttl, series_of=rank_series,
                      max_series=settings.max_training_series, exit_retention=settings.exit_retention,
                      exited_retention=settings.exited_rank_retention,
                      procfs=Procfs(settings.procfs))
    return IngestServer(table, socket_path=settings.ingest_socket, mode=settings.ingest_socket_mode,
                        group=settings.ingest_socket_group, udp=settings.ingest_udp,
                        inherited_fd=settings.ingest_socket_fd)


def build_collectors(settings: Settings, resources: NodeResources) -> list[Collector]:
    """The enabled collectors, each built from `settings` and the node's one set of `resources`."""
    collectors: list[Collector] = []
    for name in settings.collectors:
        try:
            collectors.append(build_collector(name, settings, resources))
        except Exception as exc:
            log.warning("collector could not start collector=%s error=%s", name, error_line(exc))
            collectors.append(UnbuildableCollector(name, error_line(exc)))
    return collectors


def build_resources(settings: Settings, nvml: NvmlStandIn | None = None) -> NodeResources:
    """The node-wide resources: an ingest server when `training` is enabled, one GPU inventory, and `nvml`
    (the demo's simulated node) in place of the system's NVML."""
    return NodeResources(ingest=build_ingest(settings) if "training" in settings.collectors else None, nvml=nvml)


def maintain_resources(resources: NodeResources) -> None:
    """Before each cycle: bind what is not bound yet and repair what broke, for the collectors to read."""
    if resources.ingest is not None:
        resources.ingest.maintain()


def close_resources(resources: NodeResources) -> None:
    if resources.ingest is not None:
        resources.ingest.close()


def make_scheduler(settings: Settings, resources: NodeResources, store: SnapshotStore) -> Scheduler:
    """The scheduler of `resources`' collectors, which maintains `resources` before each cycle."""
    return Scheduler(build_collectors(settings, resources), store, interval=settings.interval,
                     timeout=settings.collector_timeout, before_cycle=lambda: maintain_resources(resources),
                     simulated=resources.nvml is not None)


def collect_once(settings: Settings) -> Snapshot:
    """One cycle of every enabled collector, for `trainmon check`."""
    resources = build_resources(settings)
    scheduler = make_scheduler(settings, resources, SnapshotStore())
    try:
        return scheduler.run_cycle()
    finally:
        scheduler.stop()
        close_resources(resources)


def serve(settings: Settings, web: WebConfig | None = None, nvml: NvmlStandIn | None = None) -> int:
    """Collect in the background and serve HTTP until a stop signal; `web` is the loaded --web-config,
    `nvml` the demo's simulated node in place of the system's NVML."""
    from trainmon.http.app import create_app
    from trainmon.http.server import run_server

    store = SnapshotStore(profile_shape(settings.profile))
    resources = build_resources(settings, nvml)
    scheduler = make_scheduler(settings, resources, store)
    scheduler.start()
    log.info("serving listen=%s collectors=%s interval=%ss%s", settings.listen, ",".join(settings.collectors),
             settings.interval, " SIMULATED node (trainmon demo)" if nvml is not None else "")
    try:
        run_server(create_app(store, simulated=nvml is not None), settings, web)
    finally:
        scheduler.stop()
        close_resources(resources)
    log.info("stopped")
    return 0
