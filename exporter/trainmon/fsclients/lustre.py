"""Lustre client counters per mount, from either layout of the client's lprocfs files.

Lustre ≤ 2.10 keeps them under `<procfs>/fs/lustre/`; 2.12+ moved the simple ones to
`<sysfs>/fs/lustre/` and the stats files to debugfs, `<sysfs>/kernel/debug/lustre/` (readable by
root only: a DaemonSet needs root or CAP_SYS_ADMIN for llite and OSC stats). Like `lctl get_param`,
each file is looked up in the three places in turn, so either layout, or a mix, is read.

A mount is found through its llite instance (`<fsname>-<superblock>`, the fsname from the mount
source); its OSCs are those ending in the same superblock. Files read per mount: `llite/*/stats`
(bytes and operations), and per OSC `stats` (`req_waittime`: RPC count and time) and `import`
(RPCs in flight, timeouts); an OSC whose `import` gives no in-flight count (unreadable, garbage, or
without the line) has it read from its `rpc_stats` header instead (read + write RPCs in flight). A
file that is unreadable or garbage drops the values it feeds for that mount (a sum over OSCs with
one missing would look like a counter reset) and is noted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TypeVar

from trainmon.fsclients import ClientReading, FsCounters
from trainmon.parsers.lustre import (
    ImportRpcs,
    StatsCounter,
    fsname_of_source,
    llite_instance,
    osc_instance,
    parse_import,
    parse_rpc_stats,
    parse_stats,
)
from trainmon.roots import Root, Unavailable, list_directory, read_attribute

T = TypeVar("T")
FILE_BYTES = 64 << 10  # an llite stats file is ~3 KB; bound a garbage one
US = 1e-6
# llite counter -> trainmon op; read_bytes/write_bytes count the reads and writes.
LUSTRE_OPERATIONS: dict[str, str] = {
    "read_bytes": "read", "write_bytes": "write", "open": "open", "close": "close", "getattr": "getattr",
    "setattr": "setattr", "readdir": "readdir", "statfs": "statfs", "create": "create", "unlink": "unlink",
    "rename": "rename", "fsync": "fsync",
}
DEBUGFS_HINT = "needs root or CAP_SYS_ADMIN (debugfs)"


@dataclass(frozen=True, slots=True)
class LustreTree:
    """The places a Lustre client's files may be, in `lctl get_param`'s order."""

    bases: tuple[str, ...]

    @classmethod
    def under(cls, proc: Root, sys: Root) -> LustreTree:
        return cls((str(proc.join("fs", "lustre")), str(sys.join("fs", "lustre")),
                    str(sys.join("kernel", "debug", "lustre"))))

    def instances(self, kind: str) -> tuple[str, ...]:
        names: set[str] = set()
        for base in self.bases:
            listed = list_directory(f"{base}/{kind}")
            names.update([] if isinstance(listed, Unavailable) else listed)
        return tuple(sorted(names))

    def read(self, kind: str, instance: str, name: str) -> str | Unavailable:
        """The file from the first place that has it; an unreadable one is not looked past (it is there)."""
        found: str | Unavailable = Unavailable("ENOENT")
        for base in self.bases:
            found = read_attribute(f"{base}/{kind}/{instance}/{name}", FILE_BYTES)
            if not (isinstance(found, Unavailable) and found.missing):
                return found
        return found


@dataclass(frozen=True, slots=True)
class LustreInstances:
    """The client's llite instances by fsname and OSC instances by (fsname, superblock), as listed."""

    llites: Mapping[str, tuple[str, ...]]
    oscs: Mapping[tuple[str, str], tuple[str, ...]]


@lru_cache(maxsize=1)  # the listing changes only when a file system is mounted or an OST is added
def lustre_instances(llites: tuple[str, ...], oscs: tuple[str, ...]) -> LustreInstances:
    """`llites` and `oscs` grouped by the names' parts; names of another shape are left out."""
    by_fsname: dict[str, tuple[str, ...]] = {}
    for name in llites:
        if (parsed := llite_instance(name)) is not None:
            by_fsname[parsed[0]] = (*by_fsname.get(parsed[0], ()), name)
    by_client: dict[tuple[str, str], tuple[str, ...]] = {}
    for name in oscs:
        if (parsed := osc_instance(name)) is not None:
            by_client[parsed] = (*by_client.get(parsed, ()), name)
    return LustreInstances(by_fsname, by_client)


