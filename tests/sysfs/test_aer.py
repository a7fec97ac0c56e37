"""AER counters of the GPUs, the HCAs and the NVMe controllers, from a synthetic sysfs tree."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers.trees import break_file_as_directory, class_device, pci_device, write
from trainmon.roots import Root
from trainmon.sysfs.aer import aer_devices, read_aer

FIXTURES = Path(__file__).parent.parent / "fixtures" / "aer"


def test_gpus_hcas_and_nvme_controllers_only(tmp_path: Path) -> None:
    gpu = pci_device(tmp_path, "0000:18:00.0", "0x10de")
    pci_device(tmp_path, "0000:19:00.0", "0x15b3")
    pci_device(tmp_path, "0000:20:00.0", "0x144d")
    pci_device(tmp_path, "0000:00:1f.0", "0x8086")  # a chipset device nobody trains on
    class_device(tmp_path, "infiniband", "mlx5_0", "0000:19:00.0")
    class_device(tmp_path, "nvme", "nvme0", "0000:20:00.0")
    shutil.copy(FIXTURES / "aer_dev_correctable", gpu / "aer_dev_correctable")
    shutil.copy(FIXTURES / "aer_dev_fatal", gpu / "aer_dev_fatal")
    sys = Root(tmp_path, "sysfs")

    assert {"0000:18:00.0": "NVIDIA", "0000:19:00.0": "mlx5_0", "0000:20:00.0": "nvme0"} == aer_devices(sys)
    reading = read_aer(sys, "0000:18:00.0")
    assert reading is not None
    assert (2, 1) == (reading.counts["correctable"]["RxErr"], reading.counts["fatal"]["CmpltTO"])
    assert "nonfatal" not in reading.counts
    assert read_aer(sys, "0000:19:00.0") is None  # a kernel without AER statistics: no series, no complaint


def test_an_unreadable_file_is_named_and_the_others_kept(tmp_path: Path) -> None:
    gpu = pci_device(tmp_path, "0000:18:00.0", "0x10de")
    shutil.copy(FIXTURES / "aer_dev_correctable", gpu / "aer_dev_correctable")
    write(gpu / "aer_dev_fatal", "")
    break_file_as_directory(gpu / "aer_dev_fatal")

    reading = read_aer(Root(tmp_path, "sysfs"), "0000:18:00.0")

    assert reading is not None
    assert 2 == reading.counts["correctable"]["RxErr"]
    assert 1 == len(reading.skipped)
    assert reading.skipped[0].startswith("0000:18:00.0/aer_dev_fatal: ")
