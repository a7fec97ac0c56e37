from __future__ import annotations

import pytest

from trainmon.parsers.nvme import controller_number, namespace_of


@pytest.mark.parametrize(("entry", "expected"), [
    ("nvme0n1", "nvme0n1"),
    ("nvme3n12", "nvme3n12"),
    ("nvme0c0n1", "nvme0n1"),     # controller 0's path to namespace 1 of subsystem 0
    ("nvme1c3n2", "nvme1n2"),
    ("nvme0n1p1", None),          # a partition
    ("device", None),
    ("power", None),
])
def test_namespace_of(entry: str, expected: str | None) -> None:
    assert expected == namespace_of(entry)


@pytest.mark.parametrize(("entry", "expected"), [
    ("nvme0", 0),
    ("nvme12", 12),
    ("nvme0n1", None),      # a namespace
    ("nvme-subsys0", None),
    ("subsysnqn", None),
])
def test_controller_number(entry: str, expected: int | None) -> None:
    """A subsystem's directory lists its controllers as nvme<N> links among its other entries."""
    assert expected == controller_number(entry)
