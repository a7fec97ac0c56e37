"""<procfs>/self/mountstats: the NFS client's own counters per mount (the kernel's nfs_show_stats).

An NFS mount's block starts `device SRC mounted on POINT with fstype nfs4 statvers=1.1` and holds
`bytes:` (normal read/write, direct read/write, server read/write, pages), `events:` and, after
`per-op statistics`, one line per operation: requests, transmissions, major timeouts, bytes sent,
bytes received, then cumulative queue, RTT and execute milliseconds (kernel 5.x adds errors).
Counters are unsigned 64-bit; a kernel bug can print a queue time just under 2^64, which is kept.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from functools import lru_cache

from trainmon.parsers.counters import MAX_COUNTER, MAX_COUNTER_DIGITS
from trainmon.parsers.mountinfo import unescape  # the kernel's seq_escape, as in mountinfo

NFS_FSTYPES = frozenset({"nfs", "nfs4"})
BYTES_FIELDS = 8
OP_FIELDS = 8  # 9 with errors (kernel 5.x); the first 8 are the same
CACHED_BLOCKS = 1024  # at least the fs collector's MAX_MOUNTS
# The kernel escapes space, tab, newline and backslash in the source and mount point, nothing else: a
# point may hold U+2028, NEL, VT or FF, so lines are split on "\n" only and fields on " " only.
_DEVICE = re.compile(r"device (?P<source>[^ ]+) mounted on (?P<point>.+) with fstype (?P<fstype>[^ ]+)"
                     r"(?: (?P<rest>.*))?")
_BLANK = " \t"
# A line of counters, each checked in one C pass (~70 lines per NFSv4 mount, up to a thousand mounts).
_NUMBERS = re.compile(f"[0-9]{{1,{MAX_COUNTER_DIGITS}}}(?: [0-9]{{1,{MAX_COUNTER_DIGITS}}})*")


@dataclass(frozen=True, slots=True)
class NfsBytes:
    normal_read: int
    normal_write: int
    direct_read: int
    direct_write: int
    server_read: int
    server_write: int


@dataclass(frozen=True, slots=True)
class NfsOperation:
    requests: int
    transmissions: int
    major_timeouts: int
    bytes_sent: int
    bytes_received: int
    queue_ms: int
    rtt_ms: int
    execute_ms: int


@dataclass(frozen=True, slots=True)
class NfsMountStats:
    mount_point: str
    source: str
    fstype: str
    bytes: NfsBytes
    operations: dict[str, NfsOperation]  # upper-case, as the kernel names them: READ, GETATTR, ...


@dataclass(frozen=True, slots=True)
class MountStats:
    """The NFS mounts that parsed, by mount point (the last listed wins), and why each other one did not."""

    records: dict[str, NfsMountStats]
    skipped: dict[str, str]


def parse_mountstats(text: str, wanted: Collection[str] | None = None) -> MountStats:
    """The NFS mounts of `text`; only those whose mount point is in `wanted` where it is given (the others'
    blocks are skipped unparsed: a container host can list thousands)."""
    records: dict[str, NfsMountStats] = {}
    skipped: dict[str, str] = {}
    for header, body in _nfs_blocks(text):
        if wanted is not None and header.point not in wanted:
            continue
        record = _block_record(header, body)
        if isinstance(record, str):
            skipped[header.point] = f"self/mountstats: {record}"
            records.pop(header.point, None)
        else:
            records[header.point] = record
            skipped.pop(header.point, None)
    return MountStats(records, skipped)


@dataclass(frozen=True, slots=True)
class _Header:
    point: str
    source: str
    fstype: str


def _nfs_blocks(text: str) -> Iterator[tuple[_Header, str]]:
    """Each NFS block's header and body; a block starts at each line that starts `device `."""
    for block in ("\n" + text).split("\ndevice ")[1:]:
        first, _, body = block.partition("\n")
        header = _DEVICE.fullmatch("device " + first.rstrip(_BLANK))
        if header is not None and header.group("fstype") in NFS_FSTYPES:
            yield _Header(unescape(header.group("point")), unescape(header.group("source")),
                          header.group("fstype")), body


@lru_cache(maxsize=CACHED_BLOCKS)  # an idle mount's block reads the same every cycle: parsed once
def _block_record(header: _Header, body: str) -> NfsMountStats | str:
    return _record(header, [line.strip(_BLANK) for line in body.split("\n") if line.strip(_BLANK)])


def _numbers(text: str) -> list[int] | None:
    text = text.strip(_BLANK)
    if not _NUMBERS.fullmatch(text):
        return None
    values = list(map(int, text.split(" ")))  # ASCII digits, at most 20 each: int() cannot raise or be slow
    return values if max(values) <= MAX_COUNTER else None


def _record(header: _Header, body: list[str]) -> NfsMountStats | str:
    bytes_line = next((line[len("bytes:"):] for line in body if line.startswith("bytes:")), None)
    if bytes_line is None:
        return "no bytes: line (truncated?)"
    counts = _numbers(bytes_line)
    if counts is None or len(counts) < BYTES_FIELDS:
        return f"bytes: line {bytes_line.strip()[:60]!r} is not {BYTES_FIELDS} unsigned 64-bit counters"
    if "per-op statistics" not in body:
        return "no per-op statistics (truncated?)"
    operations: dict[str, NfsOperation] = {}
    for line in body[body.index("per-op statistics") + 1:]:
        name, colon, rest = line.partition(":")
        values = _numbers(rest) if colon else None
        if values is None or len(values) < OP_FIELDS or not name.replace("_", "").isalnum():
            return f"per-op line {line[:60]!r} is not a name and {OP_FIELDS} unsigned 64-bit counters"
        operations[name] = NfsOperation(*values[:OP_FIELDS])
    return NfsMountStats(mount_point=header.point, source=header.source, fstype=header.fstype,
                         bytes=NfsBytes(*counts[:6]), operations=operations)
