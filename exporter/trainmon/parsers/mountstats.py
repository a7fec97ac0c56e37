"""<procfs>/self/mountstats: the NFS client's own counters per mount (the kernel's nfs_show_stats).

An NFS mount's block starts `device SRC mounted on POINT with fstype nfs4 statvers=1.1` and holds
`bytes:` (normal read/write, direct read/write, server read/write, pages), `events:` and, after
`per-op statistics`, one line per operation: requests, transmissions, major timeouts, bytes sent,
bytes received, then cumulative queue, RTT and execute milliseconds (kernel 5.x adds errors).
Counters are unsigned 64-bit; a kernel bug can print a queue time just under 2^64, which is kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_COUNTER = (1 << 64) - 1
NFS_FSTYPES = frozenset({"nfs", "nfs4"})
BYTES_FIELDS = 8
OP_FIELDS = 8  # 9 with errors (kernel 5.x); the first 8 are the same
_DEVICE = re.compile(r"device (?P<source>\S+) mounted on (?P<point>.+) with fstype (?P<fstype>\S+)(?: (?P<rest>.*))?")
_NUMBERS = re.compile(r"[0-9]+(?: [0-9]+)*")
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")  # the kernel's seq_escape, as in mountinfo


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


def unescape(field: str) -> str:
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountstats(text: str) -> MountStats:
    records: dict[str, NfsMountStats] = {}
    skipped: dict[str, str] = {}
    for header, body in _nfs_blocks(text.splitlines()):
        record = _record(header, body)
        point = unescape(header.group("point"))
        if isinstance(record, str):
            skipped[point] = f"self/mountstats: {record}"
            records.pop(point, None)
        else:
            records[point] = record
            skipped.pop(point, None)
    return MountStats(records, skipped)


def _nfs_blocks(lines: list[str]) -> list[tuple[re.Match[str], list[str]]]:
    blocks: list[tuple[re.Match[str], list[str]]] = []
    current: list[str] | None = None
    for line in lines:
        header = _DEVICE.fullmatch(line.strip()) if line.startswith("device ") else None
        if header is not None:
            current = [] if header.group("fstype") in NFS_FSTYPES else None
            if current is not None:
                blocks.append((header, current))
        elif current is not None and line.strip():
            current.append(line.strip())
    return blocks


def _numbers(text: str) -> list[int] | None:
    text = text.strip()
    if not _NUMBERS.fullmatch(text):
        return None
    values = [int(v) for v in text.split()]  # digits only: int() cannot be slow or negative here
    return values if max(values) <= MAX_COUNTER else None


def _record(header: re.Match[str], body: list[str]) -> NfsMountStats | str:
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
    return NfsMountStats(
        mount_point=unescape(header.group("point")), source=unescape(header.group("source")),
        fstype=header.group("fstype"),
        bytes=NfsBytes(*counts[:6]), operations=operations)
