from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.trees import (
    DEFAULT_HW_COUNTERS,
    DEFAULT_PORT_COUNTERS,
    IbDevice,
    IbPort,
    break_file_as_dangling_symlink,
    break_file_as_directory,
    write,
    write_infiniband,
)
from trainmon.parsers.infiniband import PortState
from trainmon.roots import Root
from trainmon.sysfs.infiniband import HwCounter, InfinibandPort, PortCounter, infiniband_class


def sysfs(tmp_path: Path, devices: list[IbDevice]) -> Root:
    write_infiniband(tmp_path / "sys", devices)
    return Root(tmp_path / "sys", "sysfs")


def test_a_port_reads_as_one_typed_record(tmp_path: Path) -> None:
    root = sysfs(tmp_path, [IbDevice("mlx5_0", ports=[IbPort("mlx5_0", hw_counters=dict(DEFAULT_HW_COUNTERS))])])

    (device,) = infiniband_class(root)

    assert ("mlx5_0", "MT_0000000838", "28.39.1002", "MT4129", ()) == (
        device.name, device.board_id, device.firmware_version, device.hca_type, device.skipped)
    expected = InfinibandPort(
        device="mlx5_0", port="1", state=PortState(4, "ACTIVE"), physical_state=PortState(5, "LinkUp"),
        rate_bytes_per_second=50_000_000_000, link_layer="InfiniBand",
        counters={PortCounter(name): value for name, value in DEFAULT_PORT_COUNTERS.items()},
        hw_counters={HwCounter(name): value for name, value in DEFAULT_HW_COUNTERS.items()}, skipped=())
    assert (expected,) == device.ports


def test_the_real_kernel_samples_read_without_skips(fixtures: Path) -> None:
    devices = infiniband_class(Root(fixtures / "procfs" / "sys", "sysfs"))

    assert ["hfi1_0", "mlx4_0", "mlx5_0"] == [d.name for d in devices]
    hfi1, mlx4, mlx5 = devices
    assert (None, ()) == (hfi1.hca_type, hfi1.skipped_with_ports)  # hfi1 has no hca_type: not a skip
    assert ["1", "2"] == [p.port for p in mlx4.ports]
    assert (PortState(4, "ACTIVE"), 5_000_000_000) == (mlx4.ports[1].state, mlx4.ports[1].rate_bytes_per_second)
    assert ("SM_1141000001000", "2.31.5050", "MT4099") == (mlx4.board_id, mlx4.firmware_version, mlx4.hca_type)
    assert 18126345378 == mlx5.ports[0].counters[PortCounter.PORT_RCV_DATA]  # words, as the kernel counts
    assert 8109 == mlx5.ports[0].hw_counters[HwCounter.RESP_CQE_ERROR]
    assert {} == mlx4.ports[0].hw_counters


def test_each_unavailable_attribute_is_none_and_listed_with_its_port(tmp_path: Path) -> None:
    root = sysfs(tmp_path, [IbDevice("mlx5_0", ports=[IbPort("mlx5_0", hw_counters={"out_of_buffer": 5}),
                                                      IbPort("mlx5_0", port=2)])])
    port_dir = root.join("class", "infiniband", "mlx5_0", "ports", "1")
    break_file_as_directory(port_dir / "counters" / "symbol_error")
    write(port_dir / "counters" / "port_xmit_wait", "N/A (no PMA)\n")
    break_file_as_dangling_symlink(port_dir / "hw_counters" / "out_of_buffer")
    write(port_dir / "rate", "9" * 5000 + "\n")
    write(port_dir / "counters" / "not_a_known_counter", "garbage\n")  # not read, so not a skip

    port, other = infiniband_class(root)[0].ports

    assert (None, "InfiniBand") == (port.rate_bytes_per_second, port.link_layer)
    assert PortCounter.SYMBOL_ERROR not in port.counters and PortCounter.PORT_XMIT_WAIT not in port.counters
    assert 1 == port.counters[PortCounter.LINK_DOWNED]
    assert {} == port.hw_counters
    assert ("mlx5_0/ports/1/rate: over 4096 bytes",
            "mlx5_0/ports/1/counters/port_xmit_wait: unparsable 'N/A (no PMA)'",
            "mlx5_0/ports/1/counters/symbol_error: EISDIR",
            "mlx5_0/ports/1/hw_counters/out_of_buffer: ENOENT") == port.skipped
    assert () == other.skipped and 7 == other.counters[PortCounter.SYMBOL_ERROR]


def test_device_skips_come_after_its_ports(tmp_path: Path) -> None:
    """The order /api/v1/status has always listed them in: each port's attributes, then the device's."""
    root = sysfs(tmp_path, [IbDevice("mlx5_0", ports=[IbPort("mlx5_0", counters=None)])])
    device_dir = root.join("class", "infiniband", "mlx5_0")
    write(device_dir / "fw_ver", "28.39\x1b[2J\n")
    break_file_as_directory(device_dir / "hca_type")

    (device,) = infiniband_class(root)

    assert (None, None, "MT_0000000838") == (device.firmware_version, device.hca_type, device.board_id)
    assert ("mlx5_0/fw_ver: not a name '28.39\\x1b[2J'", "mlx5_0/hca_type: EISDIR") == device.skipped
    assert ("mlx5_0/ports/1/counters: ENOENT", *device.skipped) == device.skipped_with_ports


def test_a_device_whose_ports_cannot_be_listed_keeps_its_identity(tmp_path: Path) -> None:
    root = sysfs(tmp_path, [IbDevice("mlx5_0")])
    write(root.join("class", "infiniband", "mlx5_0", "ports"), "not a directory\n")

    (device,) = infiniband_class(root)

    assert ((), "MT4129", ("mlx5_0/ports: ENOTDIR",)) == (device.ports, device.hca_type, device.skipped)


def test_ports_are_in_numeric_order_and_devices_filtered_before_reading(tmp_path: Path) -> None:
    root = sysfs(tmp_path, [IbDevice("mlx5_0", ports=[IbPort("mlx5_0", port=n) for n in (10, 2, 1)]),
                            IbDevice("irdma0")])
    break_file_as_directory(root.join("class", "infiniband", "irdma0", "board_id"))  # never read

    (device,) = infiniband_class(root, include=re.compile("mlx5"))

    assert ["1", "2", "10"] == [p.port for p in device.ports]


def test_a_tree_without_the_class_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        infiniband_class(Root(tmp_path, "sysfs"))


def test_a_counter_name_is_its_file_name() -> None:
    assert "VL15_dropped" == str(PortCounter.VL15_DROPPED) == f"{PortCounter.VL15_DROPPED}"
    assert Path("counters/VL15_dropped") == Path("counters") / PortCounter.VL15_DROPPED
