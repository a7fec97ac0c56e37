"""Which InfiniBand/RoCE port each GPU's NCCL traffic leaves by, from the PCIe tree in sysfs.

NCCL picks a GPU's network device from its own topology graph (NVIDIA/nccl `src/graph/xml.cc`,
`paths.cc`): it reads the realpath of each GPU's and each HCA's PCI device, walks up the tree two
levels at a time (a PCIe switch is its upstream port; the downstream port between is skipped) until a
root complex, which becomes the CPU of its NUMA node; the path from a GPU to a NIC is then PIX (through
one switch), PXB (several switches), PHB (through the CPU) or SYS (across CPU sockets). The GPU's
"local" NICs are those of its best path type, and channel 0 of a GPU uses
`local[mirror(dev % local GPUs)]` (`ncclTopoGetLocalNet`); further channels spread over the other
local NICs when there are more NICs than GPUs.

This redoes that walk on the same files, keeping only the ports the job's NCCL_IB_HCA allows (as the hook
reports it for the GPU's rank), so it names the NIC NCCL would pick; it does not know NCCL_TOPO_FILE
overrides, the link speeds NCCL also weighs, or a port that was down when the communicator was created.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from trainmon.roots import Root, read_attribute

_BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
PATH_TYPES = ("PIX", "PXB", "PHB", "SYS")  # NCCL's names, best first
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PciPlace:
    """Where a PCI device sits: NCCL's switch nodes above it (nearest first) and its CPU."""

    switches: tuple[str, ...]
    cpu: str  # the NUMA node, or the root complex where the kernel knows no NUMA node


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    uuid: str
    pci_bus_id: str  # NVML's 00000000:18:00.0 or the kernel's 0000:18:00.0
    ib_hca: str = ""  # the NCCL_IB_HCA of the job on it; "" when unset or unknown


@dataclass(frozen=True, slots=True)
class NicPort:
    device: str  # mlx5_0
    port: str


@dataclass(frozen=True, slots=True)
class Affinity:
    gpu: Gpu
    nic: NicPort
    path: str  # one of PATH_TYPES
    candidates: int  # NICs equally close to the GPU: above 1, NCCL spreads its channels over them


def place(sys: Root, *device_path: str) -> PciPlace | None:
    """The place of the PCI device at `device_path` under sysfs (a link into /sys/devices); None when it is not
    a PCI device there."""
    real = os.path.realpath(sys.join(*device_path))
    parts = real.split(os.sep)
    chain = [p for p in parts if _BDF.fullmatch(p)]
    roots = [p for p in parts if p.startswith("pci") and _BDF.fullmatch(p[3:] + ":00.0")]
    if not chain or not roots or chain[-1] != parts[-1]:
        return None
    numa = read_attribute(real + "/numa_node")  # -1 where the platform has none
    known = isinstance(numa, str) and numa.isdigit()
    return PciPlace(switches=tuple(reversed(chain[:-1]))[1::2], cpu=f"numa{numa}" if known else roots[-1])


def path_type(a: PciPlace, b: PciPlace) -> str:
    common = next((i + j for i, s in enumerate(a.switches) for j, t in enumerate(b.switches) if s == t), None)
    if common is not None:
        return "PIX" if common == 0 else "PXB"
    return "PHB" if a.cpu == b.cpu else "SYS"


def nic_affinity(sys: Root, gpus: Sequence[Gpu], ports: Sequence[NicPort]) -> list[Affinity]:
    """Each GPU's channel-0 NIC port, by NCCL's rule; GPUs or ports whose PCI place is unknown are left out."""
    nic_places = {d: place(sys, "class", "infiniband", d, "device") for d in sorted({p.device for p in ports})}
    nics = [(p, nic_places[p.device]) for p in sorted(ports, key=lambda p: (_natural(p.device), _natural(p.port)))]
    placed_nics = [(p, at) for p, at in nics if at is not None]
    gpu_places = [(g, place(sys, "bus", "pci", "devices", _kernel_address(g.pci_bus_id))) for g in gpus]
    placed_gpus = [(g, at) for g, at in gpu_places if at is not None]
    out: list[Affinity] = []
    for gpu, at in placed_gpus:
        allowed = hca_allows(gpu.ib_hca)
        best, local = _local(at, [(p, where) for p, where in placed_nics if allowed(p)])
        if not local:
            continue
        first_nic = next(n for p, n in placed_nics if p == local[0])
        local_gpus = len(_local(first_nic, placed_gpus)[1])
        pick = gpu.index % max(1, local_gpus)
        if len(local) & (len(local) - 1) == 0:
            pick = _mirror(pick, len(local))
        out.append(Affinity(gpu=gpu, nic=local[pick % len(local)], path=best, candidates=len(local)))
    return out


def hca_allows(spec: str) -> Callable[[NicPort], bool]:
    """NCCL_IB_HCA as NCCL matches it (`matchIfList`): `[^][=]device[:port],...`, device names by prefix, or
    whole after `=`, a port only where one is given; `^` inverts; an empty list allows every port."""
    exclude = spec.startswith("^")
    rest = spec.removeprefix("^")
    exact = rest.startswith("=")
    entries = [entry.partition(":")[::2] for entry in rest.removeprefix("=").split(",") if entry.partition(":")[0]]

    def allows(port: NicPort) -> bool:
        listed = any((port.device == name if exact else port.device.startswith(name))
                     and (not number.isdigit() or not port.port.isdigit() or int(number) == int(port.port))
                     for name, number in entries)
        return not entries or listed != exclude

    return allows


def _local(at: PciPlace, others: Sequence[tuple[T, PciPlace]]) -> tuple[str, list[T]]:
    """The best path type from `at` to any of `others`, and those at it, in order."""
    types = [(path_type(at, where), item) for item, where in others]
    if not types:
        return "", []
    best = min((t for t, _ in types), key=PATH_TYPES.index)
    return best, [item for t, item in types if t == best]


def _mirror(value: int, pow2: int) -> int:
    """NCCL's mirrorBits: `value`'s bits reversed within log2(pow2) bits, so neighbours pick far-apart NICs."""
    mirrored, bit, mirror_bit = 0, 1, pow2 >> 1
    while bit < pow2:
        if value & bit:
            mirrored |= mirror_bit
        bit, mirror_bit = bit << 1, mirror_bit >> 1
    return mirrored


def _kernel_address(pci_bus_id: str) -> str:
    """NVML's 00000000:18:00.0 as sysfs names it: 0000:18:00.0."""
    domain, _, rest = pci_bus_id.lower().partition(":")
    return f"{domain[-4:]}:{rest}"


def _natural(name: str) -> tuple[str | int, ...]:
    """mlx5_2 before mlx5_10, as the IB plugin lists them."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


__all__ = ["PATH_TYPES", "Affinity", "Gpu", "NicPort", "PciPlace", "hca_allows", "nic_affinity", "path_type", "place"]
