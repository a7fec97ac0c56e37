"""The demo node's procfs/sysfs tree: 16 NVMe namespaces, 8 mlx5 InfiniBand ports, a Lustre and an NFS mount
(`trainmon.demo.filesystems`), as the kernel and the clients lay them out, advanced with the simulated job's
traffic so the real NVMe, InfiniBand and fs collectors read it.

Files are replaced atomically (written under `scratch/`, then renamed), so a collector never reads half
a value, and at most once per `write_every` seconds (the daemon's collection interval): the job advances the
counters every second, and a file written twice between two reads of it was written once for nothing.
Counters only grow, except on the incident's device.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trainmon.demo.filesystems import DemoFileSystems
from trainmon.simulation.incidents import DOWN_PORT, SLOW_NAMESPACE, Plan
from trainmon.simulation.node import BUS_IDS
from trainmon.sysfs.infiniband import HwCounter, PortCounter

CONTROLLERS = 8
NAMESPACES_PER_CONTROLLER = 2  # 16 namespaces: nvme0n1 … nvme7n2
IB_PORTS = 8  # one 400G rail per GPU: mlx5_0 … mlx5_7, port 1
GPUS_PER_SOCKET = 4
# A GPU's PCI device whose link counts a correctable AER error now and then (a trickle, not an alert).
AER_DEVICE, AER_EVERY_S = "0000:18:00.0", 90.0
READ_REQUEST_BYTES = 128 * 1024
WRITE_REQUEST_BYTES = 256 * 1024
READ_MS, WRITE_MS, SLOW_READ_MS = 0.12, 0.05, 150.0  # per request
LOG_WRITE_BPS = 64 * 1024  # per namespace: logs and metrics between checkpoints
IB_MTU = 4096
ACTIVE, DOWN = ("4: ACTIVE", "5: LinkUp"), ("1: DOWN", "3: Disabled")
# diskstats columns after major, minor and name (the 20-field format of kernel 5.5+)
DISKSTATS = ("reads_completed", "reads_merged", "read_sectors", "read_time_ms", "writes_completed", "writes_merged",
             "write_sectors", "write_time_ms", "io_in_progress", "io_time_ms", "io_weighted_time_ms",
             "discards_completed", "discards_merged", "discard_sectors", "discard_time_ms", "flushes_completed",
             "flush_time_ms")


@dataclass(frozen=True, slots=True)
class Traffic:
    """What the job moved since the last tick: dataset reads, checkpoint writes, all-reduce bytes per rank and
    the GPU time of those all-reduces' kernels (waiting for peers included, as NCCL Inspector times them)."""

    read_bytes: int
    written_bytes: int
    allreduce_bytes: Sequence[int]
    allreduce_seconds: Sequence[float] = ()


@dataclass(slots=True)
class _Namespace:
    name: str
    minor: int
    stats: dict[str, float] = field(default_factory=lambda: dict.fromkeys(DISKSTATS, 0.0))


@dataclass(slots=True)
class _Port:
    device: str
    counters: dict[str, int] = field(default_factory=dict)
    hw_counters: dict[str, int] = field(default_factory=dict)
    down: bool = False


def _initial_port_counters(seed: int) -> dict[str, int]:
    counters = {str(name): 0 for name in PortCounter}
    counters.update(symbol_error=seed % 3, link_error_recovery=1, port_rcv_errors=seed % 2)
    return counters


