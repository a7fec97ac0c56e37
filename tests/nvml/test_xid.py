"""The XID ledger: this node's own GPUs' buses are never refused, whatever other buses flood it."""

from __future__ import annotations

from trainmon.nvml.xid import MAX_KEYS, Source, XidCounts, XidKey

OWN = "0000:18:00"
FLOOD = 100_000


def foreign(n: int) -> XidKey:
    return XidKey(f"{1 + (n >> 16):04x}:{(n >> 8) & 0xff:02x}:{n & 0xff:02x}", 79)


def test_a_flood_of_foreign_buses_is_bounded_and_counted_and_never_refuses_an_own_bus() -> None:
    counts = XidCounts()
    counts.claim([OWN])

    for n in range(1, FLOOD + 1):
        counts.record(foreign(n), float(n), Source.KMSG)
    counted = counts.record(XidKey(OWN, 79), 1.0e6, Source.KMSG)

    assert counted
    assert (MAX_KEYS, FLOOD - MAX_KEYS) == (len(counts.snapshot()) - 1, counts.refused)
    assert 1 == next(e.count for e in counts.snapshot() if e.key.bus == OWN)


def test_a_bus_claimed_after_its_events_stops_counting_against_the_foreign_bound() -> None:
    """The kernel log's history can be read before NVML names the buses: claiming them frees their room."""
    counts = XidCounts()
    for n in range(MAX_KEYS):
        counts.record(foreign(n), float(n), Source.KMSG)
    assert not counts.record(foreign(MAX_KEYS), 0.0, Source.KMSG)

    counts.claim([foreign(0).bus])

    assert counts.record(foreign(MAX_KEYS), 0.0, Source.KMSG)
    assert 1 == counts.refused


def test_nvml_events_the_kernel_log_has_read_past_are_dropped_and_the_rest_count_when_it_fails() -> None:
    """No XID lost or counted twice at the switch: the first event is in what the log's reader read, the
    second arrived after its last pass; once the log fails, that one and every later one count."""
    counts = XidCounts()
    key = XidKey(OWN, 48)
    assert not counts.record(key, 1.0, Source.NVML)
    counts.kmsg_read_past(counts.nvml_arrivals())
    assert not counts.record(key, 2.0, Source.NVML)
    assert () == counts.snapshot()

    counts.kmsg_unreadable()
    assert counts.record(key, 3.0, Source.NVML)
    [entry] = counts.snapshot()
    assert (2, 3.0, 3.0) == (entry.count, entry.last_seen, entry.last_actionable)


def test_without_a_kernel_log_nvml_events_count() -> None:
    counts = XidCounts(kernel_log=False)
    assert counts.record(XidKey(OWN, 48), 1.0, Source.NVML)
    assert [1] == [entry.count for entry in counts.snapshot()]
