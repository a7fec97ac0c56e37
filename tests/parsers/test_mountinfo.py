from __future__ import annotations

from tests.helpers.fs_trees import NFS_SAMPLE
from trainmon.parsers.mountinfo import parse_mountinfo


def test_mountinfo_keeps_network_mounts_once_each_the_one_on_top() -> None:
    mounts = parse_mountinfo((NFS_SAMPLE / "mountinfo").read_text())

    assert [("/mnt/nfs/test", "nfs")] == [(m.mount_point, m.fstype) for m in mounts.records]
    assert [] == mounts.skipped


def test_mountinfo_unescapes_and_lists_lines_without_a_separator() -> None:
    mounts = parse_mountinfo("1 2 0:1 / /mnt/my\\040data rw - lustre 1.2.3.4@tcp:/fs rw\nnot a line\n")

    assert ["/mnt/my data"] == [m.mount_point for m in mounts.records]
    assert ["mountinfo line 2 'not a line': no ' - ' separator"] == mounts.skipped
