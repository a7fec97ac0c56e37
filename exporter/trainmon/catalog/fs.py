"""The `fs` collector: network file system clients (NFS, Lustre) and local mounts."""

from __future__ import annotations

from trainmon.catalog.family import Family, Kind

FS_INFO = Family(
    "trainmon_fs_info",
    Kind.INFO,
    "Network or parallel file-system mount (from mountinfo; source as it shows it). Join on mount.",
    ("mount", "fstype", "source"),
)
FS_READ_BYTES_TOTAL = Family(
    "trainmon_fs_read_bytes_total",
    Kind.COUNTER,
    "Bytes applications read, direct I/O included.",
    ("mount",),
    unit="bytes",
)
FS_WRITTEN_BYTES_TOTAL = Family(
    "trainmon_fs_written_bytes_total",
    Kind.COUNTER,
    "Bytes applications wrote, direct I/O included.",
    ("mount",),
    unit="bytes",
)
FS_RPCS_TOTAL = Family(
    "trainmon_fs_rpcs_total",
    Kind.COUNTER,
    "Requests the client sent to servers.",
    ("mount",),
)
FS_RPC_SECONDS_TOTAL = Family(
    "trainmon_fs_rpc_seconds_total",
    Kind.COUNTER,
    "Total time of the requests sent to servers.",
    ("mount",),
    unit="seconds",
)
FS_RPC_TIMEOUTS_TOTAL = Family(
    "trainmon_fs_rpc_timeouts_total",
    Kind.COUNTER,
    "Requests to servers that timed out (NFS major timeouts, Lustre OSC import timeouts).",
    ("mount",),
)
FS_OPERATIONS_TOTAL = Family(
    "trainmon_fs_operations_total",
    Kind.COUNTER,
    "Client operations, a fixed set of ops per file-system type.",
    ("mount", "op"),
)
FS_RPCS_IN_FLIGHT = Family(
    "trainmon_fs_rpcs_in_flight",
    Kind.GAUGE,
    "Requests to servers in flight now (Lustre OSC imports).",
    ("mount",),
)

FAMILIES: tuple[Family, ...] = (
    FS_INFO,
    FS_READ_BYTES_TOTAL,
    FS_WRITTEN_BYTES_TOTAL,
    FS_RPCS_TOTAL,
    FS_RPC_SECONDS_TOTAL,
    FS_RPC_TIMEOUTS_TOTAL,
    FS_OPERATIONS_TOTAL,
    FS_RPCS_IN_FLIGHT,
)