class DemoTree:
    """Writes the tree under `root` (`root/proc`, `root/sys`) and advances it with `advance(traffic)`, writing
    the counters at most every `write_every` seconds."""

    def __init__(self, root: Path, plan: Plan, clock: Callable[[], float] = time.monotonic,
                 write_every: float = 0.0) -> None:
        self.proc = root / "proc"
        self.sys = root / "sys"
        self._scratch = root / "scratch"
        self._plan = plan
        self._clock = clock
        self._last = clock()
        self._writes = 0
        self._write_every = write_every
        self._made: set[Path] = set()
        self._written: dict[Path, str] = {}
        self._namespaces = [_Namespace(f"nvme{c}n{n + 1}", c * NAMESPACES_PER_CONTROLLER + n)
                            for c in range(CONTROLLERS) for n in range(NAMESPACES_PER_CONTROLLER)]
        self._ports = [_Port(f"mlx5_{i}", _initial_port_counters(i),
                             {**dict.fromkeys(HwCounter, 0), "lifespan": 12}) for i in range(IB_PORTS)]
        self._scratch.mkdir(parents=True)
        self._started = self._last
        self._write_identities()
        # the simulated ranks report from this process: the daemon looks for the sender under this procfs, and
        # a rank whose process is not there is gone
        (self.proc / str(os.getpid())).mkdir(parents=True)
        self._write_pcie_tree()
        self._filesystems = DemoFileSystems(self.proc, plan, self._put)
        self._write_counters()
        self._written_at = self._last

    def advance(self, traffic: Traffic) -> None:
        now = self._clock()
        dt, self._last = now - self._last, now
        for namespace in self._namespaces:
            self._advance_namespace(namespace, traffic, dt)
        for rank, port in enumerate(self._ports):
            self._advance_port(port, traffic.allreduce_bytes[rank] if rank < len(traffic.allreduce_bytes) else 0)
        self._filesystems.advance(traffic.read_bytes, traffic.written_bytes)
        if now - self._written_at >= self._write_every:
            self._write_counters()
            self._written_at = now

    def _write_counters(self) -> None:
        self._write_diskstats()
        self._write_aer()
        for port in self._ports:
            self._write_port(port)
        self._filesystems.write()

    def _advance_namespace(self, namespace: _Namespace, traffic: Traffic, dt: float) -> None:
        stats, count = namespace.stats, len(self._namespaces)
        read_bytes = traffic.read_bytes / count  # the dataset is striped over every namespace
        written = traffic.written_bytes / count + LOG_WRITE_BPS * dt
        reads, writes = read_bytes / READ_REQUEST_BYTES, written / WRITE_REQUEST_BYTES
        slow = namespace.name == SLOW_NAMESPACE and self._plan.active("nvme-slow")
        read_ms, write_ms = reads * (SLOW_READ_MS if slow else READ_MS), writes * WRITE_MS
        stats["reads_completed"] += reads
        stats["reads_merged"] += reads / 8
        stats["read_sectors"] += read_bytes / 512
        stats["read_time_ms"] += read_ms
        stats["writes_completed"] += writes
        stats["writes_merged"] += writes / 4
        stats["write_sectors"] += written / 512
        stats["write_time_ms"] += write_ms
        stats["io_in_progress"] = 2 if reads > 0 else 0
        stats["io_time_ms"] += min(dt * 1000, read_ms + write_ms)
        stats["io_weighted_time_ms"] += read_ms + write_ms
        stats["flushes_completed"] += writes / 16
        stats["flush_time_ms"] += writes / 16 * 0.3
        if traffic.written_bytes:  # the checkpoint rotation trims the old one
            stats["discards_completed"] += 1
            stats["discard_sectors"] += 2048
            stats["discard_time_ms"] += 0.4

    def _advance_port(self, port: _Port, allreduce_bytes: int) -> None:
        if self._plan.active("ib-down") and port.device == f"mlx5_{DOWN_PORT}" and not port.down:
            port.down = True
            port.counters["link_downed"] += 1
        if port.down:
            return
        packets = allreduce_bytes // IB_MTU
        c, hw = port.counters, port.hw_counters
        c["port_xmit_data"] += allreduce_bytes // 4  # 32-bit words
        c["port_rcv_data"] += allreduce_bytes // 4
        for name in ("port_xmit_packets", "port_rcv_packets", "unicast_xmit_packets", "unicast_rcv_packets"):
            c[name] += packets
        c["port_xmit_wait"] += packets // 200  # a little congestion on the rail
        hw["rx_write_requests"] += packets // 16  # NCCL's RDMA writes
        hw["rx_read_requests"] += packets // 512

    def _write_identities(self) -> None:
        for c in range(CONTROLLERS):
            base = self.sys / "class" / "nvme" / f"nvme{c}"
            self._put(base / "model", "SAMSUNG MZQL23T8HCLS-00A07".ljust(40) + "\n")
            self._put(base / "serial", f"S64HNE0R{c:06d}".ljust(20) + "\n")
            self._put(base / "firmware_rev", "GDC5302Q\n")
            self._put(base / "state", "live\n")
            for n in range(NAMESPACES_PER_CONTROLLER):
                self._put(base / f"nvme{c}n{n + 1}" / "size", "3750738264\n")
        for port in self._ports:
            base = self.sys / "class" / "infiniband" / port.device
            self._put(base / "board_id", "MT_0000000838\n")
            self._put(base / "fw_ver", "28.39.1002\n")
            self._put(base / "hca_type", "MT4129\n")
            self._put(base / "ports" / "1" / "rate", "400 Gb/sec (4X NDR)\n")
            self._put(base / "ports" / "1" / "link_layer", "InfiniBand\n")

    def _write_pcie_tree(self) -> None:
        """A DGX H100's PCIe layout: each GPU and its rail's HCA (mlx5_<i>) on one PCIe switch below a root
        port, four GPUs a socket; linked as the kernel links them (bus/pci/devices/<address>,
        class/infiniband/<hca>/device)."""
        for i, bus in enumerate(BUS_IDS):
            b = int(bus, 16)
            switch = f"pci0000:{b - 3:02x}/0000:{b - 3:02x}:01.0/0000:{b - 2:02x}:00.0"
            for downstream, address, link in (
                    (0, f"0000:{b:02x}:00.0", self.sys / "bus" / "pci" / "devices" / f"0000:{b:02x}:00.0"),
                    (1, f"0000:{b + 1:02x}:00.0", self.sys / "class" / "infiniband" / f"mlx5_{i}" / "device")):
                device = self.sys / "devices" / switch / f"0000:{b - 1:02x}:{downstream:02x}.0" / address
                self._put(device / "numa_node", f"{i // GPUS_PER_SOCKET}\n")
                link.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(os.path.relpath(device, link.parent), link)

    def _write_aer(self) -> None:
        base = self.sys / "bus" / "pci" / "devices" / AER_DEVICE
        if not (base / "vendor").exists():
            self._put(base / "vendor", "0x10de\n")
            self._put(base / "aer_dev_fatal", "DLP 0\nCmpltTO 0\nTOTAL_ERR_FATAL 0\n")
        errors = int((self._last - self._started) / AER_EVERY_S) + 1
        self._put(base / "aer_dev_correctable", f"RxErr {errors}\nBadTLP 0\nTOTAL_ERR_COR {errors}\n")

    def _write_diskstats(self) -> None:
        lines = [f" 259 {ns.minor:7d} {ns.name} " + " ".join(str(int(ns.stats[k])) for k in DISKSTATS)
                 for ns in self._namespaces]
        lines += ["   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0"]
        self._put(self.proc / "diskstats", "\n".join(lines) + "\n")

    def _write_port(self, port: _Port) -> None:
        base = self.sys / "class" / "infiniband" / port.device / "ports" / "1"
        state, physical = DOWN if port.down else ACTIVE
        self._put(base / "state", state + "\n")
        self._put(base / "phys_state", physical + "\n")
        for name, value in port.counters.items():
            self._put(base / "counters" / name, f"{value}\n")
        for name, value in port.hw_counters.items():
            self._put(base / "hw_counters" / name, f"{value}\n")

    def _put(self, path: Path, text: str) -> None:
        """Replaces `path` whole (a reader never sees half a file); unchanged text is not written again. Eighteen
        demos write about a hundred files each per collection in the test suite: this is much of a demo's CPU."""
        if self._written.get(path) == text:
            return
        if path.parent not in self._made:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._made.add(path.parent)
        self._writes += 1
        staged = f"{self._scratch}/{self._writes}"
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        os.replace(staged, path)
        self._written[path] = text