@dataclass
class _Notes:
    """Reads one parsed file at a time, noting each that is unavailable or garbage."""

    tree: LustreTree
    mount_point: str
    skipped: list[str]

    def parsed(self, kind: str, instance: str, name: str, parse: Callable[[str], T | str]) -> T | None:
        text = self.tree.read(kind, instance, name)
        if isinstance(text, Unavailable):
            hint = f" ({DEBUGFS_HINT})" if text.why in {"EACCES", "EPERM"} else ""
            self.skipped.append(f"{self.mount_point}: {kind}/{instance}/{name}: {text.why}{hint}")
            return None
        value = parse(text)
        if isinstance(value, str):
            self.skipped.append(f"{self.mount_point}: {kind}/{instance}/{name}: {value}")
            return None
        return value


def lustre_reading(tree: LustreTree, mount_point: str, source: str, instances: LustreInstances) -> ClientReading:
    """The counters of the Lustre mount at `mount_point`; `instances` are those listed this cycle."""
    fsname = fsname_of_source(source)
    mine = instances.llites.get(fsname or "", ())
    if len(mine) != 1:
        why = "no llite instance" if not mine else f"{len(mine)} llite instances ({', '.join(mine)}), cannot tell which"
        return ClientReading(None, (f"{mount_point}: {why} of file system {fsname!r}",))
    (llite,) = mine
    superblock = llite_instance(llite)[1]  # type: ignore[index]  # grouped by it
    my_oscs = instances.oscs.get((fsname or "", superblock), ())
    notes = _Notes(tree, mount_point, [])
    llite_stats = notes.parsed("llite", llite, "stats", parse_stats)
    osc_stats = [notes.parsed("osc", osc, "stats", parse_stats) for osc in my_oscs]
    imports = [notes.parsed("osc", osc, "import", parse_import) for osc in my_oscs]
    rpcs, rpc_seconds = _rpc_values(osc_stats)
    in_flight = [_in_flight(notes, osc, rpcs) for osc, rpcs in zip(my_oscs, imports, strict=True)]
    counters = FsCounters(rpcs=rpcs, rpc_seconds=rpc_seconds,
                          rpc_timeouts=_sum_of_all([i.timeouts if i is not None else None for i in imports]),
                          rpcs_in_flight=_sum_of_all(in_flight))
    if llite_stats is not None:
        counters = _with_llite(counters, llite_stats)
    return ClientReading(counters, tuple(notes.skipped), found=f"llite {llite}, {len(my_oscs)} OSCs")


def _in_flight(notes: _Notes, osc: str, rpcs: ImportRpcs | None) -> int | None:
    """From the OSC's import, or else its rpc_stats (read only then: it is the larger file)."""
    if rpcs is not None and rpcs.inflight is not None:
        return rpcs.inflight
    return notes.parsed("osc", osc, "rpc_stats", parse_rpc_stats)


def _with_llite(counters: FsCounters, stats: dict[str, StatsCounter]) -> FsCounters:
    absent = StatsCounter(0, "", 0)  # Lustre prints no line for a counter that has not counted yet
    return replace(counters, read_bytes=stats.get("read_bytes", absent).sum or 0,
                   written_bytes=stats.get("write_bytes", absent).sum or 0,
                   operations={op: stats.get(name, absent).samples for name, op in LUSTRE_OPERATIONS.items()})


def _rpc_values(stats: list[dict[str, StatsCounter] | None]) -> tuple[int | None, float | None]:
    present = [s for s in stats if s is not None]
    if not present or len(present) < len(stats):
        return None, None
    waits = [s.get("req_waittime", StatsCounter(0, "usec", 0)) for s in present]
    return sum(w.samples for w in waits), sum(w.sum or 0 for w in waits) * US


def _sum_of_all(values: list[int | None]) -> int | None:
    """The sum, or None when any value (or every one: no OSC) is missing."""
    present = [v for v in values if v is not None]
    return sum(present) if present and len(present) == len(values) else None
