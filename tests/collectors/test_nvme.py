from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.catalog import assert_declared
from tests.helpers.daemon import start_daemon
from tests.helpers.metrics import registry_of
from tests.helpers.trees import (
    Disk,
    NvmeController,
    diskstats_line,
    replace_with_fifo,
    write,
    write_diskstats,
    write_nvme,
    write_nvme_subsystem,
)
from trainmon.catalog import nvme
from trainmon.collectors.base import Collection, NodeResources
from trainmon.collectors.nvme import NvmeCollector
from trainmon.errors import CollectorError, NoData
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
    registry = registry_of(NvmeCollector(make_tree(tmp_path), NodeResources()).collect().families)
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


def test_every_family_is_declared_in_the_catalogue_and_the_tree_fills_each(tmp_path: Path) -> None:
    families = NvmeCollector(make_tree(tmp_path), NodeResources()).collect().families

    assert {family.name for family in nvme.FAMILIES} == assert_declared(families, "nvme")


def test_only_whole_namespaces_become_series(tmp_path: Path) -> None:
    collection = NvmeCollector(make_tree(tmp_path), NodeResources()).collect()

    devices = {s.labels["device"] for f in collection.families for s in f.samples}

    assert {"nvme0n1", "nvme1n1", "nvme2n1"} == devices


def test_columns_the_kernel_did_not_print_are_absent(tmp_path: Path) -> None:
    registry = registry_of(NvmeCollector(make_tree(tmp_path), NodeResources()).collect().families)

    assert registry.get_sample_value("trainmon_nvme_discards_completed_total", {"device": "nvme1n1"}) is None
    assert registry.get_sample_value("trainmon_nvme_flush_requests_total", {"device": "nvme2n1"}) is None
    assert registry.get_sample_value("trainmon_nvme_discards_completed_total", {"device": "nvme2n1"}) is not None


def test_info_names_the_controller_even_through_a_multipath_path(tmp_path: Path) -> None:
    registry = registry_of(NvmeCollector(make_tree(tmp_path), NodeResources()).collect().families)

    assert 1 == registry.get_sample_value("trainmon_nvme_info", {
        "device": "nvme0n1", "controller": "nvme0", "model": "SAMSUNG MZQL23T8HCLS-00A07", "serial": "S0",
        "firmware": "GDC5302Q"})
    assert 1 == registry.get_sample_value("trainmon_nvme_info", {
        "device": "nvme1n1", "controller": "nvme1", "model": "Micron 7450", "serial": "S1", "firmware": "GDC5302Q"})


def test_device_filter(tmp_path: Path) -> None:
    settings = make_tree(tmp_path)
    collector = NvmeCollector(Settings(procfs=settings.procfs, sysfs=settings.sysfs,
                                       nvme_devices=re.compile(r"^nvme1")), NodeResources())

    devices = {s.labels["device"] for f in collector.collect().families for s in f.samples}

    assert {"nvme1n1"} == devices


def test_a_node_without_nvme_has_no_data(tmp_path: Path) -> None:
    write(tmp_path / "proc" / "diskstats", "   8       0 sda 1 2 3 4 5 6 7 8 9 10 11\n")
    (tmp_path / "sys").mkdir()

    with pytest.raises(NoData):
        NvmeCollector(Settings(procfs=tmp_path / "proc", sysfs=tmp_path / "sys"), NodeResources()).collect()


def test_an_unreadable_identity_file_is_skipped_not_fatal(tmp_path: Path) -> None:
    settings = make_tree(tmp_path)
    serial = settings.sysfs / "class" / "nvme" / "nvme1" / "serial"
    serial.unlink()
    serial.mkdir()  # EISDIR on read, even for root

    collection = NvmeCollector(settings, NodeResources()).collect()

    assert ["nvme1/serial: EISDIR"] == list(collection.skipped)
    assert 3 == len(collection.found)


