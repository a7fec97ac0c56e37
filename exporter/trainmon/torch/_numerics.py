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
(O(log n) comparisons) and the list moves at most `window` pointers in C — about 0.2 µs for 100,
measured by `tests/bench/bench_hook` — never a sort.
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


class RollingWindow:
    """The last `size` values in arrival order (a fixed ring) and sorted, with their running sum."""

    __slots__ = ("_next", "_ring", "_size", "_sorted", "_total")

    def __init__(self, size: int) -> None:
        self._ring: list[float] = []
        self._sorted: list[float] = []
        self._next = 0  # the ring slot the next value replaces once the ring is full
        self._total = 0.0
        self._size = size

    def __len__(self) -> int:
        return len(self._ring)

    def mean(self) -> float:
        return self._total / len(self._ring)

    def median(self) -> float:
        values, middle = self._sorted, len(self._sorted) // 2
        return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2

    def add(self, value: float) -> None:
        ring = self._ring
        if len(ring) < self._size:
            ring.append(value)
            self._total += value
        else:
            slot = self._next
            old = ring[slot]
            ring[slot] = value
            del self._sorted[bisect.bisect_left(self._sorted, old)]
            self._next = slot = (slot + 1) % self._size
            self._total = self._total - old + value if slot else math.fsum(ring)
        bisect.insort(self._sorted, value)


class SpikeCounter:
    """One value's spikes: `observe` judges a finite value against the window, then adds it."""

    __slots__ = ("_factor", "_min_history", "_use_median", "spikes", "window")

    def __init__(self, factor: float, rules: SpikeRules, *, median: bool) -> None:
        self._factor = factor
        self._min_history = rules.min_history
        self._use_median = median
        self.window = RollingWindow(rules.window)
        self.spikes = 0

    def observe(self, value: float) -> None:
        window = self.window
        if len(window) >= self._min_history:
            reference = window.median() if self._use_median else window.mean()
            if reference > 0.0 and value > self._factor * reference:
                self.spikes += 1
        window.add(value)
