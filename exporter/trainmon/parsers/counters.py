"""Unsigned 64-bit counters as the kernel and the file-system clients print them: ASCII decimal digits."""

from __future__ import annotations

MAX_COUNTER = (1 << 64) - 1
MAX_COUNTER_DIGITS = len(str(MAX_COUNTER))


def u64(text: str) -> int | None:
    """`text` as a counter, or None: not ASCII digits, or over 64 bits.

    The length is checked before `int()`, which raises ValueError past 4,300 digits (one such value must drop
    only what it feeds), and `isascii()` keeps out the other scripts' digits that `int()` accepts.
    """
    if not (0 < len(text) <= MAX_COUNTER_DIGITS and text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if value <= MAX_COUNTER else None
