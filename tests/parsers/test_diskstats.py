from __future__ import annotations

from dataclasses import astuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainmon.parsers.diskstats import parse_diskstats, whole_namespaces

# Real lines: 14 fields (kernel < 4.18), 18 (discards, 4.18+), 20 (flushes, 5.5+).
LINE_14 = " 259       0 nvme0n1 47114 4 4643973 21650 1078320 43950 39451633 1011053 0 222766 1032546"
LINE_18 = " 259       1 nvme1n1 10 1 80 5 20 2 160 9 0 12 14 3 0 24 2"
LINE_20 = " 259       2 nvme2n1 100 10 800 50 200 20 1600 90 1 120 140 30 0 240 20 11 6"


def test_fourteen_field_format_has_no_discards_or_flushes() -> None:
    """Kernels before 4.18 print 11 stat columns; the later ones are None, never 0."""
    (record,) = parse_diskstats(LINE_14).records

    assert ("nvme0n1", 47114, 4643973, 21650, 1078320, 39451633, 1011053, 0, 222766, 1032546) == (
        record.device, record.reads_completed, record.read_sectors, record.read_time_ms,
        record.writes_completed, record.write_sectors, record.write_time_ms, record.io_in_progress,
        record.io_time_ms, record.io_weighted_time_ms)
    assert (None, None, None) == (record.discards_completed, record.flushes_completed, record.flush_time_ms)


def test_eighteen_field_format_adds_discards() -> None:
    (record,) = parse_diskstats(LINE_18).records

    assert (3, 0, 24, 2) == (record.discards_completed, record.discards_merged, record.discard_sectors,
                             record.discard_time_ms)
    assert record.flushes_completed is None


def test_twenty_field_format_adds_flushes() -> None:
    (record,) = parse_diskstats(LINE_20).records

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
    parsed = parse_diskstats("\n".join([LINE_14, bad, LINE_20]))

    assert ["nvme0n1", "nvme2n1"] == [r.device for r in parsed.records]
    assert (1 if bad else 0) == len(parsed.skipped)
    assert all(s.startswith("diskstats line 2 ") for s in parsed.skipped)


def test_only_whole_namespaces_are_kept() -> None:
    """Partitions, multipath controller paths and other block devices are dropped."""
    names = ["nvme0n1", "nvme0n1p1", "nvme0n1p2", "nvme0c0n1", "nvme10n12", "sda", "sda1", "loop0", "dm-0",
             "md0", "nvme1n1"]
    text = "\n".join(f"259 {i} {n} 1 2 3 4 5 6 7 8 9 10 11" for i, n in enumerate(names))

    assert ["nvme0n1", "nvme10n12", "nvme1n1"] == [r.device for r in whole_namespaces(parse_diskstats(text).records)]


def test_real_kernel_sample_parses(fixtures) -> None:  # type: ignore[no-untyped-def]
    text = (fixtures / "procfs" / "proc" / "diskstats").read_text()

    parsed = parse_diskstats(text)

    assert len(parsed.records) == len([line for line in text.splitlines() if line.strip()])
    assert [] == parsed.skipped
    assert ["nvme0n1"] == [r.device for r in whole_namespaces(parsed.records)]


@pytest.mark.parametrize(("bad", "why"), [
    ("259 3 nvme3n1 -1 2 3 4 5 6 7 8 9 10 11", "not unsigned integers"),          # a negative counter
    ("259 3 nvme3n1 1 2 3 4 5 6 7 8 9 10 +11", "not unsigned integers"),          # int() would take it
    ("259 3 nvme3n1 1 2 3 4 5 6 7 8 9 10 1.5", "not unsigned integers"),
    ("259 3 nvme3n1 1 2 3 4 5 6 7 8 9 10 \u0661", "not unsigned integers"),      # an Arabic-Indic digit
    ("259 3 nvme3n1 1 2 3 4 5 6 7 8 9 10 18446744073709551616", "a value over 64 bits"),
    ("259 3 nvme3n1 1 2 3 4 5 6 7 8 9 10 " + "9" * 5000, "a value over 64 bits"),  # int() raises over 4,300
    ("259 3 nvme3n1 1 2 3", "6 fields, want 14 or more"),
])
def test_out_of_range_lines_are_skipped_and_say_why(bad: str, why: str) -> None:
    """A line that would become a negative or unservable counter is dropped whole, with its line number."""
    parsed = parse_diskstats("\n".join([LINE_14, bad, LINE_20]))

    assert ["nvme0n1", "nvme2n1"] == [r.device for r in parsed.records]
    (skipped,) = parsed.skipped
    assert skipped.startswith("diskstats line 2 ") and skipped.endswith(why)
    assert len(skipped) < 200


def test_the_largest_64_bit_counter_is_kept() -> None:
    (record,) = parse_diskstats(f"259 3 nvme3n1 {(1 << 64) - 1} 2 3 4 5 6 7 8 9 10 11").records

    assert (1 << 64) - 1 == record.reads_completed


def test_a_device_listed_twice_keeps_its_first_line() -> None:
    """Two lines for one device would be two series with one label set: the later one is dropped."""
    again = LINE_14.replace("47114", "1")

    parsed = parse_diskstats("\n".join([LINE_14, LINE_20, again]))

    assert [("nvme0n1", 47114), ("nvme2n1", 100)] == [(r.device, r.reads_completed) for r in parsed.records]
    assert ["diskstats line 3: nvme0n1 listed again"] == parsed.skipped


def test_a_file_of_garbage_gives_a_bounded_list_of_notes() -> None:
    parsed = parse_diskstats("\n".join([LINE_14, *["garbage"] * 5000]))

    assert ["nvme0n1"] == [r.device for r in parsed.records]
    assert 20 == len(parsed.skipped)
    assert "4981 more diskstats lines skipped" == parsed.skipped[-1]


_NUMBER = st.one_of(st.integers(min_value=-(1 << 70), max_value=1 << 70).map(str), st.text(max_size=6),
                    st.just("9" * 5000))
_LINE = st.one_of(
    st.text(max_size=80),
    st.builds(lambda name, numbers: " ".join(["259", "0", name, *numbers]),
              st.sampled_from(["nvme0n1", "nvme1n1", "sda", "nvme0c0n1"]), st.lists(_NUMBER, min_size=10, max_size=20)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_LINE, max_size=30))
def test_any_text_parses_to_servable_records(lines: list[str]) -> None:
    """Whatever the file holds: no exception, unique devices, every value a 64-bit unsigned counter."""
    parsed = parse_diskstats("\n".join(lines))

    devices = [r.device for r in parsed.records]
    assert len(devices) == len(set(devices))
    for record in parsed.records:
        values = [v for v in astuple(record)[3:] if v is not None]
        assert all(isinstance(v, int) and 0 <= v < 1 << 64 for v in values)
    assert len(parsed.skipped) <= 20
