"""The `pod_resources` collector: which Kubernetes container each GPU is allocated to (SPEC §4).

Enabled by `--kubelet-pod-resources-socket`. A background thread calls the kubelet's PodResources
v1 `List` every `REFRESH_SECONDS`, never on a scrape and never from the collection cycle, with a
call timeout shorter than the period so calls never pile up. `collect()` only joins the latest
answer with the GPUs the `gpu` collector read: a device id is a GPU UUID (NVIDIA's device plugin
default; `GPU-…::N` under time-slicing) or an NVML index. A kubelet that is down, slow or answers
garbage fails the collector (its allocations are unknown, so none are served); a device no GPU
here has is dropped and listed in `skipped`.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from trainmon.collectors.base import Collection, NodeResources
from trainmon.collectors.problems import ProblemLog
from trainmon.errors import CollectorError, ConfigError, error_line
from trainmon.families import info
from trainmon.gpu_inventory import InventoryGpu
from trainmon.kubelet.client import ContainerDevices, KubeletError, list_devices
from trainmon.settings import Settings

log = logging.getLogger(__name__)

REFRESH_SECONDS = 30.0
CALL_TIMEOUT_SECONDS = 10.0
STALE_AFTER_REFRESHES = 3
# NVIDIA's device plugin: whole GPUs, and MIG slices under the mixed strategy (`nvidia.com/mig-1g.10gb`).
GPU_RESOURCE = re.compile(r"nvidia\.com/(gpu|mig-.+)")
ALLOCATION_LABELS = ("gpu", "uuid", "namespace", "pod", "container")
SHARED_SUFFIX = "::"  # time-slicing replicas: `GPU-<uuid>::<replica>`


@dataclass(frozen=True, slots=True)
class Listing:
    """One refresh: the devices listed, or why the call failed."""

    devices: tuple[ContainerDevices, ...]
    error: str | None
    at: float  # Unix time, for /api/v1/status
    received: float  # the collector's monotonic clock: a step of the wall clock does not age an answer


@dataclass(frozen=True, slots=True)
class Allocations:
    rows: tuple[tuple[str, ...], ...]  # label values in ALLOCATION_LABELS order, without repeats
    unknown: tuple[str, ...]  # devices no GPU here has, as stable problem texts


def match_allocations(devices: Iterable[ContainerDevices], gpus: Sequence[InventoryGpu]) -> Allocations:
    """GPU devices matched to this node's GPUs by UUID, else by index; other resources are ignored."""
    by_uuid = {g.uuid: g for g in gpus}
    by_index = {str(g.index): g for g in gpus}
    rows: dict[tuple[str, ...], None] = {}
    unknown: list[str] = []
    for entry in devices:
        if not GPU_RESOURCE.fullmatch(entry.resource_name):
            continue
        owner = f"{entry.namespace}/{entry.pod}/{entry.container}"
        for device_id in entry.device_ids:
            gpu = by_uuid.get(device_id.partition(SHARED_SUFFIX)[0]) or by_index.get(device_id)
            if gpu is None:
                unknown.append(f"{owner!r}: {entry.resource_name} device {device_id[:80]!r} is no GPU of this node")
                continue
            row = (str(gpu.index), gpu.uuid, entry.namespace, entry.pod, entry.container)
            if not all(value.isprintable() for value in row):
                unknown.append(f"{owner!r}: names that are not printable, GPU {gpu.index} not attributed")
                continue
            rows[row] = None
    return Allocations(rows=tuple(rows), unknown=tuple(unknown))


class PodResourcesCollector:
    name = "pod_resources"

    def __init__(self, settings: Settings, resources: NodeResources,
                 refresh_s: float = REFRESH_SECONDS, call_timeout_s: float = CALL_TIMEOUT_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if settings.kubelet_pod_resources_socket is None:
            raise ConfigError("kubelet-pod-resources-socket", "", "the pod_resources collector needs the socket")
        self._socket: Path = settings.kubelet_pod_resources_socket
        self._inventory = resources.gpus
        self._refresh_s = refresh_s
        self._clock = clock
        self._call_timeout_s = min(call_timeout_s, refresh_s / 2)
        # The first collection waits a little for the first answer, so `trainmon check` has one.
        self._first_wait_s = settings.collector_timeout / 2
        self._problems = ProblemLog(log, self.name)
        self._listing: Listing | None = None
        self._listed = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._refresh_loop, name="pod-resources-refresh", daemon=True)
        self._thread.start()

    def _refresh_loop(self) -> None:
        while True:
            self.refresh()
            if self._stop.wait(self._refresh_s):
                return

    def refresh(self) -> Listing:
        """One `List` call; what `collect()` serves until the next."""
        try:
            devices, error = list_devices(self._socket, self._call_timeout_s), None
        except KubeletError as exc:
            devices, error = (), str(exc)
        except Exception as exc:  # whatever else goes wrong, the refresher thread must live on
            devices, error = (), error_line(exc)
        listing = Listing(devices=devices, error=error, at=time.time(), received=self._clock())
        self._listing = listing
        self._listed.set()
        return listing

    def collect(self) -> Collection:
        self._listed.wait(self._first_wait_s)
        listing = self._listing
        if listing is None:
            raise CollectorError(f"no answer yet from the kubelet at {self._socket}")
        if listing.error is not None:
            raise CollectorError(f"kubelet PodResources List at {self._socket} failed: {listing.error}")
        age = self._clock() - listing.received
        if age > STALE_AFTER_REFRESHES * self._refresh_s:
            raise CollectorError(f"the last kubelet answer is {age:.0f}s old: the refresher is stuck")
        gpus = self._inventory.latest()
        if gpus is None:
            raise CollectorError("no GPU inventory to match devices to: the gpu collector has not run (enabled?)")
        allocations = match_allocations(listing.devices, gpus)
        family = info("gpu_allocation", "GPU allocated to a Kubernetes container (kubelet PodResources List); "
                      "join on (gpu, uuid).", ALLOCATION_LABELS)
        for row in allocations.rows:
            family.add_metric(list(row), {})
        return Collection(
            families=(family,),
            found=tuple(f"gpu {row[0]} {row[1]}: {row[2]}/{row[3]} container {row[4]}" for row in allocations.rows),
            skipped=self._problems.update(allocations.unknown),
            details={"kubelet_socket": str(self._socket), "listed_at": listing.at,
                     "allocated_gpus": len({row[1] for row in allocations.rows})},
        )

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)


__all__ = ["PodResourcesCollector", "match_allocations"]
