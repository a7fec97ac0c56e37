"""The registry of collectors: one module each, enabled by name with `--collectors`.

Adding a collector means one module here, a parser module if it reads text, one line in
`AVAILABLE` and one test module. Modules are imported only when their collector is enabled.
Every factory takes the settings and the `NodeResources` the daemon builds once per node.
"""

from __future__ import annotations

import importlib
from typing import cast

from trainmon.collectors.base import Collection, Collector, CollectorFactory, NodeResources
from trainmon.settings import Settings

# name -> "module:factory"; a string so that enabling `nvme` never imports pynvml.
AVAILABLE: dict[str, str] = {
    "gpu": "trainmon.collectors.gpu:GpuCollector",
    "nvme": "trainmon.collectors.nvme:NvmeCollector",
    "infiniband": "trainmon.collectors.infiniband:InfinibandCollector",
    "aer": "trainmon.collectors.aer:AerCollector",
    "training": "trainmon.collectors.training:TrainingCollector",
    "pod_resources": "trainmon.collectors.pod_resources:PodResourcesCollector",
    "hpc_jobs": "trainmon.collectors.hpc_jobs:HpcJobsCollector",
    "fs": "trainmon.collectors.fs:FsCollector",
    "nccl_inspector": "trainmon.collectors.nccl_inspector:NcclInspectorCollector",
    "nccl_ras": "trainmon.collectors.nccl_ras:NcclRasCollector",
}

__all__ = ["AVAILABLE", "Collection", "Collector", "NodeResources", "build_collector"]


def factory(name: str) -> CollectorFactory:
    module_name, _, attr = AVAILABLE[name].partition(":")
    return cast(CollectorFactory, getattr(importlib.import_module(module_name), attr))  # AVAILABLE names one


def build_collector(name: str, settings: Settings, resources: NodeResources) -> Collector:
    return factory(name)(settings, resources)
