"""Field-value decoding helpers: wrapping counters."""

from __future__ import annotations

from trainmon.nvml.fields import RawField, Unwrapped

U32 = 1 << 32


def test_a_wrapping_counter_keeps_growing() -> None:
    """A 32-bit counter that wraps adds what it counted past the wrap."""
    counter = Unwrapped()
    totals = [counter.update(RawField(v, U32)) for v in (U32 - 10, U32 - 4, 6, 20)]

    assert [U32 - 10, U32 - 4, U32 + 6, U32 + 20] == totals


def test_after_rebase_the_next_value_is_a_new_base() -> None:
    """After an NVML re-init (maybe a driver reload) a smaller value is a restart, not a wrap."""
    counter = Unwrapped()
    counter.update(RawField(1000, U32))
    counter.rebase()

    assert [1000, 1050] == [counter.update(RawField(v, U32)) for v in (5, 55)]


def test_a_non_wrapping_type_going_back_is_not_a_wrap() -> None:
    """A double that decreases (a reset) adds nothing instead of a 2**64 jump."""
    counter = Unwrapped()

    assert [100, 100, 110] == [counter.update(RawField(v, 0)) for v in (100, 3, 13)]
