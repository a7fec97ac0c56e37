"""Names in /sys/class/nvme and /sys/class/nvme-subsystem: controllers, namespaces, controller paths."""

from __future__ import annotations

import re

_NAMESPACE = re.compile(r"nvme(\d+)n(\d+)")
_CONTROLLER_PATH = re.compile(r"nvme(\d+)c\d+n(\d+)")


def namespace_of(entry: str) -> str | None:
    """The block device a controller's sysfs entry stands for.

    `nvme0n1` is a namespace itself; `nvme0c2n1` is controller 2's path to namespace 1 of
    subsystem 0, whose block device is `nvme0n1`; anything else is not a namespace.
    """
    if _NAMESPACE.fullmatch(entry):
        return entry
    match = _CONTROLLER_PATH.fullmatch(entry)
    return f"nvme{match.group(1)}n{match.group(2)}" if match else None


_CONTROLLER = re.compile(r"nvme(\d+)")


def controller_number(entry: str) -> int | None:
    """`nvme3` -> 3: a controller's name, as in class/nvme and among a subsystem's links; else None."""
    match = _CONTROLLER.fullmatch(entry)
    return int(match.group(1)) if match else None
