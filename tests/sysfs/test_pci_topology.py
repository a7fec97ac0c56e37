"""Each GPU's NCCL network port from a synthetic PCIe tree: real directories, numa_node files and the kernel's
links (bus/pci/devices/<address>, class/infiniband/<hca>/device), laid out as on HGX/DGX-class nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.trees import write_pci_device
from trainmon.roots import Root
from trainmon.sysfs.pci_topology import Gpu, NicPort, hca_allows, nic_affinity, place

# One PCIe switch (upstream port, downstream ports) per GPU and HCA pair under each root port, two per socket:
# a DGX H100's layout, shortened to four GPUs.
SWITCHES = (("pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:17:01.0", 0),
            ("pci0000:35", "0000:35:01.0", "0000:36:00.0", "0000:37:00.0", "0000:37:01.0", 0),
            ("pci0000:95", "0000:95:01.0", "0000:96:00.0", "0000:97:00.0", "0000:97:01.0", 1),
            ("pci0000:b5", "0000:b5:01.0", "0000:b6:00.0", "0000:b7:00.0", "0000:b7:01.0", 1))


def gpu(sys: Path, index: int, under: str, numa: int = 0) -> Gpu:
    address = under.rsplit("/", 1)[1]
    write_pci_device(sys, under, f"bus/pci/devices/{address}", numa)
    return Gpu(index, f"GPU-{index}", f"0000{address.upper()}")  # NVML's 8-digit domain


def hca(sys: Path, name: str, under: str, numa: int = 0) -> NicPort:
    write_pci_device(sys, under, f"class/infiniband/{name}/device", numa)
    return NicPort(name, "1")


def picks(sys: Path, gpus: list[Gpu], ports: list[NicPort]) -> dict[int, tuple[str, str, int]]:
    return {a.gpu.index: (a.nic.device, a.path, a.candidates) for a in nic_affinity(Root(sys, "sysfs"), gpus, ports)}


def dgx(sys: Path) -> tuple[list[Gpu], list[NicPort]]:
    gpus, ports = [], []
    for i, (root, port, upstream, down_gpu, down_hca, numa) in enumerate(SWITCHES):
        bus = int(down_gpu[5:7], 16) + 1
        gpus.append(gpu(sys, i, f"{root}/{port}/{upstream}/{down_gpu}/0000:{bus:02x}:00.0", numa))
        ports.append(hca(sys, f"mlx5_{i}", f"{root}/{port}/{upstream}/{down_hca}/0000:{bus + 1:02x}:00.0", numa))
    return gpus, ports


def test_each_gpu_sends_by_the_hca_on_its_own_pcie_switch(tmp_path: Path) -> None:
    gpus, ports = dgx(tmp_path)

    assert {i: (f"mlx5_{i}", "PIX", 1) for i in range(4)} == picks(tmp_path, gpus, list(reversed(ports)))


def test_a_gpu_without_an_hca_on_its_switch_uses_one_on_its_socket_not_across(tmp_path: Path) -> None:
    gpus, ports = dgx(tmp_path)
    lonely = gpu(tmp_path, 4, "pci0000:55/0000:55:01.0/0000:56:00.0/0000:57:00.0/0000:58:00.0", numa=0)

    # mlx5_0 and mlx5_1 hang off other root complexes of the same socket: through the CPU, both equally close
    assert ("mlx5_0", "PHB", 2) == picks(tmp_path, [*gpus, lonely], ports)[4]


def test_hcas_shared_by_gpus_of_one_switch_spread_as_nccl_spreads_them(tmp_path: Path) -> None:
    under = "pci0000:15/0000:15:01.0/0000:16:00.0"
    gpus = [gpu(tmp_path, i, f"{under}/0000:17:0{i}.0/0000:{0x18 + i:02x}:00.0") for i in range(2)]
    ports = [hca(tmp_path, f"mlx5_{i}", f"{under}/0000:17:0{i + 4}.0/0000:{0x20 + i:02x}:00.0") for i in range(2)]

    # two GPUs, two NICs, one switch: GPU 0 -> NIC mirror(0) = 0, GPU 1 -> mirror(1) = 1 (of 2)
    assert {0: ("mlx5_0", "PIX", 2), 1: ("mlx5_1", "PIX", 2)} == picks(tmp_path, gpus, ports)


def test_a_switch_below_a_switch_is_pxb(tmp_path: Path) -> None:
    top = "pci0000:15/0000:15:01.0/0000:16:00.0"
    nested = gpu(tmp_path, 0, f"{top}/0000:17:00.0/0000:18:00.0/0000:19:00.0/0000:1a:00.0")
    port = hca(tmp_path, "mlx5_0", f"{top}/0000:17:01.0/0000:20:00.0")

    assert {0: ("mlx5_0", "PXB", 1)} == picks(tmp_path, [nested], [port])


def test_without_numa_nodes_the_root_complex_is_the_cpu(tmp_path: Path) -> None:
    near = gpu(tmp_path, 0, "pci0000:15/0000:15:01.0/0000:16:00.0", numa=-1)
    far = hca(tmp_path, "mlx5_0", "pci0000:95/0000:95:01.0/0000:96:00.0", numa=-1)
    same_root = hca(tmp_path, "mlx5_1", "pci0000:15/0000:15:02.0/0000:20:00.0", numa=-1)

    assert {0: ("mlx5_1", "PHB", 1)} == picks(tmp_path, [near], [far, same_root])


def test_devices_outside_the_pci_tree_are_left_out(tmp_path: Path) -> None:
    gpus, ports = dgx(tmp_path)
    (tmp_path / "devices" / "virtual" / "net" / "rxe0").mkdir(parents=True)  # soft RoCE: no PCI device
    write_pci_device(tmp_path, "virtual/net/rxe0", "class/infiniband/rxe0/device")
    unknown = Gpu(9, "GPU-9", "00000000:EE:00.0")  # NVML knows it, sysfs has no such address

    assert picks(tmp_path, [*gpus, unknown], [NicPort("rxe0", "1")]) == {}
    assert place(Root(tmp_path, "sysfs"), "class", "infiniband", "rxe0", "device") is None
    assert {i: f"mlx5_{i}" for i in range(4)} == {
        i: nic for i, (nic, _, _) in picks(tmp_path, [*gpus, unknown], [*ports, NicPort("rxe0", "1")]).items()}


def test_the_jobs_nccl_ib_hca_limits_the_ports_as_nccl_matches_it(tmp_path: Path) -> None:
    gpus, ports = dgx(tmp_path)
    with_hca = [Gpu(g.index, g.uuid, g.pci_bus_id, ib_hca) for g, ib_hca in
                zip(gpus, ("^=mlx5_0", "=mlx5_3:1", "mlx5", "=mlx5_2:2"), strict=True)]

    assert {0: ("mlx5_1", "PHB", 1),  # its own switch's HCA excluded: the other one on its socket
            1: ("mlx5_3", "SYS", 1),  # only mlx5_3 allowed, across the sockets
            2: ("mlx5_2", "PIX", 1)} == picks(tmp_path, with_hca, ports)  # GPU 3: no port 2 anywhere, no NIC


@pytest.mark.parametrize(("spec", "allowed"), [
    ("", {"mlx5_0:1", "mlx5_10:1", "mlx5_1:2", "ibp12s0:1"}),
    ("mlx5_1", {"mlx5_10:1", "mlx5_1:2"}),  # a prefix
    ("=mlx5_1", {"mlx5_1:2"}),
    ("mlx5_1:2,ibp", {"mlx5_1:2", "ibp12s0:1"}),
    ("^mlx5", {"ibp12s0:1"}),
    ("^=mlx5_1:2,mlx5_0", {"mlx5_10:1", "ibp12s0:1"}),  # `=` applies to the whole list
])
def test_hca_allows_reads_nccls_syntax(spec: str, allowed: set[str]) -> None:
    ports = [NicPort("mlx5_0", "1"), NicPort("mlx5_10", "1"), NicPort("mlx5_1", "2"), NicPort("ibp12s0", "1")]

    assert allowed == {f"{p.device}:{p.port}" for p in ports if hca_allows(spec)(p)}
