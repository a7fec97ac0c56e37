"""The `pod_resources` collector: the Kubernetes pod that owns each GPU."""

from __future__ import annotations

from trainmon.catalog.family import Family, Kind

GPU_ALLOCATION_INFO = Family(
    "trainmon_gpu_allocation_info",
    Kind.INFO,
    "GPU allocated to a Kubernetes container (kubelet PodResources List; source device_plugin or dra, "
    "claim the DRA claim); join on (gpu, uuid).",
    ("gpu", "uuid", "namespace", "pod", "container", "source", "claim"),
)

FAMILIES: tuple[Family, ...] = (
    GPU_ALLOCATION_INFO,
)
