"""The `nvme` collector: NVMe drives from sysfs and /proc/diskstats."""

from __future__ import annotations

from trainmon.catalog.family import Family, Kind

NVME_READS_COMPLETED_TOTAL = Family(
    "trainmon_nvme_reads_completed_total",
    Kind.COUNTER,
    "Reads completed. From diskstats.",
    ("device",),
)
NVME_READS_MERGED_TOTAL = Family(
    "trainmon_nvme_reads_merged_total",
    Kind.COUNTER,
    "Adjacent reads merged. From diskstats.",
    ("device",),
)
NVME_READ_BYTES_TOTAL = Family(
    "trainmon_nvme_read_bytes_total",
    Kind.COUNTER,
    "Bytes read. From diskstats.",
    ("device",),
    unit="bytes",
)
NVME_READ_TIME_SECONDS_TOTAL = Family(
    "trainmon_nvme_read_time_seconds_total",
    Kind.COUNTER,
    "Time spent on reads. From diskstats.",
    ("device",),
    unit="seconds",
)
NVME_WRITES_COMPLETED_TOTAL = Family(
    "trainmon_nvme_writes_completed_total",
    Kind.COUNTER,
    "Writes completed. From diskstats.",
    ("device",),
)
NVME_WRITES_MERGED_TOTAL = Family(
    "trainmon_nvme_writes_merged_total",
    Kind.COUNTER,
    "Adjacent writes merged. From diskstats.",
    ("device",),
)
NVME_WRITTEN_BYTES_TOTAL = Family(
    "trainmon_nvme_written_bytes_total",
    Kind.COUNTER,
    "Bytes written. From diskstats.",
    ("device",),
    unit="bytes",
)
NVME_WRITE_TIME_SECONDS_TOTAL = Family(
    "trainmon_nvme_write_time_seconds_total",
    Kind.COUNTER,
    "Time spent on writes. From diskstats.",
    ("device",),
    unit="seconds",
)
NVME_IO_TIME_SECONDS_TOTAL = Family(
    "trainmon_nvme_io_time_seconds_total",
    Kind.COUNTER,
    "Time the device had I/O in flight. From diskstats.",
    ("device",),
    unit="seconds",
)
NVME_IO_TIME_WEIGHTED_SECONDS_TOTAL = Family(
    "trainmon_nvme_io_time_weighted_seconds_total",
    Kind.COUNTER,
    "Time spent on I/O weighted by the number in flight (queue depth x time). From diskstats.",
    ("device",),
    unit="seconds",
)
NVME_DISCARDS_COMPLETED_TOTAL = Family(
    "trainmon_nvme_discards_completed_total",
    Kind.COUNTER,
    "Discards completed (kernel 4.18+). From diskstats.",
    ("device",),
)
NVME_DISCARDS_MERGED_TOTAL = Family(
    "trainmon_nvme_discards_merged_total",
    Kind.COUNTER,
    "Adjacent discards merged (kernel 4.18+). From diskstats.",
    ("device",),
)
NVME_DISCARDED_BYTES_TOTAL = Family(
    "trainmon_nvme_discarded_bytes_total",
    Kind.COUNTER,
    "Bytes discarded (kernel 4.18+). From diskstats.",
    ("device",),
    unit="bytes",
)
NVME_DISCARD_TIME_SECONDS_TOTAL = Family(
    "trainmon_nvme_discard_time_seconds_total",
    Kind.COUNTER,
    "Time spent on discards (kernel 4.18+). From diskstats.",
    ("device",),
    unit="seconds",
)
NVME_FLUSH_REQUESTS_TOTAL = Family(
    "trainmon_nvme_flush_requests_total",
    Kind.COUNTER,
    "Flush requests completed (kernel 5.5+). From diskstats.",
    ("device",),
)
NVME_FLUSH_REQUESTS_TIME_SECONDS_TOTAL = Family(
    "trainmon_nvme_flush_requests_time_seconds_total",
    Kind.COUNTER,
    "Time spent on flushes (kernel 5.5+). From diskstats.",
    ("device",),
    unit="seconds",
)
NVME_IO_IN_PROGRESS = Family(
    "trainmon_nvme_io_in_progress",
    Kind.GAUGE,
    "I/Os in flight now. From diskstats.",
    ("device",),
)
NVME_INFO = Family(
    "trainmon_nvme_info",
    Kind.INFO,
    "NVMe namespace identity, from sysfs class/nvme. Join on device.",
    ("device", "controller", "model", "serial", "firmware"),
)

FAMILIES: tuple[Family, ...] = (
    NVME_READS_COMPLETED_TOTAL,
    NVME_READS_MERGED_TOTAL,
    NVME_READ_BYTES_TOTAL,
    NVME_READ_TIME_SECONDS_TOTAL,
    NVME_WRITES_COMPLETED_TOTAL,
    NVME_WRITES_MERGED_TOTAL,
    NVME_WRITTEN_BYTES_TOTAL,
    NVME_WRITE_TIME_SECONDS_TOTAL,
    NVME_IO_TIME_SECONDS_TOTAL,
    NVME_IO_TIME_WEIGHTED_SECONDS_TOTAL,
    NVME_DISCARDS_COMPLETED_TOTAL,
    NVME_DISCARDS_MERGED_TOTAL,
    NVME_DISCARDED_BYTES_TOTAL,
    NVME_DISCARD_TIME_SECONDS_TOTAL,
    NVME_FLUSH_REQUESTS_TOTAL,
    NVME_FLUSH_REQUESTS_TIME_SECONDS_TOTAL,
    NVME_IO_IN_PROGRESS,
    NVME_INFO,
)
