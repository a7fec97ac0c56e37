"""`build_collector`: every collector is built the same way, from settings and the node's resources, and no
two of them (nor the scheduler) serve a family of the same name."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from trainmon.collectors import AVAILABLE, build_collector
from trainmon.collectors.base import NodeResources
from trainmon.daemon import build_resources, close_resources, make_scheduler
from trainmon.demo.job import default_uuids
from trainmon.demo.owners import Kubelet, write_job_mapping
from trainmon.demo.tree import DemoTree
from trainmon.settings import Settings
from trainmon.simulation.incidents import Plan
from trainmon.simulation.node import SimulatedNode
from trainmon.snapshot import SnapshotStore


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


def test_no_family_name_is_served_twice_in_a_cycle_of_every_collector(tmp_path: Path) -> None:
    """client_python's registry refuses a duplicated name; the snapshot would serve both. Every collector
    reads a simulated node here (NVML, the sysfs/procfs tree, a kubelet, a job mapping) so each emits
    its families."""
    tree = DemoTree(tmp_path / "tree", Plan())
    kubelet = Kubelet(tmp_path / "kubelet.sock", default_uuids())
    (tmp_path / "inspector").mkdir()
    settings = Settings(collectors=tuple(AVAILABLE), procfs=tree.proc, sysfs=tree.sys, kmsg=tmp_path / "kmsg",
                        state_dir=tmp_path / "state", ingest_socket=str(tmp_path / "ingest.sock"),
                        kubelet_pod_resources_socket=tmp_path / "kubelet.sock",
                        hpc_job_mapping_dir=write_job_mapping(tmp_path / "jobs", 8),
                        nccl_inspector_dir=tmp_path / "inspector")
    resources = build_resources(settings, SimulatedNode())
    scheduler = make_scheduler(settings, resources, SnapshotStore())
    try:
        snapshot = scheduler.run_cycle()
    finally:
        scheduler.stop()
        close_resources(resources)
        kubelet.stop()

    served = Counter(family.name for family in snapshot.families)
    assert {} == {name: times for name, times in served.items() if times > 1}
    assert [] == [(s.name, s.state, s.error) for s in snapshot.statuses if s.state != "ok"]  # each emitted its own
