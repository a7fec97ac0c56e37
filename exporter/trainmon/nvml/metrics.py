"""The per-GPU metrics a reading carries: one key shared by the NVML layer and the GPU collector.

`GpuReading` is keyed by these members and `collectors/gpu.py` has one `GpuFamily` for each, so a
misspelt key fails at import (and under mypy) instead of silently serving nothing.
"""

from __future__ import annotations

from enum import Enum


class GpuMetric(str, Enum):
    """A per-GPU metric, by its name without the `gpu_` prefix (SPEC §4)."""

    UTILIZATION_RATIO = "utilization_ratio"
    SM_UTILIZATION_RATIO = "sm_utilization_ratio"
    SM_ACTIVE_SECONDS_TOTAL = "sm_active_seconds_total"
    SM_OCCUPANCY_RATIO = "sm_occupancy_ratio"
    TENSOR_ACTIVE_RATIO = "tensor_active_ratio"
    DRAM_ACTIVE_RATIO = "dram_active_ratio"
    FB_USED_BYTES = "fb_used_bytes"
    FB_FREE_BYTES = "fb_free_bytes"
    FB_TOTAL_BYTES = "fb_total_bytes"
    FB_RESERVED_BYTES = "fb_reserved_bytes"
    POWER_WATTS = "power_watts"
    POWER_LIMIT_WATTS = "power_limit_watts"
    ENERGY_JOULES_TOTAL = "energy_joules_total"
    TEMPERATURE_CELSIUS = "temperature_celsius"
    CLOCK_HERTZ = "clock_hertz"
    CLOCKS_EVENT_ACTIVE = "clocks_event_active"
    THROTTLE_SECONDS_TOTAL = "throttle_seconds_total"
    ECC_ERRORS_TOTAL = "ecc_errors_total"
    REMAPPED_ROWS_TOTAL = "remapped_rows_total"
    ROW_REMAP_PENDING = "row_remap_pending"
    ROW_REMAP_FAILURE = "row_remap_failure"
    PCIE_LINK_GENERATION = "pcie_link_generation"
    PCIE_LINK_WIDTH = "pcie_link_width"
    PCIE_REPLAY_ERRORS_TOTAL = "pcie_replay_errors_total"
    PCIE_RECEIVED_BYTES_TOTAL = "pcie_received_bytes_total"
    PCIE_TRANSMITTED_BYTES_TOTAL = "pcie_transmitted_bytes_total"
    NVLINK_RECEIVED_BYTES_TOTAL = "nvlink_received_bytes_total"
    NVLINK_TRANSMITTED_BYTES_TOTAL = "nvlink_transmitted_bytes_total"

    @property
    def family(self) -> str:
        """The family name, `trainmon_` prefix aside (families.py adds it)."""
        return f"gpu_{self.value}"
