"""The values read through one `nvmlDeviceGetFieldValues` call per GPU per cycle.

Each field has its own return code: NOT_SUPPORTED leaves that one value absent. PCIe byte
counters wrap and are unwrapped by `Unwrapped`; NVLink throughput fields count KiB and take
scope UINT_MAX for the sum over all links.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import pynvml

from trainmon.nvml.metrics import GpuMetric

ALL_LINKS = 0xFFFFFFFF
KIB = 1024
MJ = 1e-3  # energy fields count millijoules
NS = 1e-9  # violation (throttle) fields count nanoseconds


@dataclass(frozen=True, slots=True)
class Field:
    """One field id, the metric it feeds (`label` set for a labelled metric) and its scale to base units."""

    field_id: int
    metric: GpuMetric
    label: str | None = None
    scale: float = 1.0
    scope: int = 0
    wraps: bool = False


FIELDS: tuple[Field, ...] = (
    Field(pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, GpuMetric.ENERGY_JOULES_TOTAL, scale=MJ),
    Field(pynvml.NVML_FI_DEV_MEMORY_TEMP, GpuMetric.TEMPERATURE_CELSIUS, label="memory"),
    Field(pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, GpuMetric.ECC_ERRORS_TOTAL, label="corrected"),
    Field(pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL, GpuMetric.ECC_ERRORS_TOTAL, label="uncorrected"),
    Field(pynvml.NVML_FI_DEV_REMAPPED_COR, GpuMetric.REMAPPED_ROWS_TOTAL, label="corrected"),
    Field(pynvml.NVML_FI_DEV_REMAPPED_UNC, GpuMetric.REMAPPED_ROWS_TOTAL, label="uncorrected"),
    Field(pynvml.NVML_FI_DEV_REMAPPED_PENDING, GpuMetric.ROW_REMAP_PENDING),
    Field(pynvml.NVML_FI_DEV_REMAPPED_FAILURE, GpuMetric.ROW_REMAP_FAILURE),
    Field(pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER, GpuMetric.PCIE_REPLAY_ERRORS_TOTAL),
    Field(pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, GpuMetric.PCIE_RECEIVED_BYTES_TOTAL, wraps=True),
    Field(pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, GpuMetric.PCIE_TRANSMITTED_BYTES_TOTAL, wraps=True),
    Field(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, GpuMetric.NVLINK_RECEIVED_BYTES_TOTAL, scale=KIB,
          scope=ALL_LINKS),
    Field(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, GpuMetric.NVLINK_TRANSMITTED_BYTES_TOTAL, scale=KIB,
          scope=ALL_LINKS),
    # Violation counters: time the clocks were held down, per policy (cumulative ns).
    Field(pynvml.NVML_FI_DEV_PERF_POLICY_POWER, GpuMetric.THROTTLE_SECONDS_TOTAL, label="power", scale=NS),
    Field(pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL, GpuMetric.THROTTLE_SECONDS_TOTAL, label="thermal", scale=NS),
    Field(pynvml.NVML_FI_DEV_PERF_POLICY_SYNC_BOOST, GpuMetric.THROTTLE_SECONDS_TOTAL, label="sync_boost", scale=NS),
    Field(pynvml.NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT, GpuMetric.THROTTLE_SECONDS_TOTAL, label="board_limit", scale=NS),
    Field(pynvml.NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION, GpuMetric.THROTTLE_SECONDS_TOTAL, label="low_utilization",
          scale=NS),
    Field(pynvml.NVML_FI_DEV_PERF_POLICY_RELIABILITY, GpuMetric.THROTTLE_SECONDS_TOTAL, label="reliability", scale=NS),
)

# The driver's own verdict (nvmlGpuRecoveryAction_t, R565+; NOT_SUPPORTED before): read for the health
# verdict, not served as a series of its own.
RECOVERY_ACTION = pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION

REQUEST: tuple[tuple[int, int], ...] = (*((f.field_id, f.scope) for f in FIELDS), (RECOVERY_ACTION, 0))

# NVLink per link, in the same call: scope = the link. Read once at attach: how many links.
LINK_COUNT = pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT
LINK_STATE = pynvml.NVML_FI_DEV_NVLINK_GET_STATE  # R570+; 1 = active
LINK_ACTIVE = 1
# error label -> field id taking scope = link (Hopper and older; NOT_SUPPORTED on Blackwell since R565).
LINK_ERRORS: dict[str, int] = {
    "crc_flit": pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC,
    "replay": pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY,
    "recovery": pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY,
}
# CRC data errors exist only as one field per link, for links 0-11 (scope unused).
CRC_DATA_PER_LINK: tuple[int, ...] = tuple(getattr(pynvml, f"NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L{i}")
                                           for i in range(12))


@dataclass(frozen=True, slots=True)
class LinkField:
    """One per-link value of the batched request: `error` None for the link state."""

    field_id: int
    scope: int
    link: int
    error: str | None


def link_fields(links: int) -> tuple[LinkField, ...]:
    """What to add to the request for a GPU with `links` NVLinks."""
    found: list[LinkField] = []
    for link in range(links):
        found.append(LinkField(LINK_STATE, link, link, None))
        found += [LinkField(field_id, link, link, error) for error, field_id in LINK_ERRORS.items()]
        if link < len(CRC_DATA_PER_LINK):
            found.append(LinkField(CRC_DATA_PER_LINK[link], 0, link, "crc_data"))
    return tuple(found)

_WIDTH = {
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: 1 << 32,
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: 1 << 64,
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: 1 << 64,
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: 1 << 16,
}


@dataclass(frozen=True, slots=True)
class RawField:
    value: float
    modulus: int  # where an unsigned counter of this width wraps (0: not a wrapping type)


class _PlainFieldValue(ctypes.Structure):
    """pynvml's c_nvmlFieldValue_t layout without its slow attribute hooks (reads cost 6x less)."""

    _fields_ = [(name, kind) for name, kind in pynvml.c_nvmlFieldValue_t._fields_]


