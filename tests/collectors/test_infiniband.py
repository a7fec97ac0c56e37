from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.catalog import assert_declared
from tests.helpers.metrics import registry_of
from tests.helpers.trees import (
    DEFAULT_HW_COUNTERS,
    IbDevice,
    IbPort,
    break_file_as_dangling_symlink,
    break_file_as_directory,
    replace_with_fifo,
    write_infiniband,
    write_pci_device,
)
from trainmon.catalog import infiniband
from trainmon.collectors.base import NodeResources
from trainmon.collectors.infiniband import HW_COUNTERS, PORT_COUNTERS, InfinibandCollector
from trainmon.errors import CollectorError, NoData
from trainmon.gpu_inventory import InventoryGpu
from trainmon.settings import Settings
from trainmon.sysfs.infiniband import HwCounter, PortCounter


def make_tree(tmp_path: Path) -> Settings:
    sys = tmp_path / "sys"
    write_infiniband(sys, [
        IbDevice("mlx5_0", ports=[IbPort("mlx5_0", hw_counters=dict(DEFAULT_HW_COUNTERS))]),
        IbDevice("mlx5_1", ports=[IbPort("mlx5_1", state="1: DOWN", phys_state="3: Disabled", rate="10 Gb/sec (4X)")]),
        IbDevice("mlx5_2", ports=[IbPort("mlx5_2", link_layer="Ethernet", rate="200 Gb/sec (4X HDR)")]),  # RoCE
    ])
    return Settings(sysfs=sys)


def collect(settings: Settings):  # type: ignore[no-untyped-def]
    collection = InfinibandCollector(settings, NodeResources()).collect()
    return collection, registry_of(collection.families)


def test_data_counters_are_words_times_four(tmp_path: Path) -> None:
    _, registry = collect(make_tree(tmp_path))
    port = {"device": "mlx5_0", "port": "1"}

    assert 4_000_000 == registry.get_sample_value("trainmon_infiniband_port_data_received_bytes_total", port)
    assert 8_000_000 == registry.get_sample_value("trainmon_infiniband_port_data_transmitted_bytes_total", port)
    assert 30_000 == registry.get_sample_value("trainmon_infiniband_port_packets_received_total", port)
    assert 500 == registry.get_sample_value("trainmon_infiniband_port_transmit_wait_total", port)
    assert 1 == registry.get_sample_value("trainmon_infiniband_link_downed_total", port)


def test_state_rate_and_identity(tmp_path: Path) -> None:
    _, registry = collect(make_tree(tmp_path))

    assert 4 == registry.get_sample_value("trainmon_infiniband_state_id", {"device": "mlx5_0", "port": "1"})
    assert 1 == registry.get_sample_value("trainmon_infiniband_state_id", {"device": "mlx5_1", "port": "1"})
    assert 3 == registry.get_sample_value("trainmon_infiniband_physical_state_id", {"device": "mlx5_1", "port": "1"})
    assert 50e9 == registry.get_sample_value("trainmon_infiniband_rate_bytes_per_second",
                                             {"device": "mlx5_0", "port": "1"})
    assert 1 == registry.get_sample_value("trainmon_infiniband_info", {
        "device": "mlx5_0", "board_id": "MT_0000000838", "firmware_version": "28.39.1002", "hca_type": "MT4129"})


def test_roce_devices_are_included(tmp_path: Path) -> None:
    _, registry = collect(make_tree(tmp_path))

    assert 1 == registry.get_sample_value("trainmon_infiniband_port_info", {
        "device": "mlx5_2", "port": "1", "link_layer": "Ethernet", "state": "ACTIVE", "physical_state": "LinkUp"})
    assert 25e9 == registry.get_sample_value("trainmon_infiniband_rate_bytes_per_second",
                                             {"device": "mlx5_2", "port": "1"})


def test_hw_counters(tmp_path: Path) -> None:
    _, registry = collect(make_tree(tmp_path))
    port = {"device": "mlx5_0", "port": "1"}

    assert 5 == registry.get_sample_value("trainmon_infiniband_out_of_buffer_drops_total", port)
    assert 3 == registry.get_sample_value("trainmon_infiniband_local_ack_timeout_errors_total", port)
    assert 10 == registry.get_sample_value("trainmon_infiniband_lifespan_seconds", port)
    assert registry.get_sample_value("trainmon_infiniband_out_of_buffer_drops_total",
                                     {"device": "mlx5_1", "port": "1"}) is None


@pytest.mark.parametrize("breakage", [
    pytest.param(lambda p: p.write_text("N/A (no PMA)\n"), id="no-pma"),
    pytest.param(break_file_as_directory, id="unreadable"),
    pytest.param(break_file_as_dangling_symlink, id="dangling-symlink"),
    pytest.param(lambda p: p.write_text("garbage\n"), id="garbage"),
    pytest.param(lambda p: p.write_text("9" * 5000 + "\n"), id="over-a-page"),     # int() of it raises
    pytest.param(lambda p: p.write_text("9" * 400 + "\n"), id="over-64-bits"),    # float() of it raises
    pytest.param(replace_with_fifo, id="fifo"),
])
def test_one_broken_counter_drops_one_series(tmp_path: Path, breakage) -> None:  # type: ignore[no-untyped-def]
    """The port, its other counters and the other devices keep serving; the skip is reported."""
    settings = make_tree(tmp_path)
    broken = settings.sysfs / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "counters" / "symbol_error"
    breakage(broken)

    collection, registry = collect(settings)

    port = {"device": "mlx5_0", "port": "1"}
    assert registry.get_sample_value("trainmon_infiniband_symbol_error_total", port) is None
    assert 7 == registry.get_sample_value("trainmon_infiniband_symbol_error_total", {"device": "mlx5_1", "port": "1"})
    assert 1 == registry.get_sample_value("trainmon_infiniband_link_downed_total", port)
    assert 1 == len(collection.skipped)
    assert collection.skipped[0].startswith("mlx5_0/ports/1/counters/symbol_error: ")


