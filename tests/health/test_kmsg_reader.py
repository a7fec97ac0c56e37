"""The kernel-log reader on real files: history at start, following, bad lines, and one count per event."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.net import wait_until
from trainmon.health.kmsg_reader import MAX_PARTIAL, READ_SIZE, KmsgReader
from trainmon.nvml.xid import Source, XidCounts, XidKey

FIXTURES = Path(__file__).parent.parent / "fixtures" / "kmsg"
BOOT = 1_700_000_000.0


def counts_by_key(counts: XidCounts) -> dict[tuple[str, int], int]:
    return {(e.key.bus, e.key.xid): e.count for e in counts.snapshot()}


@pytest.fixture
def log_file(tmp_path: Path) -> Path:
    path = tmp_path / "kmsg"
    shutil.copy(FIXTURES / "nvrm.kmsg", path)
    return path


@pytest.fixture
def counts() -> XidCounts:
    return XidCounts()


@pytest.fixture
def reader(log_file: Path, counts: XidCounts) -> Iterator[KmsgReader]:
    reader = KmsgReader(log_file, counts, boot=lambda: BOOT, now=lambda: BOOT + 1_000)
    yield reader
    reader.stop()


def test_history_is_read_before_start_returns(reader: KmsgReader, counts: XidCounts) -> None:
    reader.start()

    assert {("0000:18:00", 13): 2, ("0000:28:00", 31): 1, ("0000:c1:00", 48): 1, ("0000:38:00", 94): 1,
            ("0000:48:00", 79): 1, ("0000:28:00", 79): 1} == counts_by_key(counts)
    last = {e.key: e.last_seen for e in counts.snapshot()}
    assert BOOT + 90.0 == last[XidKey("0000:28:00", 79)]
    status = reader.status()
    assert (True, "", 2, 7) == (status.readable, status.error, status.malformed, status.xids)


def test_lines_appended_later_are_followed_and_a_partial_line_waits(reader: KmsgReader, counts: XidCounts,
                                                                     log_file: Path) -> None:
    reader.start()
    with log_file.open("a") as log:
        log.write("4,2000,95000000,-;NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=x, ")
        log.flush()
        log.write("Graphics Exception\n4,2001,96000000,-;NVRM: Xid (PCI:0000:18:00): 62, pid=1, name=x, PMU halt\n")

    wait_until(lambda: counts_by_key(counts).get(("0000:18:00", 62)), timeout=10)
    assert 3 == counts_by_key(counts)[("0000:18:00", 13)]


def test_while_the_log_is_readable_nvml_events_add_nothing(reader: KmsgReader, counts: XidCounts) -> None:
    """NVML's XID 94, stamped by the wall clock as the log's or not, is in the log: the log counts it."""
    reader.start()

    assert not counts.record(XidKey("0000:38:00", 94), BOOT + 64.5, Source.NVML)
    assert not counts.record(XidKey("0000:38:00", 94), BOOT + 124.5, Source.NVML)
    assert 1 == counts_by_key(counts)[("0000:38:00", 94)]


def test_nvml_first_then_the_log_counts_once(log_file: Path, counts: XidCounts) -> None:
    counts.record(XidKey("0000:28:00", 31), BOOT + 62.2, Source.NVML)
    reader = KmsgReader(log_file, counts, boot=lambda: BOOT)
    reader.start()
    reader.stop()

    assert 1 == counts_by_key(counts)[("0000:28:00", 31)]


@pytest.mark.parametrize("nvml_first", [True, False])
def test_a_non_fatal_nvlink5_line_is_counted_but_asks_for_nothing_whichever_source_came_first(
        tmp_path: Path, counts: XidCounts, nvml_first: bool) -> None:
    """NVML's event for the same XID 145 cannot tell non-fatal from fatal: the kernel log's word stands."""
    path = tmp_path / "kmsg"
    path.write_text("4,1,72000000,-;NVRM: Xid (PCI:0000:18:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 "
                    "(0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)\n")
    key = XidKey("0000:18:00", 145)
    reader = KmsgReader(path, counts, boot=lambda: BOOT)
    if nvml_first:
        counts.record(key, BOOT + 72.3, Source.NVML)
    reader.start()
    reader.stop()
    if not nvml_first:
        counts.record(key, BOOT + 72.3, Source.NVML)
    [entry] = counts.snapshot()

    assert (1, BOOT + 72.0, None) == (entry.count, entry.last_seen, entry.last_actionable)


@pytest.mark.parametrize("make", ["directory", "dangling"])
def test_an_unreadable_log_says_why_and_nvml_events_still_count(tmp_path: Path, counts: XidCounts,
                                                                make: str) -> None:
    path = tmp_path / "kmsg"
    if make == "directory":
        path.mkdir()
    else:
        path.symlink_to(tmp_path / "gone")
    reader = KmsgReader(path, counts)
    reader.start()

    status = reader.status()
    assert not status.readable
    assert str(path) in status.error
    assert "--kmsg" in status.error
    assert counts.record(XidKey("0000:18:00", 79), BOOT, Source.NVML)


def test_a_flood_of_distinct_garbage_codes_stays_bounded(tmp_path: Path, counts: XidCounts) -> None:
    path = tmp_path / "kmsg"
    lines = [f"4,{i},{i},-;NVRM: Xid (PCI:0000:18:00): {i % 2000}, pid=1, name=x, y\n" for i in range(20_000)]
    path.write_text("".join(lines) + "x" * 70_000)
    reader = KmsgReader(path, counts, boot=lambda: BOOT)
    reader.start()
    reader.stop()

    assert 999 == len(counts.snapshot())  # codes 1..999; 0 and >= 1000 are garbled
    assert 10 + 10_000 + 1 == reader.status().malformed  # code 0, codes >= 1000, the unterminated line



def test_forged_records_count_nothing_and_the_drivers_own_still_counts(tmp_path: Path, counts: XidCounts) -> None:
    """A segfault report naming a file called like an XID (kernel facility, not at the start), a user-facility
    record, and the tail of a line too long to keep (cut where a read ends), which is no record of its own."""
    path = tmp_path / "kmsg"
    spoof = "NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus."
    head = (f"6,1,1000000,-;a.out[4242]: segfault at 0 ip 00007f3c1e2a1000 sp 00007ffd5e8b3c40 error 4 in {spoof}"
            "[1000,7f3c1e2a0000+1000] likely on CPU 0 (core 0, socket 0)\n"
            f"14,2,2000000,-;{spoof}\n")
    too_long = MAX_PARTIAL + 1 + (-(len(head) + MAX_PARTIAL + 1)) % READ_SIZE  # ends where a read ends
    path.write_text(head + "y" * too_long + f"4,3,3000000,-;{spoof}\n"
                    "4,4,4000000,-;NVRM: Xid (PCI:0000:28:00): 13, pid=1, name=x, Graphics Exception\n")
    reader = KmsgReader(path, counts, boot=lambda: BOOT)
    reader.start()
    reader.stop()

    assert {("0000:28:00", 13): 1} == counts_by_key(counts)
    assert (1, 1) == (reader.status().xids, reader.status().malformed)
