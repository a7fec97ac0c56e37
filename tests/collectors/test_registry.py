"""`build_collector`: every collector is built the same way, from settings and the node's resources."""

from __future__ import annotations

from pathlib import Path

from trainmon.collectors import AVAILABLE, build_collector
from trainmon.collectors.base import NodeResources
from trainmon.daemon import build_resources, close_resources
from trainmon.settings import Settings
from trainmon.simulation.node import SimulatedNode


def test_every_collector_is_built_from_settings_and_the_node_resources(tmp_path: Path) -> None:
    settings = Settings(collectors=tuple(AVAILABLE), ingest_socket=str(tmp_path / "ingest.sock"),
                        kubelet_pod_resources_socket=tmp_path / "kubelet.sock")
    resources = build_resources(settings, SimulatedNode())
    try:
        collectors = [build_collector(name, settings, resources) for name in AVAILABLE]
        assert list(AVAILABLE) == [c.name for c in collectors]
        for collector in collectors:
            collector.close()
    finally:
        close_resources(resources)


def test_the_gpu_collector_publishes_into_the_inventory_it_was_given() -> None:
    settings = Settings()
    mine, other = NodeResources(nvml=SimulatedNode()), NodeResources()
    gpu = build_collector("gpu", settings, mine)
    try:
        gpu.collect()
    finally:
        gpu.close()

    assert mine.gpus.latest()
    assert other.gpus.latest() is None
