"""The `pod_resources` collector: which Kubernetes container each GPU is allocated to (SPEC §4).

Enabled by `--kubelet-pod-resources-socket`. A background thread calls the kubelet's PodResources
v1 `List` every `--kubelet-pod-resources-refresh` seconds, never on a scrape and never from the collection cycle, with a
call timeout shorter than the period so calls never pile up. `collect()` only joins the latest
answer with the GPUs the `gpu` collector read: a device id is a GPU UUID (NVIDIA's device plugin
default; `GPU-…::N` under time-slicing) or an NVML index. Under DRA a device is named by NVIDIA's
DRA driver (`gpu-<minor>`, `gpu-<minor>-mig-<profile>-<start>-<size>`) and matched by NVML's minor
number, without the API server: a MIG device is its parent GPU. A kubelet that is down, slow or
answers garbage fails the collector (its allocations are unknown, so none are served); a device no
GPU here has, or a DRA device name trainmon cannot map, is dropped and listed in `skipped`.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from trainmon.catalog.pod_resources import GPU_ALLOCATION_INFO
from trainmon.collectors.base import Collection, NodeResources
from trainmon.collectors.problems import MAX_LISTED, ProblemLog
from trainmon.errors import CollectorError, ConfigError, error_line
from trainmon.families import info
from trainmon.gpu_inventory import InventoryGpu
from trainmon.kubelet.client import Allocated, ClaimDevice, ContainerDevices, KubeletError, list_devices
from trainmon.settings import Settings

log = logging.getLogger(__name__)

CALL_TIMEOUT_SECONDS = 10.0
STALE_AFTER_REFRESHES = 3
# NVIDIA's device plugin: whole GPUs, and MIG slices under the mixed strategy (`nvidia.com/mig-1g.10gb`).
GPU_RESOURCE = re.compile(r"nvidia\.com/(gpu|mig-.+)")
SHARED_SUFFIX = "::"  # time-slicing replicas: `GPU-<uuid>::<replica>`
# NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu) and its device names: a whole GPU by
# NVML minor number, a MIG device by its parent's minor number, GPU-instance profile and placement.
NVIDIA_DRA_DRIVER = "gpu.nvidia.com"
DRA_DEVICE_NAME = re.compile(
    r"gpu-(?P<minor>[0-9]{1,4})(?:-mig-(?P<profile>[0-9A-Za-z.+]{1,32})-(?P<start>[0-9]{1,3})-(?P<size>[0-9]{1,3}))?")
# Kubernetes' own limits: a namespace and a container name are DNS labels, a pod and a claim name DNS
# subdomains. A longer name is not from the kubelet: its allocation is dropped and noted.
MAX_NAME_CHARS = {"namespace": 63, "pod": 253, "container": 63, "claim": 253}
# Containers served per GPU: time-slicing or MPS replicas share a GPU, tens at most; more are counted, not served.
MAX_ROWS_PER_GPU = 64
MAX_NOTES = MAX_LISTED // 2  # devices not attributed named one by one; the room left is for the per-GPU notes


@dataclass(frozen=True, slots=True)
class Listing:
    """One refresh: the devices listed, or why the call failed."""

    devices: tuple[Allocated, ...]
    error: str | None
    at: float  # Unix time, for /api/v1/status
    received: float  # the collector's monotonic clock: a step of the wall clock does not age an answer


@dataclass(frozen=True, slots=True)
class DraGpu:
    """What a DRA device name says: the GPU's minor number, and the MIG instance if it is one."""

    minor_number: str
    mig: str  # `<profile>-<start>-<size>`, "" for a whole GPU


def parse_dra_device(name: str) -> DraGpu | None:
    """The GPU an NVIDIA DRA driver device name points at; None for a name in no scheme trainmon knows."""
    match = DRA_DEVICE_NAME.fullmatch(name)
    if match is None:
        return None
    mig = "" if match["profile"] is None else f"{match['profile']}-{match['start']}-{match['size']}"
    return DraGpu(minor_number=str(int(match["minor"])), mig=mig)


@dataclass(frozen=True, slots=True)
class Allocations:
    rows: tuple[tuple[str, ...], ...]  # label values in GPU_ALLOCATION_INFO.labels order, without repeats
    found: tuple[str, ...]  # one line per row, with the MIG instance where there is one
    unknown: tuple[str, ...]  # devices not attributed and rows not served, as stable problem texts (bounded)
    not_attributed: int = 0  # devices no GPU here has, or whose names are not label values
    not_served: int = 0  # rows over MAX_ROWS_PER_GPU


