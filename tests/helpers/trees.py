"""Builders for synthetic procfs and sysfs trees: real files, laid out as the kernel lays them out."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_PORT_COUNTERS: dict[str, int] = {
    "port_rcv_data": 1_000_000, "port_xmit_data": 2_000_000, "port_rcv_packets": 30_000,
    "port_xmit_packets": 40_000, "unicast_rcv_packets": 29_000, "unicast_xmit_packets": 39_000,
    "multicast_rcv_packets": 1_000, "multicast_xmit_packets": 1_000, "port_rcv_errors": 3,
    "port_xmit_discards": 4, "port_rcv_constraint_errors": 0, "port_xmit_constraint_errors": 0,
    "port_rcv_remote_physical_errors": 0, "port_rcv_switch_relay_errors": 0, "port_xmit_wait": 500,
    "symbol_error": 7, "link_downed": 1, "link_error_recovery": 2, "local_link_integrity_errors": 0,
    "excessive_buffer_overrun_errors": 0, "VL15_dropped": 0,
}
DEFAULT_HW_COUNTERS: dict[str, int] = {
    "lifespan": 10, "out_of_buffer": 5, "out_of_sequence": 1, "packet_seq_err": 2, "local_ack_timeout_err": 3,
    "rnr_nak_retry_err": 0, "duplicate_request": 4, "implied_nak_seq_err": 0, "req_cqe_error": 6,
    "resp_cqe_error": 8, "roce_adp_retrans": 9, "rx_read_requests": 100, "rx_write_requests": 200,
}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def diskstats_line(major: int, minor: int, name: str, values: Sequence[int]) -> str:
    return f"{major:4d} {minor:7d} {name} {' '.join(str(v) for v in values)}"


@dataclass
class Disk:
    """One diskstats line; `fields` counts every column, major/minor/name included (14, 18 or 20)."""

    name: str
    seed: int = 1
    fields: int = 20
    minor: int = 0
    major: int = 259

    def values(self) -> list[int]:
        return [self.seed * 1000 + i * 7 for i in range(self.fields - 3)]


@dataclass
class NvmeController:
    name: str
    model: str = "SAMSUNG MZQL23T8HCLS-00A07"
    serial: str = "S64HNE0R000001"
    firmware: str = "GDC5302Q"
    entries: Sequence[str] = ()  # namespace or controller-path entries under the controller


@dataclass
class IbPort:
    device: str
    port: int = 1
    state: str = "4: ACTIVE"
    phys_state: str = "5: LinkUp"
    rate: str = "400 Gb/sec (4X NDR)"
    link_layer: str = "InfiniBand"
    counters: Mapping[str, int | str] | None = field(default_factory=lambda: dict(DEFAULT_PORT_COUNTERS))
    hw_counters: Mapping[str, int | str] | None = None


@dataclass
class IbDevice:
    name: str
    board_id: str = "MT_0000000838"
    fw_ver: str = "28.39.1002"
    hca_type: str = "MT4129"
    ports: Sequence[IbPort] = ()


def write_diskstats(proc: Path, disks: Sequence[Disk], extra_lines: Sequence[str] = ()) -> Path:
    lines = [diskstats_line(d.major, d.minor, d.name, d.values()) for d in disks]
    return write(proc / "diskstats", "\n".join([*lines, *extra_lines]) + "\n")


def write_nvme(sys: Path, controllers: Sequence[NvmeController]) -> None:
    for c in controllers:
        base = sys / "class" / "nvme" / c.name
        write(base / "model", c.model.ljust(40) + "\n")
        write(base / "serial", c.serial.ljust(20) + "\n")
        write(base / "firmware_rev", c.firmware + "\n")
        write(base / "state", "live\n")
        for entry in c.entries:
            write(base / entry / "size", "7501476528\n")


def write_nvme_subsystem(sys: Path, subsystem: str, controllers: Sequence[str], heads: Sequence[str]) -> None:
    """A native-multipath subsystem as the kernel lays it out: its controllers as links, and each
    namespace head (`nvme0n1`) a block device whose `device` is the subsystem itself.

    The controllers are the `write_nvme` ones under class/nvme; every link is relative, as in sysfs.
    """
    base = sys / "devices" / "virtual" / "nvme-subsystem" / subsystem
    write(base / "subsysnqn", f"nqn.2014.08.org.nvmexpress:{subsystem}\n")
    for controller in controllers:
        os.symlink(f"../../../../class/nvme/{controller}", base / controller)
    for head in heads:
        write(base / head / "size", "7501476528\n")
        os.symlink(f"../../{subsystem}", base / head / "device")
        link_block_device(sys, head, f"virtual/nvme-subsystem/{subsystem}/{head}")
    (sys / "class" / "nvme-subsystem").mkdir(parents=True, exist_ok=True)
    os.symlink(f"../../devices/virtual/nvme-subsystem/{subsystem}", sys / "class" / "nvme-subsystem" / subsystem)


def link_block_device(sys: Path, name: str, under_devices: str) -> None:
    """`<sys>/block/<name>` -> `../devices/<under_devices>`, as every block device is reached."""
    (sys / "block").mkdir(parents=True, exist_ok=True)
    os.symlink(f"../devices/{under_devices}", sys / "block" / name)


def write_pci_device(sys: Path, under_devices: str, link: str, numa_node: int = 0) -> None:
    """A PCI device at `<sys>/devices/<under_devices>` (root complex, bridges, device) with its NUMA node, reached
    from `<sys>/<link>` as the kernel links it (bus/pci/devices/<address>, class/infiniband/<hca>/device)."""
    write(sys / "devices" / under_devices / "numa_node", f"{numa_node}\n")
    source = sys / link
    source.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(sys / "devices" / under_devices, source.parent), source)


def write_infiniband(sys: Path, devices: Sequence[IbDevice]) -> None:
    for d in devices:
        base = sys / "class" / "infiniband" / d.name
        write(base / "board_id", d.board_id + "\n")
        write(base / "fw_ver", d.fw_ver + "\n")
        write(base / "hca_type", d.hca_type + "\n")
        for p in d.ports:
            port_dir = base / "ports" / str(p.port)
            for attr in ("state", "phys_state", "rate", "link_layer"):
                write(port_dir / attr, getattr(p, attr) + "\n")
            for sub, values in (("counters", p.counters), ("hw_counters", p.hw_counters)):
                for name, value in (values or {}).items():
                    write(port_dir / sub / name, f"{value}\n")


def pci_device(sys: Path, address: str, vendor: str) -> Path:
    """A PCI function under devices/pci0000:00, reached as the kernel links it from bus/pci/devices."""
    base = sys / "devices" / "pci0000:00" / address
    write(base / "vendor", vendor + "\n")
    (sys / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
    os.symlink(f"../../../devices/pci0000:00/{address}", sys / "bus" / "pci" / "devices" / address)
    return base


def class_device(sys: Path, device_class: str, name: str, address: str) -> None:
    """`class/<device_class>/<name>` on the PCI function `address` (its `device` link names it)."""
    base = sys / "devices" / "pci0000:00" / address / device_class / name
    base.mkdir(parents=True)
    os.symlink("../../../" + address, base / "device")
    (sys / "class" / device_class).mkdir(parents=True, exist_ok=True)
    os.symlink(f"../../devices/pci0000:00/{address}/{device_class}/{name}", sys / "class" / device_class / name)


def break_file_as_directory(path: Path) -> None:
    """Make `path` unreadable as a file, even for root (chmod 000 is not enough): EISDIR on read."""
    if path.exists():
        path.unlink()
    path.mkdir(parents=True)


def replace_with_fifo(path: Path) -> None:
    """A named pipe where a kernel file belongs: a plain open() of it waits for a writer forever."""
    if path.exists():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)


def break_file_as_dangling_symlink(path: Path) -> None:
    if path.exists():
        path.unlink()
    os.symlink(path.parent / "does-not-exist", path)
