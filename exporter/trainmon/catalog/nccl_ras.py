"""The `nccl_ras` collector: NCCL RAS's view of a job's ranks."""

from __future__ import annotations

from trainmon.catalog.family import Family, Kind

NCCL_RAS_UP = Family(
    "trainmon_nccl_ras_up",
    Kind.GAUGE,
    "1 if the last RAS poll got a usable answer, 0 if it failed.",
    ("job_id",),
)
NCCL_RAS_POLLS_TOTAL = Family(
    "trainmon_nccl_ras_polls_total",
    Kind.COUNTER,
    "RAS polls by command and result (ok, refused, timeout, closed, protocol, malformed, oversized).",
    ("command", "result"),
)
NCCL_RAS_ANSWER_BYTES = Family(
    "trainmon_nccl_ras_answer_bytes",
    Kind.GAUGE,
    "Size of the last RAS answer.",
    unit="bytes",
)
NCCL_RAS_MISSING_RANKS = Family(
    "trainmon_nccl_ras_missing_ranks",
    Kind.GAUGE,
    "Ranks missing from RAS's view, by kind: dead (considered dead), unresponsive, absent (neither); the "
    "most in any one communicator.",
    ("job_id", "kind"),
)
NCCL_RAS_MISSING_RANK_INFO = Family(
    "trainmon_nccl_ras_missing_rank_info",
    Kind.INFO,
    "A rank missing from the job's widest communicator (its global rank), by kind (dead, unresponsive), "
    "with the host RAS names; at most 8 per kind.",
    ("job_id", "rank", "kind", "host"),
)
NCCL_RAS_RANK_ERRORS = Family(
    "trainmon_nccl_ras_rank_errors",
    Kind.GAUGE,
    "Processes with a rank in an error state, by kind (async_error, abort, finalize, destroy).",
    ("job_id", "kind"),
)
NCCL_RAS_COMMUNICATORS = Family(
    "trainmon_nccl_ras_communicators",
    Kind.GAUGE,
    "Communicators RAS reports.",
    ("job_id",),
)
NCCL_RAS_COMMUNICATORS_MISMATCHED = Family(
    "trainmon_nccl_ras_communicators_mismatched",
    Kind.GAUGE,
    "Communicators whose ranks disagree on a collective's count (RAS's op-count mismatch).",
    ("job_id",),
)
NCCL_RAS_PROCESSES = Family(
    "trainmon_nccl_ras_processes",
    Kind.GAUGE,
    "Processes that answered RAS.",
    ("job_id",),
)
NCCL_RAS_INFO = Family(
    "trainmon_nccl_ras_info",
    Kind.INFO,
    "The NCCL version RAS reports.",
    ("job_id", "nccl_version"),
)

FAMILIES: tuple[Family, ...] = (
    NCCL_RAS_UP,
    NCCL_RAS_POLLS_TOTAL,
    NCCL_RAS_ANSWER_BYTES,
    NCCL_RAS_MISSING_RANKS,
    NCCL_RAS_MISSING_RANK_INFO,
    NCCL_RAS_RANK_ERRORS,
    NCCL_RAS_COMMUNICATORS,
    NCCL_RAS_COMMUNICATORS_MISMATCHED,
    NCCL_RAS_PROCESSES,
    NCCL_RAS_INFO,
)
