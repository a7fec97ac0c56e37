"""Loss and grad-norm spikes, per rank, judged in batches for a few hundred ns a step (SPEC §5). Standard library only.

A grad-norm spike is a value above `grad_norm_factor` x the median of the previous `window` finite
values; a loss spike a value above `loss_factor` x their mean (llm-foundry's rule; Megatron's is
10x a running max). Nothing is judged before `min_history` values are in the window, and a mean or
median that is not positive judges nothing (a negative loss has no "twice as large"). Every finite
value enters its window, spikes included: a lasting new level becomes the reference after half a
window (median) and stops counting, which a divergence rule over the loss itself catches instead.

The training thread only appends each value to a pending list (`SpikeCounter.observe`, about 60 ns);
the values are judged a window's worth at a time, or as soon as anything is read (the reporter thread
reads before every report, so a report counts every step before it). The rule stays exact, and most
batches need no mean or median at all: a window's mean and median are at least its smallest value, so
when the largest value of a batch is at most `factor` x the smallest of the batch and the window before
it, none is a spike; that costs a `sum` (are all finite?), a `min` and a `max` in C, about 40 ns a value.
When that is not enough (a spike, a warm-up's fast fall, a noisy loss, a zero), a tighter bound: the mean
or median of any n of these values is at least that of the n smallest (one sort of the batch and its
window), and only a value above `factor` x that gets its own window's statistic. Per value observed,
judging included (`python -m tests.bench.bench_numerics`): about 70 ns for steady values, 0.2 µs for a
grad norm with zeros, 0.3 µs for a loss as noisy as lognormal(sigma 0.3) (6 spikes in 1000 values).
"""

from __future__ import annotations

import math
import statistics
import threading
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_WINDOW = 100
DEFAULT_MIN_HISTORY = 20
Statistic = Callable[[list[float]], float]  # `mean` or statistics.median
MIN_BATCH = 64  # values judged together at least (a tiny window would otherwise judge every few steps)
# A batch is cleared by its bound only this far below the threshold: the rounding of `factor x bound`
# (or of a running sum) must never clear a value that the exact rule would count.
BOUND_MARGIN = 1.0 - 1e-9


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
    """One value's last value, maximum since the last `take_peak`, non-finite count and spikes.

    `observe` is the training thread's: one append, and every `batch` values the judging of them, unless
    another thread is judging at that moment (then the next step's `observe` does it). Every read judges
    the pending values first, under the lock, so any thread may read.
    """

    __slots__ = ("_batch", "_factor", "_history", "_history_low", "_judging", "_last", "_nonfinite", "_peak",
                 "_pending", "_rules", "_spikes", "_statistic")

    def __init__(self, factor: float, rules: SpikeRules, *, median: bool) -> None:
        self._factor = factor
        self._rules = rules
        self._statistic: Statistic = statistics.median if median else mean
        self._batch = max(rules.window, MIN_BATCH)
        self._pending: list[float] = []  # observed, not judged yet; appended without the lock
        self._judging = threading.Lock()  # held while pending values are judged; guards everything below
        self._history: list[float] = []  # the last `window` finite values, oldest first
        self._history_low = math.inf  # the smallest of them
        self._last: float | None = None
        self._peak: float | None = None
        self._nonfinite = 0
        self._spikes = 0

    def observe(self, value: float) -> None:
        pending = self._pending
        pending.append(value)
        if len(pending) >= self._batch and self._judging.acquire(blocking=False):
            try:
                self._judge_pending()
            finally:
                self._judging.release()

    @property
    def last(self) -> float | None:
        """The last value observed, finite or not."""
        with self._judging:
            self._judge_pending()
            return self._last

    @last.setter
    def last(self, value: float) -> None:
        """A last value from elsewhere (a Megatron-style optimizer's `step()`), not judged."""
        with self._judging:
            self._judge_pending()
            self._last = value

    @property
    def peak(self) -> float | None:
        """The largest finite value since the last `take_peak` (None: none since)."""
        with self._judging:
            self._judge_pending()
            return self._peak

    def take_peak(self) -> float | None:
        """`peak`, which starts again from nothing."""
        with self._judging:
            self._judge_pending()
            peak, self._peak = self._peak, None
            return peak

    @property
    def nonfinite(self) -> int:
        with self._judging:
            self._judge_pending()
            return self._nonfinite

    @property
    def spikes(self) -> int:
        with self._judging:
            self._judge_pending()
            return self._spikes

    def reference(self) -> float:
        """The window's median or mean (the window must not be empty)."""
        with self._judging:
            self._judge_pending()
            return self._statistic(self._history)

    def _judge_pending(self) -> None:
        """Judge the pending values in the order observed (the caller holds `_judging`)."""
        pending = self._pending
        count = len(pending)  # `observe` may append meanwhile (from another thread): those wait for the next call
        if not count:
            return
        values = pending[:count]
        del pending[:count]
        self._last = values[-1]
        total = sum(values)
        if not math.isfinite(total):  # a NaN or an infinity among them (or finite values too large to add up)
            values = [value for value in values if math.isfinite(value)]
            self._nonfinite += count - len(values)
            if not values:
                return
        low, top = min(values), max(values)
        if self._peak is None or top > self._peak:
            self._peak = top
        history, window = self._history, self._rules.window
        bound = min(low, self._history_low)  # every window of this batch holds values no smaller than this
        if not (bound > 0.0 and top <= self._factor * bound * BOUND_MARGIN):
            self._spikes += spikes_in(history + values, len(history), self._factor, self._rules, self._statistic)
        if len(values) == window:
            self._history, self._history_low = values, low
        else:
            self._history = (history + values)[-window:]
            self._history_low = min(self._history)


def spikes_in(series: list[float], start: int, factor: float, rules: SpikeRules, statistic: Statistic) -> int:
    """How many of `series[start:]` exceed `factor` x the `statistic` of the up to `rules.window` values before each.

    Every window is `count` of the values in `series[:-1]`, and the mean or median of any `count` of them is at
    least that of the `count` smallest: for the smallest window judged here, that bounds every window. Only a
    value above `factor` x the bound has its own window's statistic computed.
    """
    window, first, end = rules.window, max(start, rules.min_history), len(series)
    if first >= end:
        return 0
    smallest = min(first, window)
    threshold = factor * max(statistic(sorted(series[:-1])[:smallest]), 0.0) * BOUND_MARGIN
    if max(series[first:]) <= threshold:
        return 0
    spikes = 0
    for index in range(first, end):
        value = series[index]
        if value > threshold:
            reference = statistic(series[max(0, index - window):index])
            spikes += reference > 0.0 and value > factor * reference
    return spikes


def mean(values: list[float]) -> float:
    """`sum` in C (a third of `statistics.fmean`'s time, which rounds the sum exactly: not needed against a factor).

    Finite values near the largest float (1e308) can add up past it: their mean is then taken of the values
    divided first, which cannot overflow.
    """
    total = sum(values)
    if math.isinf(total):
        return sum(value / len(values) for value in values)
    return total / len(values)
