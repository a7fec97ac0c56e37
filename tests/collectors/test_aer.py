"""The aer collector on synthetic sysfs trees: the GPUs', HCAs' and NVMe controllers' AER counters, with or
without the gpu collector beside it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from tests.helpers.catalog import assert_declared
from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.metrics import parse_samples, registry_of
from tests.helpers.trees import (
    Disk,
    NvmeController,
    break_file_as_directory,
    class_device,
    pci_device,
    write,
    write_diskstats,
    write_nvme,
)
from trainmon.catalog.aer import PCIE_AER_ERRORS_TOTAL
from trainmon.collectors.aer import AerCollector
from trainmon.collectors.base import Collection, NodeResources
from trainmon.errors import CollectorError, NoData
from trainmon.settings import Settings

FIXTURES = Path(__file__).parent.parent / "fixtures" / "aer"

# What the gpu collector served of this tree before AER was a collector of its own (commit 2a5ffe3).
SERVED_BY_THE_GPU_COLLECTOR = """\
# HELP trainmon_pcie_aer_errors_total PCIe AER errors the kernel counted on a GPU, HCA or NVMe controller, \
by severity (correctable, nonfatal, fatal) and error; absent while zero.
# TYPE trainmon_pcie_aer_errors_total counter
trainmon_pcie_aer_errors_total{device="0000:18:00.0",error="RxErr",severity="correctable"} 2.0
trainmon_pcie_aer_errors_total{device="0000:18:00.0",error="BadDLLP",severity="correctable"} 1.0
trainmon_pcie_aer_errors_total{device="0000:18:00.0",error="CmpltTO",severity="fatal"} 1.0
trainmon_pcie_aer_errors_total{device="0000:19:00.0",error="CmpltTO",severity="nonfatal"} 4.0
trainmon_pcie_aer_errors_total{device="0000:20:00.0",error="RxErr",severity="correctable"} 5.0
"""
SKIPPED_BY_THE_GPU_COLLECTOR = ("0000:19:00.0/aer_dev_correctable: EISDIR",
                                "0000:19:00.0/aer_dev_nonfatal: unreadable line 'BadTLP x'")


def training_node(sys: Path) -> None:
    """Two GPUs (one on a kernel without AER statistics), an HCA with a broken file, an NVMe drive and a
    chipset device that nobody trains on."""
    gpu = pci_device(sys, "0000:18:00.0", "0x10de")
    shutil.copy(FIXTURES / "aer_dev_correctable", gpu / "aer_dev_correctable")
    shutil.copy(FIXTURES / "aer_dev_fatal", gpu / "aer_dev_fatal")
    write(gpu / "aer_dev_nonfatal", "TLP 0\nTOTAL_ERR_NONFATAL 0\n")
    pci_device(sys, "0000:1a:00.0", "0x10de")
    hca = pci_device(sys, "0000:19:00.0", "0x15b3")
    class_device(sys, "infiniband", "mlx5_0", "0000:19:00.0")
    write(hca / "aer_dev_nonfatal", "CmpltTO 4\nBadTLP x\nTOTAL_ERR_NONFATAL 4\n")
    write(hca / "aer_dev_correctable", "")
    break_file_as_directory(hca / "aer_dev_correctable")
    storage_node(sys)
    chipset = pci_device(sys, "0000:00:1f.0", "0x8086")
    write(chipset / "aer_dev_correctable", "RxErr 9\nTOTAL_ERR_COR 9\n")


def storage_node(sys: Path) -> None:
    """One NVMe drive, no GPU."""
    nvme = pci_device(sys, "0000:20:00.0", "0x144d")
    class_device(sys, "nvme", "nvme0", "0000:20:00.0")
    write(nvme / "aer_dev_correctable", "RxErr 5\nBadDLLP 0\nTOTAL_ERR_COR 5\n")


def collect(sys: Path) -> Collection:
    collector = AerCollector(Settings(sysfs=sys), NodeResources())
    try:
        return collector.collect()
    finally:
        collector.close()


def test_the_series_and_skipped_lines_are_those_the_gpu_collector_served(tmp_path: Path) -> None:
    training_node(tmp_path)

    collection = collect(tmp_path)

    assert SERVED_BY_THE_GPU_COLLECTOR == generate_latest(registry_of(collection.families)).decode()
    assert SKIPPED_BY_THE_GPU_COLLECTOR == collection.skipped
    assert {PCIE_AER_ERRORS_TOTAL.name} == assert_declared(collection.families, "aer")


def test_check_names_each_device_with_its_errors_or_why_it_has_none(tmp_path: Path) -> None:
    training_node(tmp_path)

    assert ("0000:18:00.0 (NVIDIA): AER errors: correctable 3, fatal 1",
            "0000:19:00.0 (mlx5_0): AER errors: nonfatal 4",
            "0000:1a:00.0 (NVIDIA): no AER statistics (no AER capability, or a kernel without CONFIG_PCIEAER_STATS)",
            "0000:20:00.0 (nvme0): AER errors: correctable 5") == collect(tmp_path).found


def test_a_device_without_errors_says_none(tmp_path: Path) -> None:
    write(pci_device(tmp_path, "0000:18:00.0", "0x10de") / "aer_dev_fatal", "DLP 0\nTOTAL_ERR_FATAL 0\n")

    collection = collect(tmp_path)

    assert ("0000:18:00.0 (NVIDIA): AER errors: none",) == collection.found
    assert [] == [s for family in collection.families for s in family.samples]


def test_a_node_without_gpus_hcas_or_drives_has_no_data(tmp_path: Path) -> None:
    write(pci_device(tmp_path, "0000:00:1f.0", "0x8086") / "aer_dev_correctable", "RxErr 9\n")

    with pytest.raises(NoData, match="no NVIDIA, InfiniBand or NVMe PCI device under"):
        collect(tmp_path)


def test_a_missing_sysfs_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(CollectorError, match="--sysfs"):
        collect(tmp_path / "nowhere")


def test_a_storage_node_without_the_gpu_collector_serves_its_drives_aer(tmp_path: Path,
                                                                        daemons: list[Daemon]) -> None:
    proc, sys = tmp_path / "proc", tmp_path / "sys"
    storage_node(sys)
    write_nvme(sys, [NvmeController("nvme0", entries=["nvme0n1"])])
    write_diskstats(proc, [Disk("nvme0n1")])
    daemons.append(daemon := start_daemon(tmp_path, ["--procfs", str(proc), "--sysfs", str(sys),
                                                     "--collectors", "nvme,aer"]))

    samples = parse_samples(daemon.metrics_text())

    assert 5.0 == samples[("trainmon_pcie_aer_errors_total",
                           frozenset({"device": "0000:20:00.0", "severity": "correctable", "error": "RxErr"}.items()))]
    assert 1.0 == samples[("trainmon_collector_success", frozenset({"collector": "aer"}.items()))]
    assert ("trainmon_collector_duration_seconds", frozenset({"collector": "aer"}.items())) in samples
