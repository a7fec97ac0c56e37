"""Debian's node_exporter as the oracle: same tree, same values for every shared series."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.metrics import SampleKey, parse_samples
from tests.helpers.net import wait_until
from tests.helpers.node_exporter import node_exporter as run_node_exporter
from tests.helpers.tools import require_tool
from tests.helpers.trees import (
    DEFAULT_HW_COUNTERS,
    DEFAULT_PORT_COUNTERS,
    Disk,
    IbDevice,
    IbPort,
    NvmeController,
    break_file_as_directory,
    write_diskstats,
    write_infiniband,
    write_nvme,
)
from trainmon.parsers.diskstats import WHOLE_NAMESPACE

INTERVAL = 1.0
# node_exporter name -> trainmon name, where the suffix differs.
RENAMED = {"node_disk_io_now": "trainmon_nvme_io_in_progress"}
# Shared series trainmon exposes under another unit or not at all, by design.
NOT_COMPARED = {"node_disk_discarded_sectors_total", "node_disk_info"}
LAST_SUCCESS = ("trainmon_collector_last_success_timestamp_seconds", frozenset({("collector", "infiniband")}))


def build_tree(root: Path, step: int = 0) -> tuple[Path, Path]:
    """Several namespaces with partitions and controller paths; several HCAs, one port down."""
    proc, sys = root / "proc", root / "sys"
    disks = [Disk("nvme0n1", seed=1 + step, fields=20, minor=0), Disk("nvme0n1p1", seed=2 + step, minor=1),
             Disk("nvme0n1p2", seed=3, minor=2), Disk("nvme0c0n1", seed=4, minor=3),
             Disk("nvme1n1", seed=5 + step, fields=18, minor=4), Disk("nvme2n1", seed=6 + step, fields=14, minor=5),
             Disk("nvme2n2", seed=7 + step, minor=6), Disk("sda", seed=8, major=8), Disk("loop0", seed=9, major=7)]
    write_diskstats(proc, disks)
    write_nvme(sys, [NvmeController("nvme0", entries=["nvme0c0n1"]), NvmeController("nvme1", entries=["nvme1n1"]),
                     NvmeController("nvme2", entries=["nvme2n1", "nvme2n2"])])
    counters = {name: value + step * 1000 for name, value in DEFAULT_PORT_COUNTERS.items()}
    write_infiniband(sys, [
        IbDevice("mlx5_0", ports=[IbPort("mlx5_0", counters=counters, hw_counters=DEFAULT_HW_COUNTERS)]),
        IbDevice("mlx5_1", ports=[IbPort("mlx5_1", counters=counters, hw_counters=DEFAULT_HW_COUNTERS)]),
        IbDevice("mlx4_0", hca_type="MT4099", ports=[IbPort("mlx4_0", port=1, counters=counters),
                                                     IbPort("mlx4_0", port=2, state="1: DOWN",
                                                            phys_state="2: Polling", rate="10 Gb/sec (4X)",
                                                            counters=counters)]),
    ])
    return proc, sys


@pytest.fixture
def node_exporter(tmp_path: Path) -> Iterator[str]:
    binary = require_tool("prometheus-node-exporter", "node_exporter")
    with run_node_exporter(binary, *build_tree(tmp_path)) as url:
        yield url


@pytest.fixture
def trainmon(tmp_path: Path) -> Iterator[Daemon]:
    proc, sys = tmp_path / "proc", tmp_path / "sys"
    daemon = start_daemon(tmp_path, ["--procfs", str(proc), "--sysfs", str(sys), "--interval", str(INTERVAL),
                                     "--collectors", "nvme,infiniband"])
    yield daemon
    daemon.stop()


def shared_pairs(node: dict[SampleKey, float]) -> dict[SampleKey, SampleKey]:
    """node_exporter series -> the trainmon series that must hold the same value."""
    pairs = {}
    for name, labels in node:
        if name in NOT_COMPARED:
            continue
        device = dict(labels).get("device", "")
        # node_exporter also lists multipath controller paths (nvme0c0n1); trainmon keeps namespaces only.
        if name.startswith("node_disk_") and WHOLE_NAMESPACE.fullmatch(device):
            pairs[(name, labels)] = (RENAMED.get(name, name.replace("node_disk_", "trainmon_nvme_")), labels)
        elif name.startswith("node_infiniband_"):
            pairs[(name, labels)] = (name.replace("node_", "trainmon_"), labels)
    return pairs


def compare(node_url: str, daemon: Daemon) -> int:
    node = parse_samples(httpx.get(node_url, timeout=10).text)
    ours = parse_samples(daemon.metrics_text())
    for collector in ("diskstats", "infiniband"):
        assert node[("node_scrape_collector_success", frozenset({("collector", collector)}))] == 1
    pairs = shared_pairs(node)
    mismatches = {n: (node[n], ours.get(t)) for n, t in pairs.items() if ours.get(t) != node[n]}
    assert mismatches == {}
    return len(pairs)


def test_every_shared_series_equals_node_exporter(node_exporter: str, trainmon: Daemon, tmp_path: Path) -> None:
    shared = compare(node_exporter, trainmon)
    names = {n for n, _ in parse_samples(trainmon.metrics_text())}

    assert shared >= 80, f"only {shared} shared series: the comparison would prove little"
    assert "trainmon_infiniband_out_of_buffer_drops_total" in names  # hw_counters: node_exporter 1.5 has none


def test_counters_advance_within_two_intervals(node_exporter: str, trainmon: Daemon, tmp_path: Path) -> None:
    compare(node_exporter, trainmon)
    build_tree(tmp_path, step=5)
    # A broken hw_counters file: node_exporter 1.5 does not read it; trainmon drops that one series only.
    break_file_as_directory(tmp_path / "sys/class/infiniband/mlx5_1/ports/1/hw_counters/out_of_buffer")
    expected = (DEFAULT_PORT_COUNTERS["port_rcv_data"] + 5000) * 4
    key = ("trainmon_infiniband_port_data_received_bytes_total", frozenset({("device", "mlx5_0"), ("port", "1")}))

    wait_until(lambda: parse_samples(trainmon.metrics_text()).get(key) == expected, timeout=2 * INTERVAL + 1)
    # That cycle may have begun while the tree was being rewritten: compare the next one.
    seen = parse_samples(trainmon.metrics_text())[LAST_SUCCESS]
    wait_until(lambda: parse_samples(trainmon.metrics_text())[LAST_SUCCESS] > seen, timeout=2 * INTERVAL + 1)

    assert compare(node_exporter, trainmon) >= 80
    ours = parse_samples(trainmon.metrics_text())
    drops = {dict(labels)["device"] for name, labels in ours if name == "trainmon_infiniband_out_of_buffer_drops_total"}
    assert {"mlx5_0"} == drops
