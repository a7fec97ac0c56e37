"""Values of /sys/class/infiniband/<device>/ports/<port>/ attributes."""

from __future__ import annotations

import re

# "4: ACTIVE", "5: LinkUp"
_STATE = re.compile(r"\s*(\d+)\s*:\s*(\S.*?)\s*$")
# "100 Gb/sec (4X EDR)", "2.5 Gb/sec (1X SDR)", "0 GB/sec"
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*Gb/sec", re.IGNORECASE)
BYTES_PER_GBIT = 125_000_000


def parse_state(text: str) -> tuple[int, str] | None:
    """`"4: ACTIVE"` -> `(4, "ACTIVE")`; None when the text has no numeric id."""
    match = _STATE.match(text)
    return (int(match.group(1)), match.group(2)) if match else None


def parse_rate(text: str) -> int | None:
    """Port rate in bytes per second, from e.g. `"25 Gb/sec (1X EDR)"`."""
    match = _RATE.match(text)
    return round(float(match.group(1)) * BYTES_PER_GBIT) if match else None


def parse_counter(text: str) -> int | None:
    """A counter file's value; None for `"N/A (no PMA)"` or anything that is not a number."""
    text = text.strip()
    return int(text) if text.isdigit() else None
