"""Lustre client files (lprocfs): `llite.*.stats`, `osc.*.stats`, `osc.*.import` and `osc.*.rpc_stats`.

A stats file is `snapshot_time ...` then `{name} {count} samples [{unit}] {min} {max} {sum} [{sumsq}]`
per counter (a counter with unit `[regs]` or `[reqs]` may print only its count); newer releases add
`start_time` and `elapsed_time` lines. An import file is YAML-like; its `rpcs:` section holds
`inflight`, `unregistering`, `timeouts` and `avg_waittime`. An rpc_stats file is
`snapshot_time:` then `read RPCs in flight:`, `write RPCs in flight:` and the pending pages, then
histograms (pages per RPC, RPCs in flight, offset). Instance names end in the client's
superblock address: `lustrefs-ffff88105db50000` (llite) and `lustrefs-OST0000-osc-ffff88105db50000` (OSC).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from trainmon.parsers.counters import u64

_HEADER_LINES = frozenset({"snapshot_time", "start_time", "elapsed_time"})
_COUNTER_FIELDS = frozenset({4, 7, 8})  # name count samples [unit], then min max sum, then sumsq
_SUM = 6
_IN_FLIGHT = ("read RPCs in flight", "write RPCs in flight")
_LLITE = re.compile(r"(?P<fsname>[\w.]+)-(?P<instance>[0-9a-f]{8,16})")
_OSC = re.compile(r"(?P<fsname>[\w.]+)-OST[0-9a-f]{4,}-osc-(?P<instance>[0-9a-f]{8,16})")


class StatsCounter(NamedTuple):  # a tuple: quicker to build than a frozen dataclass, ~10 per file
    samples: int  # the count of events
    unit: str
    sum: int | None  # None where only the count is printed


@dataclass(frozen=True, slots=True)
class ImportRpcs:
    inflight: int | None  # None where the import file does not print it
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
        count, total = u64(fields[1]), u64(fields[6]) if len(fields) > _SUM else None
        if count is None or (total is None and len(fields) > _SUM):
            return f"line {line.strip()[:60]!r} holds a value over 64 bits"
        counters[fields[0]] = StatsCounter(count, fields[3][1:-1], total)
    return counters


def parse_import(text: str) -> ImportRpcs | str:
    """The `rpcs:` section's timeout and (where printed) in-flight counts, or why there are none.

    String methods, not a regular expression: 21 of these files per cycle on a 3-mount client.
    """
    body = _section(text, "rpcs")
    if body is None:
        return "no rpcs: section"
    values: dict[str, int] = {}
    for line in body:
        key, _, value = line.partition(":")
        number = u64(value.split()[0]) if value.split() else None  # `6054 usec`
        if number is not None:
            values[key.strip()] = number
    if "timeouts" not in values:
        return "rpcs: section without timeouts"
    return ImportRpcs(inflight=values.get("inflight"), timeouts=values["timeouts"])


def _section(text: str, name: str) -> list[str] | None:
    """The lines of the YAML-like section `name:` (those indented deeper than its header), None if it has none."""
    header = f"{name}:\n"
    start = text.find(header)
    while start >= 0:
        line_start = text.rfind("\n", 0, start) + 1
        if not text[line_start:start].strip(" "):  # indentation only: `rpcs:`, not `max_rpcs:`
            indent = start - line_start
            body = []
            for line in text[start + len(header):].splitlines():
                if len(line) - len(line.lstrip(" ")) <= indent:
                    break
                body.append(line)
            return body
        start = text.find(header, start + 1)
    return None


def parse_rpc_stats(text: str) -> int | str:
    """The RPCs in flight now (read + write) from an rpc_stats header, or why the text has none."""
    if not text.startswith("snapshot_time:"):
        return "no snapshot_time: line"
    header = {key: value.strip() for key, _, value in
              (line.partition(":") for line in text.split("\n\n", 1)[0].splitlines())}
    counts = [u64(header.get(name, "")) for name in _IN_FLIGHT]
    read, write = counts
    if read is None or write is None:
        return "no `read RPCs in flight:` and `write RPCs in flight:` counts"
    return read + write


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