# nvmlValueType_t -> the union member holding the value
_MEMBER = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}


def decode(values: Any) -> dict[tuple[int, int], RawField]:
    """Field values by (id, scope); a field NVML answered with an error is left out (absent this cycle)."""
    answered: dict[tuple[int, int], RawField] = {}
    for entry in (_PlainFieldValue * len(values)).from_buffer(values):
        member = _MEMBER.get(entry.valueType)
        if entry.nvmlReturn != pynvml.NVML_SUCCESS or member is None:
            continue
        value = float(getattr(entry.value, member))
        answered[(entry.fieldId, entry.scopeId)] = RawField(value, _WIDTH.get(entry.valueType, 0))
    return answered


def return_codes(values: Any) -> dict[tuple[int, int], int]:
    """Each requested field's NVML return code by (id, scope): what a driver answers, for scripts/gpu_check.py."""
    return {(entry.fieldId, entry.scopeId): int(entry.nvmlReturn)
            for entry in (_PlainFieldValue * len(values)).from_buffer(values)}


class Unwrapped:
    """A wrapping hardware counter turned into one that only grows (per GPU, across cycles)."""

    __slots__ = ("_last", "_started", "_total")

    def __init__(self) -> None:
        self._last: float | None = None
        self._started = False
        self._total = 0.0

    def update(self, raw: RawField) -> float:
        if self._last is None:
            if not self._started:  # the first value is the base; after `rebase()` the total goes on
                self._total, self._started = raw.value, True
        elif raw.value >= self._last:
            self._total += raw.value - self._last
        elif raw.modulus:
            self._total += raw.value + raw.modulus - self._last
        self._last = raw.value
        return self._total

    def rebase(self) -> None:
        """After NVML re-initialisation (possibly a driver reload) the next raw value is a new base."""
        self._last = None
