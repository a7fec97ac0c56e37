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
