"""The `aer` collector: PCIe AER error counters of any PCIe device."""

from __future__ import annotations

from trainmon.catalog.family import Family, Kind

PCIE_AER_ERRORS_TOTAL = Family(
    "trainmon_pcie_aer_errors_total",
    Kind.COUNTER,
    "PCIe AER errors the kernel counted on a GPU, HCA or NVMe controller, by severity (correctable, "
    "nonfatal, fatal) and error; absent while zero.",
    ("device", "severity", "error"),
)

FAMILIES: tuple[Family, ...] = (
    PCIE_AER_ERRORS_TOTAL,
)
