"""NFS mounts' counters from <procfs>/self/mountstats; the values node_exporter's mountstats collector serves.

Bytes are what applications read and wrote, page-cache (`normal`) and direct I/O together; RPCs,
their execute time and major timeouts are summed over every operation; `operations` maps the
kernel's per-op names (NFSv3 and v4) onto the fixed set in `NFS_OPERATIONS`.
"""

from __future__ import annotations

from trainmon.fsclients import ClientReading, FsCounters
from trainmon.parsers.mountstats import NfsMountStats

MS = 1e-3
# kernel per-op name -> trainmon op; several v3/v4 names fold into one.
NFS_OPERATIONS: dict[str, str] = {
    "READ": "read", "WRITE": "write", "OPEN": "open", "OPEN_NOATTR": "open", "CLOSE": "close",
    "GETATTR": "getattr", "SETATTR": "setattr", "LOOKUP": "lookup", "LOOKUP_ROOT": "lookup",
    "ACCESS": "access", "READDIR": "readdir", "READDIRPLUS": "readdir", "FSSTAT": "statfs", "STATFS": "statfs",
    "CREATE": "create", "REMOVE": "unlink",
}


def nfs_counters(stats: NfsMountStats) -> FsCounters:
    operations = dict.fromkeys(NFS_OPERATIONS.values(), 0)
    for name, op in stats.operations.items():
        if name in NFS_OPERATIONS:
            operations[NFS_OPERATIONS[name]] += op.requests
    every = stats.operations.values()
    return FsCounters(
        read_bytes=stats.bytes.normal_read + stats.bytes.direct_read,
        written_bytes=stats.bytes.normal_write + stats.bytes.direct_write,
        operations=operations,
        rpcs=sum(op.requests for op in every),
        rpc_seconds=sum(op.execute_ms for op in every) * MS,
        rpc_timeouts=sum(op.major_timeouts for op in every),
    )


def nfs_reading(mount_point: str, stats: NfsMountStats | str) -> ClientReading:
    """A mount's reading, or its note when `stats` says why it has none."""
    if isinstance(stats, str):
        return ClientReading(None, (f"{mount_point}: {stats}",))
    counters = nfs_counters(stats)
    return ClientReading(counters, found=f"{counters.rpcs} RPCs, {counters.rpc_timeouts} major timeouts")
