"""NVMe namespaces: I/O counters from <procfs>/diskstats, identity from <sysfs>/class/nvme.

Values equal node_exporter's `node_disk_*` for the same device and the same procfs.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from dataclasses import dataclass

from trainmon.collectors.base import Collection
from trainmon.errors import NoData
from trainmon.families import Metric, counter, gauge, info
from trainmon.parsers.diskstats import DiskStats, parse_diskstats, whole_namespaces
from trainmon.parsers.nvme import namespace_of
from trainmon.roots import UNAVAILABLE, Root, read_attr, read_text
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

    def __init__(self, settings: Settings) -> None:
        self._proc = Root(settings.procfs)
        self._sys = Root(settings.sysfs)
        self._include = settings.nvme_devices

    def collect(self) -> Collection:
        try:
            text = read_text(self._proc.join("diskstats"))
        except FileNotFoundError as exc:
            raise NoData(f"no diskstats under {self._proc.path}") from exc
        stats = [s for s in whole_namespaces(parse_diskstats(text)) if self._included(s.device)]
        skipped: list[str] = []
        identities = self._identities(skipped)
        if not stats and not identities:
            raise NoData("no NVMe namespaces in diskstats")
        families = [*counter_families(stats), info_family(identities.values(), {s.device for s in stats})]
        found = [self._describe(s, identities.get(s.device)) for s in stats]
        return Collection(families=tuple(families), found=tuple(found), skipped=tuple(skipped))

    def close(self) -> None:
        pass

    def _included(self, device: str) -> bool:
        return self._include is None or self._include.search(device) is not None

    def _identities(self, skipped: list[str]) -> dict[str, NvmeIdentity]:
        """Namespace -> identity of the controller it belongs to (the first one, for multipath)."""
        class_dir = self._sys.join("class", "nvme")
        try:
            controllers = sorted(os.listdir(class_dir))
        except OSError as exc:
            if exc.errno not in UNAVAILABLE:
                raise
            return {}
        identities: dict[str, NvmeIdentity] = {}
        for controller in controllers:
            attrs = {}
            for label, attr in INFO_ATTRS.items():
                try:
                    attrs[label] = read_attr(class_dir / controller / attr)
                except OSError as exc:
                    if exc.errno not in UNAVAILABLE:
                        raise
                    skipped.append(f"{controller}/{attr}: {errno.errorcode.get(exc.errno or 0, exc)}")
                    attrs[label] = ""
            try:
                entries = sorted(os.listdir(class_dir / controller))
            except OSError:
                entries = []
            for entry in entries:
                namespace = namespace_of(entry)
                if namespace and self._included(namespace):
                    identities.setdefault(namespace, NvmeIdentity(device=namespace, controller=controller, **attrs))
        return identities

    @staticmethod
    def _describe(stats: DiskStats, identity: NvmeIdentity | None) -> str:
        where = f"{identity.controller} {identity.model}" if identity else "no sysfs identity"
        return f"{stats.device}: {where}, {stats.read_sectors * SECTOR_BYTES} B read, " \
               f"{stats.write_sectors * SECTOR_BYTES} B written"


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


def info_family(identities: Iterable[NvmeIdentity], present: set[str]) -> Metric:
    family = info("nvme", "NVMe namespace identity, from sysfs class/nvme. Join on device.",
                  ["device", "controller", "model", "serial", "firmware"])
    for identity in identities:
        if identity.device in present:
            family.add_metric([identity.device, identity.controller, identity.model, identity.serial,
                               identity.firmware], {})
    return family
