"""The `aer` collector: PCIe AER counters of every PCIe device a training node depends on (the GPUs and
NVSwitches, the InfiniBand/RoCE HCAs, the NVMe controllers), from sysfs alone.

Its own collector, not the gpu collector's: a storage node without GPUs serves its drives' and HCAs'
AER, and a hung NVML call never holds the AER reads. Which devices, and how a file is read, is
`trainmon.sysfs.aer`'s business.
"""

from __future__ import annotations

from collections.abc import Sequence

from trainmon.catalog.aer import PCIE_AER_ERRORS_TOTAL
from trainmon.collectors.base import Collection, NodeResources
from trainmon.errors import NoData
from trainmon.families import Metric, counter
from trainmon.roots import Root
from trainmon.settings import Settings
from trainmon.sysfs.aer import AerReading, aer_devices, read_aer

NO_STATISTICS = "no AER statistics (no AER capability, or a kernel without CONFIG_PCIEAER_STATS)"


class AerCollector:
    name = "aer"

    def __init__(self, settings: Settings, resources: NodeResources) -> None:
        self._sys = Root(settings.sysfs, "sysfs")

    def collect(self) -> Collection:
        self._sys.require()
        devices = aer_devices(self._sys)
        if not devices:
            raise NoData(f"no NVIDIA, InfiniBand or NVMe PCI device under {self._sys.path}")
        readings = {address: read_aer(self._sys, address) for address in devices}
        read = [reading for reading in readings.values() if reading is not None]
        found = [f"{address} ({what}): {_summary(readings[address])}" for address, what in devices.items()]
        skipped = [line for reading in read for line in reading.skipped]
        return Collection(families=(aer_family(read),), found=tuple(found), skipped=tuple(skipped))

    def close(self) -> None:
        pass


def _summary(reading: AerReading | None) -> str:
    """The line `trainmon check` prints about a device: its errors by severity, or why it has no counters."""
    if reading is None:
        return NO_STATISTICS
    totals = {severity: sum(errors.values()) for severity, errors in reading.counts.items()}
    counted = ", ".join(f"{severity} {total:.0f}" for severity, total in totals.items() if total)
    return f"AER errors: {counted or 'none'}"


def aer_family(readings: Sequence[AerReading]) -> Metric:
    family = counter(PCIE_AER_ERRORS_TOTAL)
    for reading in readings:
        for severity, errors in reading.counts.items():
            for error, count in errors.items():
                if count:  # ~40 error kinds per device, ~30 devices: zeros would be a thousand series per node
                    family.add_metric([reading.device, severity, error], count)
    return family
