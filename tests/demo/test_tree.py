"""The demo's procfs/sysfs tree, read by the real NVMe, InfiniBand, fs and AER collectors as the job advances it."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.clock import Clock
from tests.helpers.metrics import SampleKey, samples_of
from trainmon.collectors.aer import AerCollector
from trainmon.collectors.base import NodeResources
from trainmon.collectors.fs import FsCollector
from trainmon.collectors.infiniband import HW_COUNTERS, InfinibandCollector
from trainmon.collectors.nvme import NvmeCollector
from trainmon.demo.tree import AER_DEVICE, AER_EVERY_S, DemoTree, Traffic
from trainmon.gpu_inventory import InventoryGpu
from trainmon.settings import Settings
from trainmon.simulation.incidents import Plan
from trainmon.simulation.node import BUS_IDS

GIB = 1 << 30


def read(tree: DemoTree) -> dict[SampleKey, float]:
    settings = Settings(procfs=tree.proc, sysfs=tree.sys)
    values: dict[SampleKey, float] = {}
    for collector in (NvmeCollector(settings, NodeResources()), InfinibandCollector(settings, NodeResources()),
                      FsCollector(settings, NodeResources()), AerCollector(settings, NodeResources())):
        collection = collector.collect()
        assert () == collection.skipped
        values |= samples_of(collection.families)
    return values


def value(values: dict[SampleKey, float], name: str, **labels: str) -> float:
    return next(v for (n, ls), v in values.items() if n == name and labels.items() <= dict(ls).items())


def advanced(tree: DemoTree, clock: Clock, traffic: Traffic, seconds: int) -> None:
    for _ in range(seconds):
        clock.now += 1
        tree.advance(traffic)


def test_sixteen_namespaces_and_eight_ports_with_every_hw_counter(tmp_path: Path) -> None:
    values = read(DemoTree(tmp_path, Plan()))

    assert 16 == len({dict(ls)["device"] for (n, ls) in values if n == "trainmon_nvme_info"})
    ports = {dict(ls)["device"] for (n, ls), v in values.items() if n == "trainmon_infiniband_state_id" and v == 4}
    assert {f"mlx5_{i}" for i in range(8)} == ports
    served = {n for (n, ls) in values if dict(ls).get("device") == "mlx5_0"}
    assert {family.name for family in HW_COUNTERS.values()} <= served


def test_traffic_moves_the_counters_it_should(tmp_path: Path) -> None:
    clock = Clock()
    tree = DemoTree(tmp_path, Plan(clock=clock), clock)
    before = read(tree)
    advanced(tree, clock, Traffic(read_bytes=16 * GIB, written_bytes=0, allreduce_bytes=[GIB] * 8), 4)
    after = read(tree)

    read_bytes = value(after, "trainmon_nvme_read_bytes_total", device="nvme0n1") - value(
        before, "trainmon_nvme_read_bytes_total", device="nvme0n1")
    sent = value(after, "trainmon_infiniband_port_data_transmitted_bytes_total", device="mlx5_7") - value(
        before, "trainmon_infiniband_port_data_transmitted_bytes_total", device="mlx5_7")
    assert 4 * GIB == read_bytes  # 16 GiB a second striped over 16 namespaces
    assert 4 * GIB == sent


def test_the_files_change_once_per_write_period_and_count_every_tick(tmp_path: Path) -> None:
    """The job ticks every second; for a daemon that collects every 2 s the files change every 2 s."""
    clock = Clock()
    tree = DemoTree(tmp_path, Plan(clock=clock), clock, write_every=2.0)
    sent = []
    for _ in range(4):
        advanced(tree, clock, Traffic(read_bytes=0, written_bytes=0, allreduce_bytes=[GIB] * 8), 1)
        sent.append(value(read(tree), "trainmon_infiniband_port_data_transmitted_bytes_total", device="mlx5_0"))

    assert [0, 2 * GIB, 2 * GIB, 4 * GIB] == sent


def test_a_gpu_counts_a_correctable_aer_error_now_and_then(tmp_path: Path) -> None:
    clock = Clock()
    tree = DemoTree(tmp_path, Plan(clock=clock), clock)
    first = value(read(tree), "trainmon_pcie_aer_errors_total", device=AER_DEVICE, severity="correctable")
    advanced(tree, clock, Traffic(read_bytes=0, written_bytes=0, allreduce_bytes=[0] * 8), int(AER_EVERY_S))

    assert (1, 2) == (first, value(read(tree), "trainmon_pcie_aer_errors_total", device=AER_DEVICE,
                                   severity="correctable"))


def test_incidents_take_a_port_down_and_slow_a_namespace(tmp_path: Path) -> None:
    clock = Clock()
    for incident in ("ib-down", "nvme-slow"):
        tree = DemoTree(tmp_path / incident, Plan(incident, after=10, clock=clock), clock)
        traffic = Traffic(read_bytes=GIB, written_bytes=0, allreduce_bytes=[GIB] * 8)
        advanced(tree, clock, traffic, 5)
        healthy = read(tree)
        advanced(tree, clock, traffic, 10)
        values = read(tree)

        if incident == "ib-down":
            assert 4 == value(healthy, "trainmon_infiniband_state_id", device="mlx5_3")
            assert 1 == value(values, "trainmon_infiniband_state_id", device="mlx5_3")
            assert 4 == value(values, "trainmon_infiniband_state_id", device="mlx5_2")
            assert 1 == value(values, "trainmon_infiniband_link_downed_total", device="mlx5_3")
        else:
            def latency(vs: dict[SampleKey, float], device: str) -> float:
                return (value(vs, "trainmon_nvme_read_time_seconds_total", device=device)
                        / value(vs, "trainmon_nvme_reads_completed_total", device=device))
            assert latency(healthy, "nvme3n1") < 0.001
            assert latency(values, "nvme3n1") > 0.05
            assert latency(values, "nvme3n2") < 0.001
        clock.now = 0.0


def test_storage_slow_slows_the_lustre_mount_and_not_the_nfs_one(tmp_path: Path) -> None:
    """The job's dataset streams from /lustre; under the incident its RPCs take 20x longer and time out."""
    clock = Clock()
    tree = DemoTree(tmp_path, Plan("storage-slow", after=10, clock=clock), clock)
    traffic = Traffic(read_bytes=GIB, written_bytes=0, allreduce_bytes=[0] * 8)
    advanced(tree, clock, traffic, 5)
    healthy = read(tree)
    advanced(tree, clock, traffic, 10)
    values = read(tree)

    def latency(vs: dict[SampleKey, float], mount: str) -> float:
        seconds = value(vs, "trainmon_fs_rpc_seconds_total", mount=mount)
        return seconds / value(vs, "trainmon_fs_rpcs_total", mount=mount)

    assert 1 == value(healthy, "trainmon_fs_info", mount="/lustre", fstype="lustre")
    assert 5 * GIB == value(healthy, "trainmon_fs_read_bytes_total", mount="/lustre")
    assert latency(healthy, "/lustre") < 0.005
    assert 0 == value(healthy, "trainmon_fs_rpc_timeouts_total", mount="/lustre")
    assert latency(values, "/lustre") > 0.02
    assert value(values, "trainmon_fs_rpc_timeouts_total", mount="/lustre") > 0
    assert latency(values, "/home") < 0.001


def test_each_gpu_sits_on_a_pcie_switch_with_its_rails_hca(tmp_path: Path) -> None:
    tree = DemoTree(tmp_path, Plan())
    resources = NodeResources()
    resources.gpus.publish(InventoryGpu(index=i, uuid=f"GPU-{i}", pids=(), pci_bus_id=f"00000000:{bus.upper()}:00.0")
                           for i, bus in enumerate(BUS_IDS))

    values = samples_of(InfinibandCollector(Settings(sysfs=tree.sys), resources).collect().families)

    affinity = {(dict(ls)["gpu"], dict(ls)["device"], dict(ls)["path"]) for (n, ls) in values
                if n == "trainmon_gpu_nic_affinity_info"}
    assert {(str(i), f"mlx5_{i}", "PIX") for i in range(8)} == affinity
