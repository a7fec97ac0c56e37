from __future__ import annotations

import os
from pathlib import Path

from tests.helpers import trees
from tests.helpers.trees import break_file_as_dangling_symlink, break_file_as_directory, write, write_nvme
from trainmon.roots import Root
from trainmon.sysfs.nvme import NvmeController, NvmeNamespace, nvme_namespaces, read_controller


def test_a_controller_reads_as_one_typed_record(tmp_path: Path) -> None:
    write_nvme(tmp_path, [trees.NvmeController("nvme1", serial="S1", model="Micron 7450")])

    assert NvmeController(name="nvme1", model="Micron 7450", serial="S1", firmware="GDC5302Q",
                          skipped=()) == read_controller(Root(tmp_path, "sysfs"), "nvme1")


def test_unavailable_identity_attributes_are_none_and_listed(tmp_path: Path) -> None:
    write_nvme(tmp_path, [trees.NvmeController("nvme1")])
    controller_dir = tmp_path / "class" / "nvme" / "nvme1"
    break_file_as_directory(controller_dir / "serial")
    break_file_as_dangling_symlink(controller_dir / "model")
    write(controller_dir / "firmware_rev", "F" * 5000 + "\n")

    controller = read_controller(Root(tmp_path, "sysfs"), "nvme1")

    assert (None, None, None) == (controller.model, controller.serial, controller.firmware)
    assert ("nvme1/model: ENOENT", "nvme1/serial: EISDIR", "nvme1/firmware_rev: over 4096 bytes") == controller.skipped


def test_each_namespace_finds_its_controller(tmp_path: Path) -> None:
    """Listed by its controller, through a multipath path, or only through /sys/block (the controller
    itself, or a subsystem whose lowest-numbered controller wins); none at all means no record."""
    write_nvme(tmp_path, [trees.NvmeController("nvme0", entries=["nvme0c0n1"]),
                          trees.NvmeController("nvme1", entries=["nvme1n1"]),
                          trees.NvmeController("nvme10"), trees.NvmeController("nvme2"),
                          trees.NvmeController("nvme4")])
    trees.write_nvme_subsystem(tmp_path, "nvme-subsys3", controllers=["nvme10", "nvme2"], heads=["nvme3n1"])
    (tmp_path / "block" / "nvme4n1").mkdir(parents=True)
    os.symlink("../../class/nvme/nvme4", tmp_path / "block" / "nvme4n1" / "device")

    namespaces = nvme_namespaces(Root(tmp_path, "sysfs"), ["nvme4n1", "nvme0n1", "nvme1n1", "nvme3n1", "nvme9n1"])

    assert [("nvme4n1", "nvme4"), ("nvme0n1", "nvme0"), ("nvme1n1", "nvme1"), ("nvme3n1", "nvme2")] == [
        (n.device, n.controller.name) for n in namespaces]


def test_a_controller_shared_by_namespaces_is_read_once(tmp_path: Path) -> None:
    write_nvme(tmp_path, [trees.NvmeController("nvme0", entries=["nvme0n1", "nvme0n2"])])
    break_file_as_directory(tmp_path / "class" / "nvme" / "nvme0" / "serial")

    first, second = nvme_namespaces(Root(tmp_path, "sysfs"), ["nvme0n1", "nvme0n2"])

    assert first.controller is second.controller
    assert ("nvme0/serial: EISDIR",) == first.controller.skipped


def test_a_tree_without_the_class_gives_no_namespaces(tmp_path: Path) -> None:
    assert [] == nvme_namespaces(Root(tmp_path, "sysfs"), ["nvme0n1"])


def test_the_real_kernel_sample(fixtures: Path) -> None:
    root = Root(fixtures / "procfs" / "sys", "sysfs")

    assert [NvmeNamespace("nvme0n0", NvmeController(
        name="nvme0", model="Samsung SSD 970 PRO 512GB", serial="S680HF8N190894I", firmware="1B2QEXP7",
        skipped=()))] == nvme_namespaces(root, ["nvme0n0"])
