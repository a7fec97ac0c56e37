"""NVMe namespaces: I/O counters from <procfs>/diskstats, identity from <sysfs>/class/nvme.

Values equal node_exporter's `node_disk_*` for the same device and the same procfs. A namespace
finds its controller among the controller's entries (`nvme0n1`, or `nvme0c0n1` for a multipath
path) or, failing that, through `<sysfs>/block/<namespace>/device`: the controller itself, or
for a native multipath head the subsystem, whose `nvme<N>` links are its controllers.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from trainmon.collectors.base import Collection, NodeResources
from trainmon.errors import CollectorError, NoData
from trainmon.families import Metric, counter, gauge, info
from trainmon.parsers.diskstats import DiskStats, parse_diskstats, whole_namespaces
from trainmon.parsers.nvme import controller_number, namespace_of
from trainmon.roots import DISKSTATS_BYTES, Root, Unavailable, list_directory, read_attribute, read_name
from trainmon.settings import Settings

SECTOR_BYTES = 512  # diskstats sectors are 512 B whatever the device's block size
MS = 1e-3  # diskstats times are milliseconds

# diskstats field -> (metric suffix, help, scale); a field the kernel did not print is skipped.
COUNTERS: dict[str, tuple[str, str, float]] = {
    "reads_completed": ("reads_completed_total", "Reads completed.", 1),
    "reads_merged": ("reads_merged_total", "Adjacent reads merged.", 1),
    "read_sectors": ("read_bytes_total", "Bytes read.", SECTOR_BYTES),
    "read_time_ms": ("read_time_seconds_total", "Time spent on reads.", MS),
    "writes_completed": ("writes_completed_total", "Writes completed.", 1),
    "writes_merged": ("writes_merged_total", "Adjacent writes merged.", 1),
    "write_sectors": ("written_bytes_total", "Bytes written.", SECTOR_BYTES),
    "write_time_ms": ("write_time_seconds_total", "Time spent on writes.", MS),
    "io_time_ms": ("io_time_seconds_total", "Time the device had I/O in flight.", MS),
    "io_weighted_time_ms": ("io_time_weighted_seconds_total",
                            "Time spent on I/O weighted by the number in flight (queue depth x time).", MS),
    "discards_completed": ("discards_completed_total", "Discards completed (kernel 4.18+).", 1),
    "discards_merged": ("discards_merged_total", "Adjacent discards merged (kernel 4.18+).", 1),
    "discard_sectors": ("discarded_bytes_total", "Bytes discarded (kernel 4.18+).", SECTOR_BYTES),
    "discard_time_ms": ("discard_time_seconds_total", "Time spent on discards (kernel 4.18+).", MS),
    "flushes_completed": ("flush_requests_total", "Flush requests completed (kernel 5.5+).", 1),
    "flush_time_ms": ("flush_requests_time_seconds_total", "Time spent on flushes (kernel 5.5+).", MS),
}
INFO_ATTRS = {"model": "model", "serial": "serial", "firmware": "firmware_rev"}


@dataclass(frozen=True, slots=True)
class NvmeIdentity:
    device: str
    controller: str
    model: str
    serial: str
    firmware: str


class NvmeCollector:
    name = "nvme"

    def __init__(self, settings: Settings, resources: NodeResources) -> None:
        self._proc = Root(settings.procfs, "procfs")
        self._sys = Root(settings.sysfs, "sysfs")
        self._include = settings.nvme_devices

    def collect(self) -> Collection:
        self._proc.require()
        self._sys.require()
        path = self._proc.join("diskstats")
        text = read_attribute(path, DISKSTATS_BYTES)
        if isinstance(text, Unavailable):
            if text.missing:
                raise NoData(f"no diskstats under {self._proc.path}")
            raise CollectorError(f"{path}: {text.why}")
        parsed = parse_diskstats(text)
        skipped = list(parsed.skipped)
        stats = [s for s in whole_namespaces(parsed.records) if self._included(s.device)]
        identities = self._identities([s.device for s in stats], skipped)
        if not stats:
            raise NoData("no NVMe namespaces in diskstats")
        families = [*counter_families(stats), info_family(identities.values())]
        found = [self._describe(s, identities.get(s.device)) for s in stats]
        return Collection(families=tuple(families), found=tuple(found), skipped=tuple(skipped))

    def close(self) -> None:
        pass

    def _included(self, device: str) -> bool:
        return self._include is None or self._include.search(device) is not None

    def _identities(self, namespaces: list[str], skipped: list[str]) -> dict[str, NvmeIdentity]:
        """Namespace -> identity of the controller it belongs to (the lowest-numbered, for multipath)."""
        class_dir = self._sys.join("class", "nvme")
        listed = list_directory(class_dir)
        controllers = _controllers([] if isinstance(listed, Unavailable) else listed)
        owner: dict[str, str] = {}
        for name in controllers:
            entries = list_directory(class_dir / name)
            for entry in [] if isinstance(entries, Unavailable) else entries:
                namespace = namespace_of(entry)
                if namespace is not None:
                    owner.setdefault(namespace, name)
        identities: dict[str, NvmeIdentity] = {}
        attrs_of: dict[str, dict[str, str]] = {}  # each controller's files are read once, and only if used
        for namespace in namespaces:
            controller = owner.get(namespace) or self._controller_of_block_device(namespace, set(controllers))
            if controller is None:
                continue
            if controller not in attrs_of:
                attrs_of[controller] = self._controller_attrs(class_dir / controller, controller, skipped)
            identities[namespace] = NvmeIdentity(device=namespace, controller=controller, **attrs_of[controller])
        return identities

    def _controller_of_block_device(self, namespace: str, controllers: set[str]) -> str | None:
        """The controller behind `<sysfs>/block/<namespace>/device`: it, or the subsystem's first controller."""
        device = os.path.realpath(self._sys.join("block", namespace, "device"))
        name = os.path.basename(device)
        if name in controllers:
            return name
        links = list_directory(device)  # a multipath head's parent is its subsystem, nvme-subsys<N>
        if isinstance(links, Unavailable):
            return None
        return next((c for c in _controllers(links) if c in controllers), None)

    @staticmethod
    def _controller_attrs(path: Path, controller: str, skipped: list[str]) -> dict[str, str]:
        attrs = {}
        for label, attr in INFO_ATTRS.items():
            value = read_name(path / attr)
            if isinstance(value, Unavailable):
                skipped.append(f"{controller}/{attr}: {value.why}")
                value = ""
            attrs[label] = value
        return attrs

    @staticmethod
    def _describe(stats: DiskStats, identity: NvmeIdentity | None) -> str:
        where = f"{identity.controller} {identity.model}" if identity else "no sysfs identity"
        return f"{stats.device}: {where}, {stats.read_sectors * SECTOR_BYTES} B read, " \
               f"{stats.write_sectors * SECTOR_BYTES} B written"


