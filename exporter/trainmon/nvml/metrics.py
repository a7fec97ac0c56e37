"""The per-GPU metrics a reading carries: one key shared by the NVML layer and the GPU collector.

`GpuReading` is keyed by these members and each member is the catalogue family that serves it, so a
misspelt key fails at import (and under mypy) instead of silently serving nothing.
"""

from __future__ import annotations

from enum import Enum

from trainmon.catalog import Family
from trainmon.catalog import gpu as catalog


class GpuMetric(Enum):
    """A per-GPU metric (SPEC §4), valued by its family in `trainmon.catalog.gpu`."""

    _value_: Family

    UTILIZATION_RATIO = catalog.GPU_UTILIZATION_RATIO
    SM_UTILIZATION_RATIO = catalog.GPU_SM_UTILIZATION_RATIO
    SM_ACTIVE_SECONDS_TOTAL = catalog.GPU_SM_ACTIVE_SECONDS_TOTAL
    SM_OCCUPANCY_RATIO = catalog.GPU_SM_OCCUPANCY_RATIO
    TENSOR_ACTIVE_RATIO = catalog.GPU_TENSOR_ACTIVE_RATIO
    DRAM_ACTIVE_RATIO = catalog.GPU_DRAM_ACTIVE_RATIO
    FB_USED_BYTES = catalog.GPU_FB_USED_BYTES
    FB_FREE_BYTES = catalog.GPU_FB_FREE_BYTES
    FB_TOTAL_BYTES = catalog.GPU_FB_TOTAL_BYTES
    FB_RESERVED_BYTES = catalog.GPU_FB_RESERVED_BYTES
    POWER_WATTS = catalog.GPU_POWER_WATTS
    POWER_LIMIT_WATTS = catalog.GPU_POWER_LIMIT_WATTS
    ENERGY_JOULES_TOTAL = catalog.GPU_ENERGY_JOULES_TOTAL
    TEMPERATURE_CELSIUS = catalog.GPU_TEMPERATURE_CELSIUS
    CLOCK_HERTZ = catalog.GPU_CLOCK_HERTZ
    CLOCKS_EVENT_ACTIVE = catalog.GPU_CLOCKS_EVENT_ACTIVE
    THROTTLE_SECONDS_TOTAL = catalog.GPU_THROTTLE_SECONDS_TOTAL
    ECC_ERRORS_TOTAL = catalog.GPU_ECC_ERRORS_TOTAL
    REMAPPED_ROWS_TOTAL = catalog.GPU_REMAPPED_ROWS_TOTAL
    ROW_REMAP_PENDING = catalog.GPU_ROW_REMAP_PENDING
    ROW_REMAP_FAILURE = catalog.GPU_ROW_REMAP_FAILURE
    PCIE_LINK_GENERATION = catalog.GPU_PCIE_LINK_GENERATION
    PCIE_LINK_WIDTH = catalog.GPU_PCIE_LINK_WIDTH
    PCIE_REPLAY_ERRORS_TOTAL = catalog.GPU_PCIE_REPLAY_ERRORS_TOTAL
    PCIE_RECEIVED_BYTES_TOTAL = catalog.GPU_PCIE_RECEIVED_BYTES_TOTAL
    PCIE_TRANSMITTED_BYTES_TOTAL = catalog.GPU_PCIE_TRANSMITTED_BYTES_TOTAL
    NVLINK_RECEIVED_BYTES_TOTAL = catalog.GPU_NVLINK_RECEIVED_BYTES_TOTAL
    NVLINK_TRANSMITTED_BYTES_TOTAL = catalog.GPU_NVLINK_TRANSMITTED_BYTES_TOTAL

    @property
    def family(self) -> Family:
        return self._value_

    @property
    def key(self) -> str:
        """The metric's name without the `trainmon_gpu_` prefix, as NVML read failures name it."""
        return self.name.lower()
