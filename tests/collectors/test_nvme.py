from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.metrics import registry_of
from tests.helpers.trees import Disk, NvmeController, write, write_diskstats, write_nvme
from trainmon.collectors.nvme import NvmeCollector
from trainmon.errors import NoData
from trainmon.settings import Settings


def make_tree(tmp_path: Path) -> Settings:
    proc, sys = tmp_path / "proc", tmp_path / "sys"
    write_diskstats(proc, [
        Disk("nvme0n1", seed=1, fields=20), Disk("nvme0n1p1", seed=2), Disk("nvme0c0n1", seed=3),
        Disk("nvme1n1", seed=4, fields=14), Disk("sda", seed=5, major=8), Disk("nvme2n1", seed=6, fields=18),
    ])
    write_nvme(sys, [
        NvmeController("nvme0", serial="S0", entries=["nvme0c0n1"]),     # multipath: a controller path
        NvmeController("nvme1", serial="S1", model="Micron 7450", entries=["nvme1n1"]),
        NvmeController("nvme2", serial="S2", entries=["nvme2n1"]),
    ])
    return Settings(procfs=proc, sysfs=sys)


def test_values_are_in_base_units(tmp_path: Path) -> None:
    """Sectors are 512 bytes and times are milliseconds in diskstats."""
    registry = registry_of(NvmeCollector(make_tree(tmp_path)).collect().families)
    values = Disk("nvme0n1", seed=1).values()

    def get(name: str) -> float | None:
        return registry.get_sample_value(f"trainmon_nvme_{name}", {"device": "nvme0n1"})

    assert values[2] * 512 == get("read_bytes_total")
    assert values[6] * 512 == get("written_bytes_total")
    assert values[0] == get("reads_completed_total")
    assert values[4] == get("writes_completed_total")
    assert pytest.approx(values[3] / 1000) == get("read_time_seconds_total")
    assert pytest.approx(values[7] / 1000) == get("write_time_seconds_total")
    assert pytest.approx(values[9] / 1000) == get("io_time_seconds_total")
    assert values[8] == get("io_in_progress")
    assert values[15] == get("flush_requests_total")


def test_only_whole_namespaces_become_series(tmp_path: Path) -> None:
    collection = NvmeCollector(make_tree(tmp_path)).collect()

    devices = {s.labels["device"] for f in collection.families for s in f.samples}

    assert {"nvme0n1", "nvme1n1", "nvme2n1"} == devices


def test_columns_the_kernel_did_not_print_are_absent(tmp_path: Path) -> None:
    registry = registry_of(NvmeCollector(make_tree(tmp_path)).collect().families)

    assert registry.get_sample_value("trainmon_nvme_discards_completed_total", {"device": "nvme1n1"}) is None
    assert registry.get_sample_value("trainmon_nvme_flush_requests_total", {"device": "nvme2n1"}) is None
    assert registry.get_sample_value("trainmon_nvme_discards_completed_total", {"device": "nvme2n1"}) is not None


def test_info_names_the_controller_even_through_a_multipath_path(tmp_path: Path) -> None:
    registry = registry_of(NvmeCollector(make_tree(tmp_path)).collect().families)

    assert 1 == registry.get_sample_value("trainmon_nvme_info", {
        "device": "nvme0n1", "controller": "nvme0", "model": "SAMSUNG MZQL23T8HCLS-00A07", "serial": "S0",
        "firmware": "GDC5302Q"})
    assert 1 == registry.get_sample_value("trainmon_nvme_info", {
        "device": "nvme1n1", "controller": "nvme1", "model": "Micron 7450", "serial": "S1", "firmware": "GDC5302Q"})


def test_device_filter(tmp_path: Path) -> None:
    settings = make_tree(tmp_path)
    collector = NvmeCollector(Settings(procfs=settings.procfs, sysfs=settings.sysfs,
                                       nvme_devices=re.compile(r"^nvme1")))

    devices = {s.labels["device"] for f in collector.collect().families for s in f.samples}

    assert {"nvme1n1"} == devices


def test_a_node_without_nvme_has_no_data(tmp_path: Path) -> None:
    write(tmp_path / "proc" / "diskstats", "   8       0 sda 1 2 3 4 5 6 7 8 9 10 11\n")

    with pytest.raises(NoData):
        NvmeCollector(Settings(procfs=tmp_path / "proc", sysfs=tmp_path / "sys")).collect()


def test_an_unreadable_identity_file_is_skipped_not_fatal(tmp_path: Path) -> None:
    settings = make_tree(tmp_path)
    serial = settings.sysfs / "class" / "nvme" / "nvme1" / "serial"
    serial.unlink()
    serial.mkdir()  # EISDIR on read, even for root

    collection = NvmeCollector(settings).collect()

    assert ["nvme1/serial: EISDIR"] == list(collection.skipped)
    assert 3 == len(collection.found)