class _Matcher:
    """Collects rows and problems while the devices of one `List` answer are matched to this node's GPUs."""

    def __init__(self, gpus: Sequence[InventoryGpu]) -> None:
        self.by_uuid = {g.uuid: g for g in gpus}
        self.by_index = {str(g.index): g for g in gpus}
        self.by_minor = {g.minor_number: g for g in gpus if g.minor_number}
        self.rows: dict[tuple[str, ...], str] = {}
        self.per_gpu: dict[str, int] = {}
        self.unknown: list[str] = []
        self.problems = 0
        self.not_served: dict[str, int] = {}  # by GPU index: rows over MAX_ROWS_PER_GPU

    def noting(self) -> bool:
        """Count one device not attributed; True while its text is to be kept (the first MAX_NOTES: an answer
        can list hundreds of thousands, whose texts are not even made)."""
        self.problems += 1
        return len(self.unknown) < MAX_NOTES

    def add(self, entry: Allocated, gpu: InventoryGpu, source: str, claim: str = "", mig: str = "") -> None:
        row = (str(gpu.index), gpu.uuid, entry.namespace, entry.pod, entry.container, source, claim)
        if not all(value.isprintable() for value in row):
            if self.noting():
                self.unknown.append(f"{_owner(entry)!r}: names that are not printable, GPU {gpu.index} "
                                    "not attributed")
            return
        if too_long := _too_long(entry, claim):
            if self.noting():
                self.unknown.append(f"{_owner(entry)!r}: {too_long}, GPU {gpu.index} not attributed")
            return
        if row in self.rows:
            return
        if self.per_gpu.get(row[0], 0) >= MAX_ROWS_PER_GPU:
            self.not_served[row[0]] = self.not_served.get(row[0], 0) + 1
            return
        self.per_gpu[row[0]] = self.per_gpu.get(row[0], 0) + 1
        via = f" claim {claim}" if claim else ""
        instance = f" MIG {mig}" if mig else ""
        self.rows[row] = f"gpu {row[0]} {row[1]}{instance}: {row[2]}/{row[3]} container {row[4]} ({source}{via})"

    def problem_lines(self) -> tuple[str, ...]:
        more = [f"{self.problems - len(self.unknown)} more devices not attributed"] \
            if self.problems > len(self.unknown) else []
        capped = [f"gpu {index}: {count} more container allocations not served (at most {MAX_ROWS_PER_GPU} a GPU)"
                  for index, count in sorted(self.not_served.items())]
        return (*self.unknown, *more, *capped)


    def device_plugin(self, entry: ContainerDevices) -> None:
        if not GPU_RESOURCE.fullmatch(entry.resource_name):
            return
        for device_id in entry.device_ids:
            gpu = self.by_uuid.get(device_id.partition(SHARED_SUFFIX)[0]) or self.by_index.get(device_id)
            if gpu is None:
                if self.noting():
                    self.unknown.append(f"{_owner(entry)!r}: {entry.resource_name[:80]} device "
                                        f"{device_id[:80]!r} is no GPU of this node")
                continue
            self.add(entry, gpu, "device_plugin")

    def dra(self, entry: ClaimDevice) -> None:
        where = f"{_owner(entry)!r}: DRA claim {entry.claim[:80]!r} device {entry.pool[:80]!r}/{entry.device[:80]!r}"
        parsed = parse_dra_device(entry.device) if entry.driver == NVIDIA_DRA_DRIVER else None
        if parsed is None:
            if self.noting():
                self.unknown.append(f"{where} of driver {entry.driver[:80]!r}: not a device name trainmon can map")
            return
        gpu = self.by_minor.get(parsed.minor_number)
        if gpu is None:
            if self.noting():
                self.unknown.append(f"{where}: no GPU of this node has minor number {parsed.minor_number}")
            return
        self.add(entry, gpu, "dra", entry.claim, parsed.mig)


def _too_long(entry: Allocated, claim: str) -> str:
    """Which name is longer than Kubernetes allows, "" when none is."""
    names = {"namespace": entry.namespace, "pod": entry.pod, "container": entry.container, "claim": claim}
    return ", ".join(f"{what} name of {len(names[what])} characters (Kubernetes allows {limit})"
                     for what, limit in MAX_NAME_CHARS.items() if len(names[what]) > limit)

def _owner(entry: Allocated) -> str:
    """The container, each name cut to Kubernetes' longest (a note never repeats a 10 KB name)."""
    return "/".join(name[:limit] for name, limit in
                    zip((entry.namespace, entry.pod, entry.container), MAX_NAME_CHARS.values(), strict=False))


def match_allocations(devices: Iterable[Allocated], gpus: Sequence[InventoryGpu]) -> Allocations:
    """GPU devices matched to this node's GPUs: device plugins' by UUID, else by index; DRA devices by
    minor number. Other device-plugin resources are ignored; other DRA drivers' devices are unknown."""
    matcher = _Matcher(gpus)
    for entry in devices:
        if isinstance(entry, ClaimDevice):
            matcher.dra(entry)
        else:
            matcher.device_plugin(entry)
    return Allocations(rows=tuple(matcher.rows), found=tuple(matcher.rows.values()), unknown=matcher.problem_lines(),
                       not_attributed=matcher.problems, not_served=sum(matcher.not_served.values()))


class PodResourcesCollector:
    name = "pod_resources"

    def __init__(self, settings: Settings, resources: NodeResources,
                 refresh_s: float | None = None, call_timeout_s: float = CALL_TIMEOUT_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`refresh_s` replaces `--kubelet-pod-resources-refresh`."""
        if settings.kubelet_pod_resources_socket is None:
            raise ConfigError("kubelet-pod-resources-socket", "", "the pod_resources collector needs the socket")
        self._socket: Path = settings.kubelet_pod_resources_socket
        self._inventory = resources.gpus
        self._refresh_s = settings.kubelet_pod_resources_refresh if refresh_s is None else refresh_s
        self._clock = clock
        self._call_timeout_s = min(call_timeout_s, self._refresh_s / 2)
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
        family = info(GPU_ALLOCATION_INFO)
        for row in allocations.rows:
            family.add_metric(list(row), {})
        return Collection(
            families=(family,),
            found=allocations.found,
            skipped=self._problems.update(allocations.unknown),
            details={"kubelet_socket": str(self._socket), "listed_at": listing.at,
                     "allocated_gpus": len({row[1] for row in allocations.rows}),
                     "devices_not_attributed": allocations.not_attributed,
                     "allocations_not_served": allocations.not_served},
        )

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)


__all__ = ["PodResourcesCollector", "match_allocations", "parse_dra_device"]
