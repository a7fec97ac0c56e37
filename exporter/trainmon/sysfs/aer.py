"""PCIe AER counters of the devices a training node depends on: NVIDIA GPUs (and NVSwitches), the PCI
devices of the InfiniBand/RoCE HCAs, and the NVMe controllers, from <sysfs>/bus/pci/devices/<address>/.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from trainmon.parsers.aer import SEVERITIES, parse_aer
from trainmon.roots import Root, Unavailable, list_directory, read_attribute

NVIDIA_VENDOR = "0x10de"
_PCI_ADDRESS = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


@dataclass(frozen=True, slots=True)
class AerReading:
    device: str  # PCI address, 0000:18:00.0
    counts: dict[str, dict[str, float]]  # severity -> error -> count
    skipped: tuple[str, ...]


def _pci_parent(sys: Root, *class_path: str) -> str | None:
    """The PCI address a class device (class/infiniband/mlx5_0, class/nvme/nvme0) sits on, if it is PCI."""
    name = os.path.basename(os.path.realpath(sys.join(*class_path, "device")))
    return name if _PCI_ADDRESS.fullmatch(name) else None


def aer_devices(sys: Root) -> dict[str, str]:
    """The NVIDIA devices, the HCAs and the NVMe controllers, by PCI address (sorted), each once, with what it
    is: "NVIDIA" or its class device's name (mlx5_0, nvme0)."""
    found: dict[str, str] = {}
    pci = sys.join("bus", "pci", "devices")
    listed = list_directory(pci)
    for address in [] if isinstance(listed, Unavailable) else listed:
        vendor = read_attribute(pci / address / "vendor")
        if isinstance(vendor, str) and vendor.lower() == NVIDIA_VENDOR:
            found[address] = "NVIDIA"
    for device_class in ("infiniband", "nvme"):
        members = list_directory(sys.join("class", device_class))
        for member in [] if isinstance(members, Unavailable) else members:
            parent = _pci_parent(sys, "class", device_class, member)
            if parent is not None:
                found.setdefault(parent, member)
    return dict(sorted(found.items()))


def read_aer(sys: Root, address: str) -> AerReading | None:
    """The device's AER counters; None where the kernel keeps none (no AER, or no CONFIG_PCIEAER_STATS)."""
    counts: dict[str, dict[str, float]] = {}
    skipped: list[str] = []
    for severity in SEVERITIES:
        name = f"aer_dev_{severity}"
        text = read_attribute(sys.join("bus", "pci", "devices", address, name))
        if isinstance(text, Unavailable):
            if not text.missing:
                skipped.append(f"{address}/{name}: {text.why}")
            continue
        parsed = parse_aer(text)
        counts[severity] = parsed.counts
        skipped += [f"{address}/{name}: unreadable line {line!r}" for line in parsed.bad_lines]
    if not counts and not skipped:
        return None
    return AerReading(address, counts, tuple(skipped))