def _controllers(entries: Iterable[str]) -> list[str]:
    """The controller names among `entries`, lowest number first (nvme2 before nvme10)."""
    numbered = [(n, e) for e in entries if (n := controller_number(e)) is not None]
    return [e for _, e in sorted(numbered)]


def counter_families(stats: list[DiskStats]) -> list[Metric]:
    families: list[Metric] = []
    for field_name, (suffix, documentation, scale) in COUNTERS.items():
        family = counter(f"nvme_{suffix}", f"{documentation} From diskstats.", ["device"])
        for record in stats:
            value = getattr(record, field_name)
            if value is not None:
                family.add_metric([record.device], value * scale)
        families.append(family)
    in_progress = gauge("nvme_io_in_progress", "I/Os in flight now. From diskstats.", ["device"])
    for record in stats:
        in_progress.add_metric([record.device], record.io_in_progress)
    families.append(in_progress)
    return families


def info_family(identities: Iterable[NvmeIdentity]) -> Metric:
    family = info("nvme", "NVMe namespace identity, from sysfs class/nvme. Join on device.",
                  ["device", "controller", "model", "serial", "firmware"])
    for identity in identities:
        family.add_metric([identity.device, identity.controller, identity.model, identity.serial,
                           identity.firmware], {})
    return family