def test_a_port_without_counters_directory_keeps_its_state(tmp_path: Path) -> None:
    sys = tmp_path / "sys"
    write_infiniband(sys, [IbDevice("irdma0", ports=[IbPort("irdma0", counters=None, link_layer="Ethernet")])])

    collection, registry = collect(Settings(sysfs=sys))

    assert 4 == registry.get_sample_value("trainmon_infiniband_state_id", {"device": "irdma0", "port": "1"})
    assert registry.get_sample_value("trainmon_infiniband_port_data_received_bytes_total",
                                     {"device": "irdma0", "port": "1"}) is None
    assert ["irdma0/ports/1/counters: ENOENT"] == list(collection.skipped)


def test_a_node_without_infiniband_has_no_data(tmp_path: Path) -> None:
    with pytest.raises(NoData):
        InfinibandCollector(Settings(sysfs=tmp_path), NodeResources()).collect()


def test_real_kernel_samples(fixtures: Path) -> None:
    """The procfs project's samples (hfi1, dual-port mlx4, mlx5 with hw_counters) read without skips."""
    collection, registry = collect(Settings(sysfs=fixtures / "procfs" / "sys"))

    assert () == collection.skipped
    assert 18126345378 * 4 == registry.get_sample_value("trainmon_infiniband_port_data_received_bytes_total",
                                                        {"device": "mlx5_0", "port": "1"})
    assert 8109 == registry.get_sample_value("trainmon_infiniband_resp_cqes_errors_total",
                                             {"device": "mlx5_0", "port": "1"})
    assert 4 == len(collection.found)


def test_an_over_long_or_unprintable_name_drops_that_label_only(tmp_path: Path) -> None:
    settings = make_tree(tmp_path)
    device = settings.sysfs / "class" / "infiniband" / "mlx5_0"
    (device / "board_id").write_text("B" * 5000 + "\n")
    (device / "fw_ver").write_text("28.39\x1b[2J\n")

    collection, registry = collect(settings)

    assert 1 == registry.get_sample_value("trainmon_infiniband_info", {
        "device": "mlx5_0", "board_id": "", "firmware_version": "", "hca_type": "MT4129"})
    assert ["mlx5_0/board_id: over 4096 bytes", "mlx5_0/fw_ver: not a name '28.39\\x1b[2J'"] == list(collection.skipped)
    assert 4 == registry.get_sample_value("trainmon_infiniband_state_id", {"device": "mlx5_0", "port": "1"})


def test_a_sysfs_root_that_does_not_exist_is_a_failure_naming_the_flag(tmp_path: Path) -> None:
    with pytest.raises(CollectorError, match=f"--sysfs {tmp_path / 'nope'}: not a directory") as raised:
        InfinibandCollector(Settings(sysfs=tmp_path / "nope"), NodeResources()).collect()
    assert not isinstance(raised.value, NoData)


def test_every_counter_file_read_is_served() -> None:
    """A counter the sysfs layer reads but no table row names would be read every cycle for nothing."""
    assert set(PortCounter) == set(PORT_COUNTERS)
    assert set(HwCounter) == set(HW_COUNTERS)


def test_each_gpu_is_joined_to_the_port_nccl_would_send_its_traffic_by(tmp_path: Path) -> None:
    settings = make_tree(tmp_path)
    sys = tmp_path / "sys"
    switch = "pci0000:15/0000:15:01.0/0000:16:00.0"
    write_pci_device(sys, f"{switch}/0000:17:00.0/0000:18:00.0", "bus/pci/devices/0000:18:00.0")
    write_pci_device(sys, f"{switch}/0000:17:01.0/0000:19:00.0", "class/infiniband/mlx5_2/device")
    write_pci_device(sys, "pci0000:95/0000:95:01.0/0000:96:00.0", "class/infiniband/mlx5_0/device", numa_node=1)
    resources = NodeResources()
    resources.gpus.publish([InventoryGpu(index=0, uuid="GPU-a", pids=(), pci_bus_id="00000000:18:00.0")])

    collection = InfinibandCollector(settings, resources).collect()

    assert 1 == registry_of(collection.families).get_sample_value("trainmon_gpu_nic_affinity_info", {
        "gpu": "0", "uuid": "GPU-a", "device": "mlx5_2", "port": "1", "path": "PIX", "candidates": "1",
        "nccl_ib_hca": ""})
    assert "gpu 0 -> mlx5_2/1 (PIX, 1 as close)" in collection.found
    unwritten = {family.name for counter, family in HW_COUNTERS.items() if counter.value not in DEFAULT_HW_COUNTERS}
    assert {family.name for family in infiniband.FAMILIES} - unwritten == assert_declared(collection.families,
                                                                                         "infiniband")

