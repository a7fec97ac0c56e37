"""Lustre client files (lprocfs): `llite.*.stats`, `osc.*.stats` and `osc.*.import`.

A stats file is `snapshot_time ...` then `{name} {count} samples [{unit}] {min} {max} {sum} [{sumsq}]`
per counter (a counter with unit `[regs]` or `[reqs]` may print only its count); newer releases add
`start_time` and `elapsed_time` lines. An import file is YAML-like; its `rpcs:` section holds
`inflight`, `unregistering`, `timeouts` and `avg_waittime`. Instance names end in the client's
superblock address: `lustrefs-ffff88105db50000` (llite) and `lustrefs-OST0000-osc-ffff88105db50000` (OSC).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_COUNTER = (1 << 64) - 1
_HEADER_LINES = frozenset({"snapshot_time", "start_time", "elapsed_time"})
_COUNTER_FIELDS = frozenset({4, 7, 8})  # name count samples [unit], then min max sum, then sumsq
_SUM = 6
_RPCS_SECTION = re.compile(r"^ *rpcs:\n(?P<body>(?: {5,}.*\n?)+)", re.MULTILINE)
_IMPORT_VALUE = re.compile(r"^ *(?P<key>\w+): *(?P<value>[0-9]+)(?: usec)?$", re.MULTILINE)
_LLITE = re.compile(r"(?P<fsname>[\w.]+)-(?P<instance>[0-9a-f]{8,16})")
_OSC = re.compile(r"(?P<fsname>[\w.]+)-OST[0-9a-f]{4,}-osc-(?P<instance>[0-9a-f]{8,16})")


@dataclass(frozen=True, slots=True)
class StatsCounter:
    count: int
    unit: str
    sum: int | None  # None where only the count is printed


@dataclass(frozen=True, slots=True)
class ImportRpcs:
    inflight: int
    timeouts: int


def parse_stats(text: str) -> dict[str, StatsCounter] | str:
    """Counters by name, or why the text is not a Lustre stats file (garbage, or cut in a line).

    String methods, not a regular expression: 24 of these files per cycle on a 3-mount client.
    """
    if not text.startswith("snapshot_time"):
        return "no snapshot_time line"
    counters: dict[str, StatsCounter] = {}
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0] in _HEADER_LINES:
            continue
        digits = fields[1] + "".join(fields[4:]) if len(fields) in _COUNTER_FIELDS else ""
        if not (digits.isdigit() and digits.isascii()) or fields[2] != "samples" \
                or not (fields[3][0] == "[" and fields[3][-1] == "]"):
            return f"line {line.strip()[:60]!r} is not `name count samples [unit] min max sum`"
        count, total = int(fields[1]), int(fields[6]) if len(fields) > _SUM else None
        if max(count, total or 0) > MAX_COUNTER:
            return f"line {line.strip()[:60]!r} holds a value over 64 bits"
        counters[fields[0]] = StatsCounter(count, fields[3][1:-1], total)
    return counters


def parse_import(text: str) -> ImportRpcs | str:
    """The `rpcs:` section's in-flight and timeout counts, or why there are none."""
    section = _RPCS_SECTION.search(text)
    if section is None:
        return "no rpcs: section"
    values = {m.group("key"): int(m.group("value")) for m in _IMPORT_VALUE.finditer(section.group("body"))}
    if "inflight" not in values or "timeouts" not in values:
        return "rpcs: section without inflight and timeouts"
    return ImportRpcs(inflight=values["inflight"], timeouts=values["timeouts"])


def llite_instance(name: str) -> tuple[str, str] | None:
    """`lustrefs-ffff88105db50000` -> (`lustrefs`, `ffff88105db50000`); None for another name."""
    match = _LLITE.fullmatch(name)
    return (match.group("fsname"), match.group("instance")) if match else None


def osc_instance(name: str) -> tuple[str, str] | None:
    """`lustrefs-OST0000-osc-ffff88105db50000` -> (`lustrefs`, `ffff88105db50000`); None for an MDT's OSC."""
    match = _OSC.fullmatch(name)
    return (match.group("fsname"), match.group("instance")) if match else None


def fsname_of_source(source: str) -> str | None:
    """The file-system name of a Lustre mount source: `10.0.0.1@o2ib:10.0.0.2@o2ib:/lustrefs` -> `lustrefs`."""
    _, separator, fsname = source.rpartition(":/")
    return fsname.strip("/") or None if separator else None
