"""/proc/diskstats (Documentation/admin-guide/iostats.rst).

Kernels print 14 fields (before 4.18), 18 (discards, 4.18+) or 20 (flushes, 5.5+). Sectors are
512 bytes whatever the device; times are milliseconds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from trainmon.parsers.counters import MAX_COUNTER, MAX_COUNTER_DIGITS

MIN_FIELDS = 14
# nvme0n1 is a whole namespace; nvme0n1p1 is a partition, nvme0c0n1 a multipath controller path.
WHOLE_NAMESPACE = re.compile(r"nvme\d+n\d+")
MAX_SKIPPED_NOTES = 20
_UNSIGNED = re.compile(r"[0-9]+(?: [0-9]+)*")


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


@dataclass(frozen=True, slots=True)
class Diskstats:
    """The lines that parsed, and one note per non-blank line that did not."""

    records: list[DiskStats]
    skipped: list[str]


def parse_diskstats(text: str) -> Diskstats:
    """Parse every well-formed line; a short, non-numeric, out-of-range or repeated line is skipped.

    A device named twice keeps its first line: two series with one label set cannot both be served.
    """
    records: list[DiskStats] = []
    skipped: list[str] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        record = _record(line.split())
        if isinstance(record, str):
            skipped.append(f"diskstats line {number} {line.strip()[:60]!r}: {record}")
        elif record.device in seen:
            skipped.append(f"diskstats line {number}: {record.device} listed again")
        else:
            seen.add(record.device)
            records.append(record)
    if len(skipped) > MAX_SKIPPED_NOTES:  # a file of garbage must not become megabytes of status
        skipped[MAX_SKIPPED_NOTES - 1:] = [f"{len(skipped) - MAX_SKIPPED_NOTES + 1} more diskstats lines skipped"]
    return Diskstats(records, skipped)


def _record(fields: list[str]) -> DiskStats | str:
    """One line's record, or why it is not one."""
    if len(fields) < MIN_FIELDS:
        return f"{len(fields)} fields, want {MIN_FIELDS} or more"
    numbers = [*fields[:2], *fields[3:]]
    if not _UNSIGNED.fullmatch(" ".join(numbers)):  # int() takes "-1", "+1", "1_0", Arabic-Indic digits
        return "not unsigned integers"
    if max(map(len, numbers)) > MAX_COUNTER_DIGITS:  # before int(): 5,000 digits raise ValueError
        return "a value over 64 bits"
    major, minor, *stats = map(int, numbers)
    if max(stats) > MAX_COUNTER:
        return "a value over 64 bits"
    discards = stats[11:15] if len(stats) >= 15 else [None] * 4
    flushes = stats[15:17] if len(stats) >= 17 else [None] * 2
    return DiskStats(
        major=major, minor=minor, device=fields[2],
        reads_completed=stats[0], reads_merged=stats[1], read_sectors=stats[2], read_time_ms=stats[3],
        writes_completed=stats[4], writes_merged=stats[5], write_sectors=stats[6], write_time_ms=stats[7],
        io_in_progress=stats[8], io_time_ms=stats[9], io_weighted_time_ms=stats[10],
        discards_completed=discards[0], discards_merged=discards[1], discard_sectors=discards[2],
        discard_time_ms=discards[3],
        flushes_completed=flushes[0], flush_time_ms=flushes[1],
    )


def whole_namespaces(records: Iterable[DiskStats]) -> list[DiskStats]:
    return [r for r in records if WHOLE_NAMESPACE.fullmatch(r.device)]