def info_of(collection: Collection) -> dict[str, dict[str, str]]:
    """device -> the labels of its trainmon_nvme_info series."""
    return {s.labels["device"]: dict(s.labels) for f in collection.families for s in f.samples
            if s.name == "trainmon_nvme_info"}


def test_a_multipath_head_listed_only_by_its_subsystem_gets_an_identity(tmp_path: Path) -> None:
    """Native multipath without a controller-path entry: /sys/block/nvme0n1/device is the subsystem,
    whose controller links lead to nvme0 (the lowest-numbered of its two controllers)."""
    proc, sys = tmp_path / "proc", tmp_path / "sys"
    write_diskstats(proc, [Disk("nvme0n1", seed=1), Disk("nvme4n1", seed=2, minor=1)])
    write_nvme(sys, [NvmeController("nvme10", serial="S10"), NvmeController("nvme2", serial="S2"),
                     NvmeController("nvme4", serial="S4")])  # none lists nvme0n1 or nvme4n1
    write_nvme_subsystem(sys, "nvme-subsys0", controllers=["nvme10", "nvme2"], heads=["nvme0n1"])
    (sys / "block" / "nvme4n1").mkdir(parents=True)  # without multipath the parent is the controller
    os.symlink("../../class/nvme/nvme4", sys / "block" / "nvme4n1" / "device")

    collection = NvmeCollector(Settings(procfs=proc, sysfs=sys), NodeResources()).collect()

    info = info_of(collection)
    assert ("nvme2", "S2") == (info["nvme0n1"]["controller"], info["nvme0n1"]["serial"])
    assert ("nvme4", "S4") == (info["nvme4n1"]["controller"], info["nvme4n1"]["serial"])
    assert [] == list(collection.skipped)


def test_a_namespace_without_any_controller_has_counters_but_no_info(tmp_path: Path) -> None:
    proc, sys = tmp_path / "proc", tmp_path / "sys"
    write_diskstats(proc, [Disk("nvme0n1")])
    sys.mkdir()

    collection = NvmeCollector(Settings(procfs=proc, sysfs=sys), NodeResources()).collect()

    assert {} == info_of(collection)
    assert registry_of(collection.families).get_sample_value("trainmon_nvme_reads_completed_total",
                                                             {"device": "nvme0n1"}) is not None


def test_diskstats_as_a_fifo_fails_the_cycle_instead_of_hanging(tmp_path: Path) -> None:
    """A plain open() of a FIFO waits for a writer forever; the collector must return at once."""
    settings = make_tree(tmp_path)
    fifo = settings.procfs / "diskstats"
    replace_with_fifo(fifo)
    outcome: list[BaseException | Collection] = []

    def collect() -> None:
        try:
            outcome.append(NvmeCollector(settings, NodeResources()).collect())
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=collect, daemon=True)
    thread.start()
    thread.join(timeout=20)
    if thread.is_alive():  # release the blocked open() so the test process can end
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join()
    (result,) = outcome
    assert isinstance(result, CollectorError) and not isinstance(result, NoData)
    assert f"{fifo}: not a regular file" == str(result)


def test_negative_garbage_and_duplicate_lines_are_skipped_and_listed(tmp_path: Path) -> None:
    settings = make_tree(tmp_path)
    with open(settings.procfs / "diskstats", "a") as diskstats:
        diskstats.write(diskstats_line(259, 9, "nvme1n1", [5] * 17) + "\n")          # nvme1n1 again
        diskstats.write("259 10 nvme7n1 -4 2 3 4 5 6 7 8 9 10 11\n")                  # a negative counter
        diskstats.write("259 11 nvme8n1 1 2 3 4 5 6 7 8 9 10 " + "9" * 5000 + "\n")  # over 64 bits
        diskstats.write("\x00\x01garbage\n")

    collection = NvmeCollector(settings, NodeResources()).collect()

    registry = registry_of(collection.families)
    assert Disk("nvme1n1", seed=4).values()[0] == registry.get_sample_value("trainmon_nvme_reads_completed_total",
                                                                            {"device": "nvme1n1"})
    devices = {s.labels["device"] for f in collection.families for s in f.samples}
    assert {"nvme0n1", "nvme1n1", "nvme2n1"} == devices
    assert [
        "diskstats line 7: nvme1n1 listed again",
        "diskstats line 8 '259 10 nvme7n1 -4 2 3 4 5 6 7 8 9 10 11': not unsigned integers",
        "diskstats line 9 '259 11 nvme8n1 1 2 3 4 5 6 7 8 9 10 999999999999999999999999': a value over 64 bits",
        "diskstats line 10 '\\x00\\x01garbage': 1 fields, want 14 or more",
    ] == list(collection.skipped)


