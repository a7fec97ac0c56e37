"""/proc/diskstats (Documentation/admin-guide/iostats.rst).

Kernels print 14 fields (before 4.18), 18 (discards, 4.18+) or 20 (flushes, 5.5+). Sectors are
512 bytes whatever the device; times are milliseconds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

MIN_FIELDS = 14
# nvme0n1 is a whole namespace; nvme0n1p1 is a partition, nvme0c0n1 a multipath controller path.
WHOLE_NAMESPACE = re.compile(r"nvme\d+n\d+")


@dataclass(frozen=True, slots=True, kw_only=True)
class DiskStats:
    """One line of /proc/diskstats, in kernel units."""

    major: int
    minor: int
    device: str
    reads_completed: int
    reads_merged: int
    read_sectors: int
    read_time_ms: int
    writes_completed: int
    writes_merged: int
    write_sectors: int
    write_time_ms: int
    io_in_progress: int
    io_time_ms: int
    io_weighted_time_ms: int
    discards_completed: int | None = None  # 18+ fields
    discards_merged: int | None = None
    discard_sectors: int | None = None
    discard_time_ms: int | None = None
    flushes_completed: int | None = None  # 20 fields
    flush_time_ms: int | None = None


def parse_diskstats(text: str) -> list[DiskStats]:
    """Parse every well-formed line; a short or non-numeric line is skipped, the rest kept."""
    records = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < MIN_FIELDS:
            continue
        try:
            numbers = [int(f) for f in fields[3:]]
            major, minor = int(fields[0]), int(fields[1])
        except ValueError:
            continue
        discards = numbers[11:15] if len(numbers) >= 15 else [None] * 4
        flushes = numbers[15:17] if len(numbers) >= 17 else [None] * 2
        records.append(DiskStats(
            major=major, minor=minor, device=fields[2],
            reads_completed=numbers[0], reads_merged=numbers[1], read_sectors=numbers[2],
            read_time_ms=numbers[3],
            writes_completed=numbers[4], writes_merged=numbers[5], write_sectors=numbers[6],
            write_time_ms=numbers[7], io_in_progress=numbers[8], io_time_ms=numbers[9],
            io_weighted_time_ms=numbers[10],
            discards_completed=discards[0], discards_merged=discards[1], discard_sectors=discards[2],
            discard_time_ms=discards[3],
            flushes_completed=flushes[0], flush_time_ms=flushes[1],
        ))
    return records


def whole_namespaces(records: Iterable[DiskStats]) -> list[DiskStats]:
    return [r for r in records if WHOLE_NAMESPACE.fullmatch(r.device)]
