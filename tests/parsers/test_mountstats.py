from __future__ import annotations

from tests.helpers.fs_trees import NFS_SAMPLE
from trainmon.parsers.mountstats import parse_mountstats


def test_mountstats_keeps_a_counter_just_under_2_to_the_64() -> None:
    stats = parse_mountstats((NFS_SAMPLE / "mountstats").read_text())

    access = stats.records["/mnt/nfs/test"].operations["ACCESS"]
    assert 18446743919241604546 == access.queue_ms
    assert 1953587717 == access.execute_ms


def test_mountstats_refuses_a_negative_or_overflowing_counter() -> None:
    text = (NFS_SAMPLE / "mountstats").read_text().replace("READ: 1298", "READ: -1298")

    assert {"/mnt/nfs/test"} == set(parse_mountstats(text).skipped)
    assert {} == parse_mountstats(text.replace("-1298", "18446744073709551616")).records
