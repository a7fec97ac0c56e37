from __future__ import annotations

import pytest

from trainmon.parsers.diskstats import parse_diskstats, whole_namespaces

# Real lines: 14 fields (kernel < 4.18), 18 (discards, 4.18+), 20 (flushes, 5.5+).
LINE_14 = " 259       0 nvme0n1 47114 4 4643973 21650 1078320 43950 39451633 1011053 0 222766 1032546"
LINE_18 = " 259       1 nvme1n1 10 1 80 5 20 2 160 9 0 12 14 3 0 24 2"
LINE_20 = " 259       2 nvme2n1 100 10 800 50 200 20 1600 90 1 120 140 30 0 240 20 11 6"


def test_fourteen_field_format_has_no_discards_or_flushes() -> None:
    """Kernels before 4.18 print 11 stat columns; the later ones are None, never 0."""
    (record,) = parse_diskstats(LINE_14)

    assert ("nvme0n1", 47114, 4643973, 21650, 1078320, 39451633, 1011053, 0, 222766, 1032546) == (
        record.device, record.reads_completed, record.read_sectors, record.read_time_ms,
        record.writes_completed, record.write_sectors, record.write_time_ms, record.io_in_progress,
        record.io_time_ms, record.io_weighted_time_ms)
    assert (None, None, None) == (record.discards_completed, record.flushes_completed, record.flush_time_ms)


def test_eighteen_field_format_adds_discards() -> None:
    (record,) = parse_diskstats(LINE_18)

    assert (3, 0, 24, 2) == (record.discards_completed, record.discards_merged, record.discard_sectors,
                             record.discard_time_ms)
    assert record.flushes_completed is None


def test_twenty_field_format_adds_flushes() -> None:
    (record,) = parse_diskstats(LINE_20)

    assert (11, 6) == (record.flushes_completed, record.flush_time_ms)
    assert (1, 140) == (record.io_in_progress, record.io_weighted_time_ms)


@pytest.mark.parametrize("bad", [
    "259 0 nvme0n1 1 2 3",                                          # truncated
    "259 0 nvme0n1 a b c d e f g h i j k",                          # not numbers
    "",                                                             # blank
    "major minor name rio rmerge rsect ruse wio wmerge wsect wuse running use aveq",  # a header
])
def test_bad_lines_are_skipped_and_the_rest_kept(bad: str) -> None:
    """One bad line costs that line only."""
    records = parse_diskstats("\n".join([LINE_14, bad, LINE_20]))

    assert ["nvme0n1", "nvme2n1"] == [r.device for r in records]


def test_only_whole_namespaces_are_kept() -> None:
    """Partitions, multipath controller paths and other block devices are dropped."""
    names = ["nvme0n1", "nvme0n1p1", "nvme0n1p2", "nvme0c0n1", "nvme10n12", "sda", "sda1", "loop0", "dm-0",
             "md0", "nvme1n1"]
    text = "\n".join(f"259 {i} {n} 1 2 3 4 5 6 7 8 9 10 11" for i, n in enumerate(names))

    assert ["nvme0n1", "nvme10n12", "nvme1n1"] == [r.device for r in whole_namespaces(parse_diskstats(text))]


def test_real_kernel_sample_parses(fixtures) -> None:  # type: ignore[no-untyped-def]
    text = (fixtures / "procfs" / "proc" / "diskstats").read_text()

    records = parse_diskstats(text)

    assert len(records) == len([line for line in text.splitlines() if line.strip()])
    assert ["nvme0n1"] == [r.device for r in whole_namespaces(records)]
