from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers.fs_trees import FIXTURES, PID, build_fs_tree
from tests.helpers.metrics import registry_of
from trainmon.collectors.base import Collection, NodeResources
from trainmon.collectors.fs import FsCollector
from trainmon.fsclients.gpfs import run_mmpmon
from trainmon.settings import Settings

GPFS_MOUNTS = ("500 21 0:500 / /gpfs/scratch rw,relatime - gpfs scratch rw\n"
               "501 21 0:501 / /gpfs/project rw,relatime - gpfs project rw\n")


def fake_mmpmon(tmp_path: Path, body: str) -> Path:
    """An `mmpmon` that checks its arguments and request, then runs `body` (shell)."""
    shutil.copyfile(FIXTURES / "gpfs" / "fs_io_s.txt", tmp_path / "answer.txt")
    script = tmp_path / "mmpmon"
    script.write_text(f"""#!/bin/sh
[ "$1 $2" = "-p -s" ] || {{ echo "usage: mmpmon -p -s" >&2; exit 2; }}
read request; [ "$request" = fs_io_s ] || exit 3
{body}
""")
    script.chmod(0o755)
    return script


def gpfs_tree(tmp_path: Path) -> tuple[Path, Path]:
    proc, system = build_fs_tree(tmp_path / "tree", lustre=(), nfs=False)
    with open(proc / PID / "mountinfo", "a") as mountinfo:
        mountinfo.write(GPFS_MOUNTS)
    return proc, system


def collect_with(tmp_path: Path, mmpmon: Path) -> Collection:
    proc, system = gpfs_tree(tmp_path)
    collector = FsCollector(Settings(procfs=proc, sysfs=system, gpfs_mmpmon=mmpmon, interval=5), NodeResources())
    try:
        return collector.collect()
    finally:
        collector.close()


def test_mmpmon_fields_become_the_same_families(tmp_path: Path) -> None:
    result = collect_with(tmp_path, fake_mmpmon(tmp_path, f"cat {tmp_path / 'answer.txt'}"))
    registry = registry_of(result.families)

    assert 205607400434 == registry.get_sample_value("trainmon_fs_read_bytes_total", {"mount": "/gpfs/scratch"})
    assert 74839282351 == registry.get_sample_value("trainmon_fs_written_bytes_total", {"mount": "/gpfs/scratch"})
    assert 40971 == registry.get_sample_value("trainmon_fs_operations_total", {"mount": "/gpfs/scratch",
                                                                                "op": "readdir"})
    assert 513 == registry.get_sample_value("trainmon_fs_operations_total", {"mount": "/gpfs/project", "op": "open"})
    assert registry.get_sample_value("trainmon_fs_rpcs_total", {"mount": "/gpfs/scratch"}) is None
    assert () == result.skipped


def test_a_hung_mmpmon_is_bounded_by_its_timeout(tmp_path: Path) -> None:
    answer = run_mmpmon(fake_mmpmon(tmp_path, "sleep 30"), timeout=0.5)

    assert answer.answer is None
    assert answer.error is not None
    assert "did not answer within 0.5s" in answer.error


def test_without_the_flag_gpfs_mounts_are_listed_with_what_they_need(tmp_path: Path) -> None:
    proc, system = gpfs_tree(tmp_path)

    result = FsCollector(Settings(procfs=proc, sysfs=system), NodeResources()).collect()

    assert "/gpfs/scratch: gpfs scratch, counters need --gpfs-mmpmon (root)" in result.found
    assert 1 == registry_of(result.families).get_sample_value(
        "trainmon_fs_info", {"mount": "/gpfs/scratch", "fstype": "gpfs", "source": "scratch"})


def test_a_failing_mmpmon_is_listed_per_mount(tmp_path: Path) -> None:
    mmpmon = fake_mmpmon(tmp_path, "echo 'mmpmon: not root' >&2; exit 1")
    result = collect_with(tmp_path, mmpmon)

    assert f"/gpfs/scratch: {mmpmon} exited 1: mmpmon: not root" in result.skipped
    assert registry_of(result.families).get_sample_value("trainmon_fs_read_bytes_total",
                                                         {"mount": "/gpfs/scratch"}) is None
