"""What a collector is, and what one collection produces.

A collector is anything with a `name`, a `collect()` that returns a `Collection`, and a `close()`.
It only collects: the scheduler times it, decides success, bounds it with a deadline and logs
state changes. Set-up that can fail (NVML) belongs in `collect()` with its own back-off, so a
collector whose hardware appears later recovers without a restart. The node-wide resources (the
ingest server) are the daemon's: it maintains them before each cycle, and collectors only read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from trainmon.families import Metric
from trainmon.gpu_inventory import GpuInventory
from trainmon.settings import Settings

if TYPE_CHECKING:
    from trainmon.ingest.server import IngestServer


class NvmlStandIn(Protocol):
    """What stands in for libnvidia-ml.so.1 and the PCI bus (the demo's simulated node)."""

    def library(self) -> object: ...

    def pci_gpus(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class NodeResources:
    """What the daemon builds once per node and hands to every collector factory.

    Attributes:
        ingest: the ingest server whose rank table `training` reads; None when `training` is not enabled.
        gpus: the GPUs the `gpu` collector read last, which `pod_resources` and `hpc_jobs` attribute.
        nvml: what the `gpu` collector reads instead of the system's NVML; None for the system's.
    """

    ingest: IngestServer | None = None
    gpus: GpuInventory = field(default_factory=lambda: GpuInventory())
    nvml: NvmlStandIn | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Collection:
    """The result of one `collect()`.

    Attributes:
        families: the metric families, built fresh from this cycle's reads.
        found: human-readable lines for `trainmon check` ("nvme0n1: Samsung PM9A3, 3.84 TB").
        skipped: values that could not be read and were dropped ("mlx5_0/1 counters/VL15_dropped: EINVAL").
        details: JSON-serialisable extra state for `/api/v1/status` (for example the GPUs or live ranks).
    """

    families: tuple[Metric, ...]
    found: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    details: Mapping[str, object] = field(default_factory=dict)


class Collector(Protocol):
    name: str

    def collect(self) -> Collection:
        """Read the hardware once. Raise `NoData` when it is absent, anything else when broken."""
        ...

    def close(self) -> None:
        """Release threads, sockets and libraries; called once at shutdown."""
        ...


class CollectorFactory(Protocol):
    def __call__(self, settings: Settings, resources: NodeResources) -> Collector: ...