def test_a_diskstats_file_over_its_bound_is_a_failure(tmp_path: Path) -> None:
    settings = make_tree(tmp_path)
    write(settings.procfs / "diskstats", "259 0 nvme0n1 1 2 3 4 5 6 7 8 9 10 11\n" * 200_000)  # 8 MB

    with pytest.raises(CollectorError, match="diskstats: over 4194304 bytes") as raised:
        NvmeCollector(settings, NodeResources()).collect()
    assert not isinstance(raised.value, NoData)


@pytest.mark.parametrize("flag", ["procfs", "sysfs"])
def test_a_root_that_does_not_exist_is_a_failure_naming_the_flag(flag: str, tmp_path: Path) -> None:
    """Not "no NVMe here": a wrong --procfs would otherwise hide every disk of the node silently."""
    settings = make_tree(tmp_path)
    missing = tmp_path / "not-mounted"
    args: dict[str, Any] = {"procfs": settings.procfs, "sysfs": settings.sysfs, flag: missing}

    with pytest.raises(CollectorError, match=f"--{flag} {missing}: not a directory") as raised:
        NvmeCollector(Settings(**args), NodeResources()).collect()
    assert not isinstance(raised.value, NoData)


def test_check_exits_non_zero_for_a_missing_procfs_root(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "trainmon", "check", "--collectors", "nvme",
                             "--procfs", str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)

    assert 1 == result.returncode, result.stdout + result.stderr
    assert "nvme         FAILING" in result.stdout and f"--procfs {tmp_path / 'nope'}" in result.stdout


def test_the_daemon_lists_skipped_diskstats_lines_in_its_status(tmp_path: Path, daemons) -> None:  # type: ignore[no-untyped-def]
    """Through a real daemon: the bad lines are in /api/v1/status and no negative counter is served."""
    settings = make_tree(tmp_path)
    with open(settings.procfs / "diskstats", "a") as diskstats:
        diskstats.write("259 10 nvme7n1 -4 2 3 4 5 6 7 8 9 10 11\n")
    daemons.append(daemon := start_daemon(tmp_path, ["--collectors", "nvme", "--procfs", str(settings.procfs),
                                                     "--sysfs", str(settings.sysfs)]))

    (nvme,) = [c for c in daemon.get("/api/v1/status").json()["collectors"] if c["name"] == "nvme"]

    assert nvme["ok"]
    assert ["diskstats line 7 '259 10 nvme7n1 -4 2 3 4 5 6 7 8 9 10 11': not unsigned integers"] == nvme["skipped"]
    assert "nvme7n1" not in daemon.metrics_text()


def test_an_unprintable_model_is_skipped_and_the_others_kept(tmp_path: Path) -> None:
    settings = make_tree(tmp_path)
    write(settings.sysfs / "class" / "nvme" / "nvme1" / "model", "Micron\x007450\n")

    collection = NvmeCollector(settings, NodeResources()).collect()

    assert ["nvme1/model: not a name 'Micron\\x007450'"] == list(collection.skipped)
    assert ("", "S1") == (info_of(collection)["nvme1n1"]["model"], info_of(collection)["nvme1n1"]["serial"])
