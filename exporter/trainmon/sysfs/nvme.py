"""NVMe controllers from <sysfs>/class/nvme, and the controller each namespace belongs to.

A namespace finds its controller among the controller's entries (`nvme0n1`, or `nvme0c0n1` for a
multipath path) or, failing that, through `<sysfs>/block/<namespace>/device`: the controller itself,
or for a native multipath head the subsystem, whose `nvme<N>` links are its controllers.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from trainmon.parsers.nvme import controller_number, namespace_of
from trainmon.roots import Root, Unavailable, list_directory
from trainmon.sysfs.attributes import AttributeReader


@dataclass(frozen=True, slots=True, kw_only=True)
class NvmeController:
    """A controller's identity; `None` where the attribute was unavailable."""

    name: str  # class/nvme/<name>
    model: str | None  # model
    serial: str | None  # serial
    firmware: str | None  # firmware_rev
    skipped: tuple[str, ...]  # "<name>/<attribute>: <why>"


@dataclass(frozen=True, slots=True)
class NvmeNamespace:
    device: str  # the block device, nvme0n1
    controller: NvmeController  # for multipath, the lowest-numbered


def read_controller(sys: Root, name: str) -> NvmeController:
    reader = AttributeReader(str(sys.join("class", "nvme", name)), name)
    return NvmeController(name=name, model=reader.name("model"), serial=reader.name("serial"),
                          firmware=reader.name("firmware_rev"), skipped=tuple(reader.skipped))


def nvme_namespaces(sys: Root, devices: Iterable[str]) -> list[NvmeNamespace]:
    """Each of `devices` that has a controller, in the order given; no controller, no record.

    A controller's attributes are read once, and only if one of `devices` belongs to it.
    """
    listed = list_directory(sys.join("class", "nvme"))
    controllers = _controllers([] if isinstance(listed, Unavailable) else listed)
    owner, known = _namespace_owners(sys, controllers), set(controllers)
    read: dict[str, NvmeController] = {}
    namespaces = []
    for device in devices:
        name = owner.get(device) or _controller_of_block_device(sys, device, known)
        if name is None:
            continue
        if name not in read:
            read[name] = read_controller(sys, name)
        namespaces.append(NvmeNamespace(device, read[name]))
    return namespaces


def _namespace_owners(sys: Root, controllers: list[str]) -> dict[str, str]:
    """Namespace -> the first of `controllers` that lists it (itself or a path to it)."""
    owner: dict[str, str] = {}
    for name in controllers:
        entries = list_directory(sys.join("class", "nvme", name))
        for entry in [] if isinstance(entries, Unavailable) else entries:
            namespace = namespace_of(entry)
            if namespace is not None:
                owner.setdefault(namespace, name)
    return owner


def _controller_of_block_device(sys: Root, namespace: str, controllers: set[str]) -> str | None:
    """The controller behind `<sysfs>/block/<namespace>/device`: it, or the subsystem's first controller."""
    device = os.path.realpath(sys.join("block", namespace, "device"))
    name = os.path.basename(device)
    if name in controllers:
        return name
    links = list_directory(device)  # a multipath head's parent is its subsystem, nvme-subsys<N>
    if isinstance(links, Unavailable):
        return None
    return next((c for c in _controllers(links) if c in controllers), None)


def _controllers(entries: Iterable[str]) -> list[str]:
    """The controller names among `entries`, lowest number first (nvme2 before nvme10)."""
    numbered = [(n, e) for e in entries if (n := controller_number(e)) is not None]
    return [e for _, e in sorted(numbered)]
