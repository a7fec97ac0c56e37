"""The `nccl_inspector` collector: NCCL Inspector output, per rank and communicator."""

from __future__ import annotations

from trainmon.catalog.family import Family, Kind

NCCL_INSPECTOR_OPERATIONS_TOTAL = Family(
    "trainmon_nccl_inspector_operations_total",
    Kind.COUNTER,
    "Operations NCCL Inspector timed on the GPU (JSON dump).",
    ("job_id", "rank", "comm_name", "collective", "size_class"),
)
NCCL_INSPECTOR_SECONDS_TOTAL = Family(
    "trainmon_nccl_inspector_seconds_total",
    Kind.COUNTER,
    "GPU execution time of those operations (JSON dump).",
    ("job_id", "rank", "comm_name", "collective", "size_class"),
    unit="seconds",
)
NCCL_INSPECTOR_BYTES_TOTAL = Family(
    "trainmon_nccl_inspector_bytes_total",
    Kind.COUNTER,
    "Message bytes of those operations (JSON dump).",
    ("job_id", "rank", "comm_name", "collective", "size_class"),
    unit="bytes",
)
NCCL_INSPECTOR_DROPPED_TOTAL = Family(
    "trainmon_nccl_inspector_dropped_total",
    Kind.COUNTER,
    "Operations Inspector reported without GPU timing (CPU fallback), not counted in the others.",
    ("job_id", "rank", "comm_name", "collective", "size_class"),
)
NCCL_INSPECTOR_BUS_BANDWIDTH_BYTES_PER_SECOND = Family(
    "trainmon_nccl_inspector_bus_bandwidth_bytes_per_second",
    Kind.SUMMARY,
    "NCCL bus bandwidth: one observation per operation (JSON dump) or per textfile window (its mean); "
    "rate(_sum)/rate(_count) is the mean.",
    ("job_id", "rank", "comm_name", "collective", "size_class"),
    unit="bytes_per_second",
)
NCCL_INSPECTOR_INFO = Family(
    "trainmon_nccl_inspector_info",
    Kind.INFO,
    "A rank NCCL Inspector reports on: its GPU (join on uuid), which output and which Inspector output "
    "format version.",
    ("job_id", "rank", "uuid", "source", "version"),
)
NCCL_INSPECTOR_RECORDS_SKIPPED_TOTAL = Family(
    "trainmon_nccl_inspector_records_skipped_total",
    Kind.COUNTER,
    "Inspector records not counted, by reason (truncated, malformed, version, unattributed, "
    "series_budget, comm_names, oversized, too_many_files).",
    ("reason",),
)
NCCL_INSPECTOR_BACKLOG_BYTES = Family(
    "trainmon_nccl_inspector_backlog_bytes",
    Kind.GAUGE,
    "JSON dump bytes not read yet: above zero for long, the dumps grow faster than a cycle reads (use the"
    " textfile).",
    unit="bytes",
)

FAMILIES: tuple[Family, ...] = (
    NCCL_INSPECTOR_OPERATIONS_TOTAL,
    NCCL_INSPECTOR_SECONDS_TOTAL,
    NCCL_INSPECTOR_BYTES_TOTAL,
    NCCL_INSPECTOR_DROPPED_TOTAL,
    NCCL_INSPECTOR_BUS_BANDWIDTH_BYTES_PER_SECOND,
    NCCL_INSPECTOR_INFO,
    NCCL_INSPECTOR_RECORDS_SKIPPED_TOTAL,
    NCCL_INSPECTOR_BACKLOG_BYTES,
)
