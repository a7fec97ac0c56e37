"""Loss and grad-norm spikes, per rank and O(1) per step (SPEC §5). Standard library only.

A grad-norm spike is a value above `grad_norm_factor` x the median of the previous `window` finite
values; a loss spike a value above `loss_factor` x their mean (llm-foundry's rule; Megatron's is
10x a running max). Nothing is judged before `min_history` values are in the window, and a mean or
median that is not positive judges nothing (a negative loss has no "twice as large"). Every finite
value enters its window, spikes included: a lasting new level becomes the reference after half a
window (median) and stops counting, which a divergence rule over the loss itself catches instead.

Both statistics are exact, not estimates. The mean is a running sum over a fixed ring, recomputed
from the ring once per wrap so that float drift never builds up. The median keeps the window's
values in a sorted list: each step one `bisect` finds the value leaving and one the value entering
(O(log n) comparisons) and the list moves at most `window` pointers in C, never a sort. Judging and
recording one value costs about 0.6 µs of Python (`tests/bench/bench_hook`: a step that passes a loss
and a grad norm went from 2.7 to 3.9 µs of hook time).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

DEFAULT_WINDOW = 100
DEFAULT_MIN_HISTORY = 20


@dataclass(frozen=True, slots=True)
class SpikeRules:
    """The thresholds `TrainingMonitor` is given; `window` and `min_history` count steps."""

    loss_factor: float = 2.0
    grad_norm_factor: float = 10.0
    window: int = DEFAULT_WINDOW
    min_history: int = DEFAULT_MIN_HISTORY

    def __post_init__(self) -> None:
        for name in ("loss_factor", "grad_norm_factor"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 1.0):
                raise ValueError(f"{name} must be a finite number above 1, not {value!r}")
        if not 1 <= self.min_history <= self.window <= 10_000:
            raise ValueError(f"need 1 <= min_history ({self.min_history}) <= window ({self.window}) <= 10000")


class SpikeCounter:
    """One value's spikes over a fixed ring of its last `window` finite values: `observe` judges a value against
    the ring's mean (or median), then adds it. One method and local names: it runs twice every step."""

    __slots__ = ("_factor", "_min_history", "_next", "_ring", "_size", "_sorted", "_total", "spikes")

    def __init__(self, factor: float, rules: SpikeRules, *, median: bool) -> None:
        self._factor = factor
        self._min_history = rules.min_history
        self._size = rules.window
        self._ring: list[float] = []
        self._sorted: list[float] | None = [] if median else None  # the ring's values in order (median only)
        self._next = 0  # the ring slot the next value replaces once the ring is full
        self._total = 0.0  # the ring's sum (mean only)
        self.spikes = 0

    def reference(self) -> float:
        """The ring's median or mean (the ring must not be empty)."""
        ordered, count = self._sorted, len(self._ring)
        if ordered is None:
            return self._total / count
        middle = count // 2
        return ordered[middle] if count % 2 else (ordered[middle - 1] + ordered[middle]) / 2

    def observe(self, value: float) -> None:
        ring, ordered = self._ring, self._sorted
        count = len(ring)
        if count >= self._min_history:
            if ordered is None:
                reference = self._total / count
            else:
                middle = count // 2
                reference = ordered[middle] if count % 2 else (ordered[middle - 1] + ordered[middle]) / 2
            if reference > 0.0 and value > self._factor * reference:
                self.spikes += 1
        if count < self._size:
            ring.append(value)
            old = None
        else:
            slot = self._next
            old = ring[slot]
            ring[slot] = value
            self._next = (slot + 1) % count
        if ordered is None:
            if old is None:
                self._total += value
            elif self._next:
                self._total += value - old
            else:  # once per wrap, re-summed exactly: float drift never builds up
                self._total = math.fsum(ring)
        else:
            if old is not None:
                del ordered[bisect.bisect_left(ordered, old)]
            bisect.insort(ordered, value)
