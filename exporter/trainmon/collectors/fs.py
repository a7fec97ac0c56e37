"""Storage tier 3: network and parallel file-system clients (Lustre, GPFS, NFS), per mount (SPEC §4).

Mounts come from <procfs>/self/mountinfo (only network types, filtered by `--fs-mounts`); each
client's own counters are read the client's way (`trainmon.fsclients`). Only the clients' counter
files are read, never the mount point itself: a hung server must not hang a collection. A file that
cannot be read or parsed drops the series it feeds and is listed in `skipped`; a mount that is gone
from mountinfo is gone from the metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from trainmon.catalog import Family
from trainmon.catalog import fs as catalog
from trainmon.collectors.base import Collection, NodeResources
from trainmon.collectors.problems import ProblemLog
from trainmon.errors import CollectorError, NoData
from trainmon.families import Metric, counter, gauge, info
from trainmon.fsclients import ClientReading, FsCounters
from trainmon.fsclients.gpfs import MmpmonPoller
from trainmon.fsclients.lustre import LustreInstances, LustreTree, lustre_instances, lustre_reading
from trainmon.fsclients.nfs import nfs_reading
from trainmon.parsers.mountinfo import Mount, parse_mountinfo
from trainmon.parsers.mountstats import NFS_FSTYPES, NfsMountStats, parse_mountstats
from trainmon.roots import Root, Unavailable, read_attribute, read_prefix
from trainmon.settings import Settings

log = logging.getLogger(__name__)
MOUNTS_BYTES = 16 << 20  # mountinfo grows with the mounts: ~200 bytes each, tens of thousands on a container host
# mountstats is larger (~5 KB per NFSv4 mount): only its first MOUNTSTATS_BYTES are read, and a mount
# listed after them is noted. 1,000 NFSv4 mounts take about 5 MiB.
MOUNTSTATS_BYTES = 16 << 20
MAX_MOUNTS = 1000  # network mounts served, in mountinfo's order; the others are noted (--fs-mounts picks)
mountinfo_mounts = lru_cache(maxsize=1)(parse_mountinfo)  # mountinfo changes only when something is (un)mounted
NO_LUSTRE = LustreInstances({}, {})

# FsCounters field -> family; all per mount.
COUNTERS: dict[str, Family] = {
    "read_bytes": catalog.FS_READ_BYTES_TOTAL,
    "written_bytes": catalog.FS_WRITTEN_BYTES_TOTAL,
    "rpcs": catalog.FS_RPCS_TOTAL,
    "rpc_seconds": catalog.FS_RPC_SECONDS_TOTAL,
    "rpc_timeouts": catalog.FS_RPC_TIMEOUTS_TOTAL,
}


@dataclass(frozen=True, slots=True)
class MountReading:
    mount: Mount
    reading: ClientReading


class FsCollector:
    name = "fs"

    def __init__(self, settings: Settings, resources: NodeResources) -> None:
        self._proc = Root(settings.procfs, "procfs")
        self._lustre = LustreTree.under(self._proc, Root(settings.sysfs, "sysfs"))
        self._include = settings.fs_mounts
        self._problems = ProblemLog(log, self.name)
        self._first_wait_s = settings.collector_timeout / 2
        self._mmpmon = MmpmonPoller(settings.gpfs_mmpmon, settings.interval) if settings.gpfs_mmpmon else None

    def collect(self) -> Collection:
        self._proc.require()
        mounts, skipped = self._mounts()
        if not mounts:
            raise NoData("no network or parallel file-system mounts in mountinfo")
        readings = self._read(mounts)
        skipped += [note for r in readings for note in r.reading.skipped]
        found = [f"{r.mount.mount_point}: {r.mount.fstype} {r.mount.source}"
                 f"{', ' + r.reading.found if r.reading.found else ''}" for r in readings]
        return Collection(families=tuple(fs_families(readings)), found=tuple(found),
                          skipped=self._problems.update(skipped))

    def close(self) -> None:
        if self._mmpmon is not None:
            self._mmpmon.close()

    def _mounts(self) -> tuple[list[Mount], list[str]]:
        path = self._proc.join("self", "mountinfo")
        text = read_attribute(path, MOUNTS_BYTES)
        if isinstance(text, Unavailable):
            if text.missing:
                raise NoData(f"no self/mountinfo under {self._proc.path}")
            raise CollectorError(f"{path}: {text.why}")
        parsed = mountinfo_mounts(text)
        mounts = [m for m in parsed.records if self._include is None or self._include.search(m.mount_point)]
        skipped = list(parsed.skipped)
        if len(mounts) > MAX_MOUNTS:
            skipped.append(f"{len(mounts) - MAX_MOUNTS} network mounts after the first {MAX_MOUNTS} not served "
                           f"(--fs-mounts selects which)")
        return mounts[:MAX_MOUNTS], skipped

    def _read(self, mounts: Sequence[Mount]) -> list[MountReading]:
        served_nfs = {m.mount_point for m in mounts if m.fstype in NFS_FSTYPES}
        nfs: dict[str, NfsMountStats | str] | str = self._nfs_stats(served_nfs) if served_nfs else {}
        lustre = lustre_instances(self._lustre.instances("llite"), self._lustre.instances("osc")) \
            if any(m.fstype == "lustre" for m in mounts) else NO_LUSTRE
        if self._mmpmon is not None and any(m.fstype == "gpfs" for m in mounts):
            self._mmpmon.wait_first(self._first_wait_s)
        readings = []
        for mount in mounts:
            if mount.fstype in NFS_FSTYPES:
                reading = nfs_reading(mount.mount_point, nfs if isinstance(nfs, str)
                                      else nfs.get(mount.mount_point, "not in self/mountstats"))
            elif mount.fstype == "lustre":
                reading = lustre_reading(self._lustre, mount.mount_point, mount.source, lustre)
            elif mount.fstype == "gpfs" and self._mmpmon is not None:
                reading = self._mmpmon.reading(mount.mount_point, mount.source)
            elif mount.fstype == "gpfs":
                reading = ClientReading(None, found="counters need --gpfs-mmpmon (root)")
            else:
                reading = ClientReading(None, found="no client counters read for this type")
            readings.append(MountReading(mount, reading))
        return readings

    def _nfs_stats(self, served: set[str]) -> dict[str, NfsMountStats | str] | str:
        """Each served NFS mount point's stats or why it has none; or why mountstats as a whole could not be read."""
        read = read_prefix(self._proc.join("self", "mountstats"), MOUNTSTATS_BYTES)
        if isinstance(read, Unavailable):
            return f"self/mountstats: {read.why}"
        text, more = read
        if more:  # the last block read may be cut short: it goes with what follows
            text = text[:max(text.rfind("\ndevice "), 0)]
        parsed = parse_mountstats(text, served)
        stats: dict[str, NfsMountStats | str] = {**parsed.skipped, **parsed.records}
        if more:
            beyond = f"listed after the first {MOUNTSTATS_BYTES:,} bytes of self/mountstats (not read)"
            stats = {point: stats.get(point, beyond) for point in served}
        return stats


def fs_families(readings: Sequence[MountReading]) -> list[Metric]:
    fs_info = info(catalog.FS_INFO)
    for r in readings:
        fs_info.add_metric([r.mount.mount_point, r.mount.fstype, r.mount.source], {})
    measured = [(r.mount.mount_point, r.reading.counters) for r in readings if r.reading.counters is not None]
    families: list[Metric] = [fs_info]
    for field_name, declared in COUNTERS.items():
        family = counter(declared)
        for mount_point, counters in measured:
            value = getattr(counters, field_name)
            if value is not None:
                family.add_metric([mount_point], value)
        families.append(family)
    operations, in_flight = counter(catalog.FS_OPERATIONS_TOTAL), gauge(catalog.FS_RPCS_IN_FLIGHT)
    for mount_point, counters in measured:
        for op, count in counters.operations.items():
            operations.add_metric([mount_point, op], count)
        if counters.rpcs_in_flight is not None:
            in_flight.add_metric([mount_point], counters.rpcs_in_flight)
    return [*families, operations, in_flight]


__all__ = ["FsCollector", "FsCounters", "fs_families"]
