"""NVMe namespaces: I/O counters from <procfs>/diskstats, identity from <sysfs>/class/nvme.

Values equal node_exporter's `node_disk_*` for the same device and the same procfs; how a namespace
finds its controller is `trainmon.sysfs.nvme`'s business.
"""

from __future__ import annotations

from collections.abc import Iterable

from trainmon.catalog import Family
from trainmon.catalog import nvme as catalog
from trainmon.collectors.base import Collection, NodeResources
from trainmon.errors import CollectorError, NoData
from trainmon.families import Metric, counter, gauge, info
from trainmon.parsers.diskstats import DiskStats, parse_diskstats, whole_namespaces
from trainmon.roots import DISKSTATS_BYTES, Root, Unavailable, read_attribute
from trainmon.settings import Settings
from trainmon.sysfs.nvme import NvmeNamespace, nvme_namespaces

SECTOR_BYTES = 512  # diskstats sectors are 512 B whatever the device's block size
MS = 1e-3  # diskstats times are milliseconds

# diskstats field -> (family, scale); a field the kernel did not print is skipped.
COUNTERS: dict[str, tuple[Family, float]] = {
    "reads_completed": (catalog.NVME_READS_COMPLETED_TOTAL, 1),
    "reads_merged": (catalog.NVME_READS_MERGED_TOTAL, 1),
    "read_sectors": (catalog.NVME_READ_BYTES_TOTAL, SECTOR_BYTES),
    "read_time_ms": (catalog.NVME_READ_TIME_SECONDS_TOTAL, MS),
    "writes_completed": (catalog.NVME_WRITES_COMPLETED_TOTAL, 1),
    "writes_merged": (catalog.NVME_WRITES_MERGED_TOTAL, 1),
    "write_sectors": (catalog.NVME_WRITTEN_BYTES_TOTAL, SECTOR_BYTES),
    "write_time_ms": (catalog.NVME_WRITE_TIME_SECONDS_TOTAL, MS),
    "io_time_ms": (catalog.NVME_IO_TIME_SECONDS_TOTAL, MS),
    "io_weighted_time_ms": (catalog.NVME_IO_TIME_WEIGHTED_SECONDS_TOTAL, MS),
    "discards_completed": (catalog.NVME_DISCARDS_COMPLETED_TOTAL, 1),
    "discards_merged": (catalog.NVME_DISCARDS_MERGED_TOTAL, 1),
    "discard_sectors": (catalog.NVME_DISCARDED_BYTES_TOTAL, SECTOR_BYTES),
    "discard_time_ms": (catalog.NVME_DISCARD_TIME_SECONDS_TOTAL, MS),
    "flushes_completed": (catalog.NVME_FLUSH_REQUESTS_TOTAL, 1),
    "flush_time_ms": (catalog.NVME_FLUSH_REQUESTS_TIME_SECONDS_TOTAL, MS),
}


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
        stats = [s for s in whole_namespaces(parsed.records) if self._included(s.device)]
        if not stats:
            raise NoData("no NVMe namespaces in diskstats")
        namespaces = nvme_namespaces(self._sys, [s.device for s in stats])
        controllers = dict.fromkeys(n.controller for n in namespaces)  # each once, in the order first used
        skipped = [*parsed.skipped, *(s for c in controllers for s in c.skipped)]
        families = [*counter_families(stats), info_family(namespaces)]
        identities = {n.device: n for n in namespaces}
        found = [self._describe(s, identities.get(s.device)) for s in stats]
        return Collection(families=tuple(families), found=tuple(found), skipped=tuple(skipped))

    def close(self) -> None:
        pass

    def _included(self, device: str) -> bool:
        return self._include is None or self._include.search(device) is not None

    @staticmethod
    def _describe(stats: DiskStats, namespace: NvmeNamespace | None) -> str:
        where = f"{namespace.controller.name} {namespace.controller.model or ''}" if namespace else "no sysfs identity"
        return f"{stats.device}: {where}, {stats.read_sectors * SECTOR_BYTES} B read, " \
               f"{stats.write_sectors * SECTOR_BYTES} B written"


def counter_families(stats: list[DiskStats]) -> list[Metric]:
    families: list[Metric] = []
    for field_name, (declared, scale) in COUNTERS.items():
        family = counter(declared)
        for record in stats:
            value = getattr(record, field_name)
            if value is not None:
                family.add_metric([record.device], value * scale)
        families.append(family)
    in_progress = gauge(catalog.NVME_IO_IN_PROGRESS)
    for record in stats:
        in_progress.add_metric([record.device], record.io_in_progress)
    families.append(in_progress)
    return families


def info_family(namespaces: Iterable[NvmeNamespace]) -> Metric:
    family = info(catalog.NVME_INFO)
    for namespace in namespaces:
        controller = namespace.controller
        family.add_metric([namespace.device, controller.name, controller.model or "", controller.serial or "",
                           controller.firmware or ""], {})
    return family
