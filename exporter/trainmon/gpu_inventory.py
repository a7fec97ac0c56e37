"""The GPUs the `gpu` collector read last and their compute processes, for the GPU-ownership collectors.

The daemon builds one inventory per node and passes it to every collector in `NodeResources`: the `gpu`
collector publishes into it every cycle, `pod_resources` and `hpc_jobs` read it (they need each GPU's
index, UUID and minor number, and the pids NVML lists on it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class InventoryGpu:
    index: int
    uuid: str
    # NVML's compute processes on the GPU; None when they could not be read this cycle.
    pids: tuple[int, ...] | None
    # NVML's minor number (/dev/nvidia<minor>), which DRA device names carry; "" where NVML has none.
    minor_number: str = ""
    # NVML's PCI bus id (00000000:18:00.0): where the GPU sits in sysfs' PCIe tree; "" where unknown.
    pci_bus_id: str = ""


class GpuInventory:
    """The latest published GPUs; publishing replaces one reference, so a reader never sees a mix."""

    def __init__(self) -> None:
        self._gpus: tuple[InventoryGpu, ...] | None = None

    def publish(self, gpus: Iterable[InventoryGpu]) -> None:
        self._gpus = tuple(gpus)

    def latest(self) -> tuple[InventoryGpu, ...] | None:
        """None until the `gpu` collector has run once."""
        return self._gpus

