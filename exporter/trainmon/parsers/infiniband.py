"""Values of /sys/class/infiniband/<device>/ports/<port>/ attributes."""

from __future__ import annotations

import re
from typing import NamedTuple

from trainmon.parsers.counters import MAX_COUNTER

# "4: ACTIVE", "5: LinkUp"; the kernel's ids are single digits and its longest name is
# "PortConfigurationTraining" (the name becomes a label value, so it is bounded).
_STATE = re.compile(r"\s*(\d{1,3})\s*:\s*(\S.{0,31}?)\s*$")
# "100 Gb/sec (4X EDR)", "2.5 Gb/sec (1X SDR)", "0 GB/sec"; no link is faster than 99,999 Gb/s.
_RATE = re.compile(r"\s*(\d{1,5}(?:\.\d{1,3})?)\s*Gb/sec", re.IGNORECASE)
# sysfs counters are 64-bit: at most 20 digits (and int() refuses over 4,300 anyway).
_COUNTER = re.compile(r"[0-9]{1,20}")
BYTES_PER_GBIT = 125_000_000


class PortState(NamedTuple):
    """A port's `state` or `phys_state`: the kernel's id and its name."""

    id: int
    name: str


def parse_state(text: str) -> PortState | None:
    """`"4: ACTIVE"` -> `PortState(4, "ACTIVE")`; None when the text has no numeric id."""
    match = _STATE.match(text)
    return PortState(int(match.group(1)), match.group(2)) if match else None


def parse_rate(text: str) -> int | None:
    """Port rate in bytes per second, from e.g. `"25 Gb/sec (1X EDR)"`."""
    match = _RATE.match(text)
    return round(float(match.group(1)) * BYTES_PER_GBIT) if match else None


def parse_counter(text: str) -> int | None:
    """A counter file's value; None for `"N/A (no PMA)"`, a value over 64 bits, or anything not a number."""
    text = text.strip()
    if not _COUNTER.fullmatch(text):
        return None
    value = int(text)
    return value if value <= MAX_COUNTER else None
