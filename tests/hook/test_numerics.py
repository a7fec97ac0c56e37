"""Loss and grad-norm spikes (SPEC §5): the rolling statistics are exact, non-finite values are not spikes,
and the BLOOM-176B spike series counts where the issue says it must. The counter judges values in batches
(cleared at once by a bound, or one by one): whenever and from whichever thread it is read, it counts what
judging each value against its own window counts."""

from __future__ import annotations

import math
import random
import statistics
import sys
import threading
from collections.abc import Callable
from typing import SupportsIndex, overload

import pytest

from trainmon.hook.numerics import SpikeCounter, SpikeRules
from trainmon.hook.state import Identity, RankState

IDENTITY = Identity(job_id="j", rank=0, pid=1, start_time=0.0)
# bigscience tr11-176B-ml chronicles: the grad norm over the five steps of the first spike, and the loss
BLOOM_GRAD_NORMS = (0.24, 0.95, 2.4, 16.0, 145.0, 960.0)
BLOOM_LOSSES = (2.2, 2.2, 2.3, 2.6, 3.4, 5.1)


def test_the_rolling_mean_and_median_equal_the_last_values_recomputed_from_scratch() -> None:
    rng = random.Random(7)
    rules = SpikeRules(window=100)
    mean, median = SpikeCounter(2.0, rules, median=False), SpikeCounter(10.0, rules, median=True)
    values: list[float] = []
    for _ in range(1000):
        value = rng.lognormvariate(0.0, 1.0)
        mean.observe(value)
        median.observe(value)
        values.append(value)
        last = values[-100:]
        assert median.reference() == statistics.median(last)
        assert mean.reference() == pytest.approx(statistics.fmean(last), rel=1e-12)


def healthy_state(rng: random.Random, steps: int = 150) -> RankState:
    state = RankState()
    for _ in range(steps):
        state.set_loss(2.2 + rng.gauss(0.0, 0.03))
        state.set_grad_norm(0.25 + abs(rng.gauss(0.0, 0.03)))
    return state


def test_the_bloom_spike_counts_grad_norm_spikes_first_and_the_loss_spike_at_its_peak() -> None:
    state = healthy_state(random.Random(1))
    assert (state.loss_spikes, state.grad_norm_spikes) == (0, 0)
    seen = []
    for grad_norm, loss in zip(BLOOM_GRAD_NORMS, BLOOM_LOSSES, strict=True):
        state.set_grad_norm(grad_norm)
        state.set_loss(loss)
        seen.append((state.grad_norm_spikes, state.loss_spikes))
    # 2.4 is 10x the median of ~0.27, so three grad-norm steps before the loss doubles at 5.1
    assert seen == [(0, 0), (0, 0), (0, 0), (1, 0), (2, 0), (3, 1)]
    report = state.report(IDENTITY, seq=1)
    assert (report.loss_max, report.grad_norm_max, report.loss_spikes, report.grad_norm_spikes) == (5.1, 960.0, 1, 3)


def test_a_warm_up_with_falling_loss_and_noisy_grad_norm_counts_no_spike() -> None:
    rng = random.Random(3)
    state = RankState()
    for step in range(600):
        state.set_loss(2.0 + 8.0 * math.exp(-step / 60) + rng.gauss(0.0, 0.05))
        state.set_grad_norm((0.3 + 3.0 * math.exp(-step / 80)) * rng.lognormvariate(0.0, 0.3))
    assert (state.loss_spikes, state.grad_norm_spikes) == (0, 0)


def test_non_finite_values_are_counted_as_today_and_never_as_spikes_or_maxima() -> None:
    state = healthy_state(random.Random(2))
    state.report(IDENTITY, seq=1)
    for bad in (math.nan, math.inf, -math.inf):
        state.set_loss(bad)
        state.set_grad_norm(bad)
    report = state.report(IDENTITY, seq=2)
    assert (report.nonfinite_losses, report.loss_spikes, report.grad_norm_spikes) == (3, 0, 0)
    assert (report.loss_max, report.grad_norm_max) == (None, None)
    assert report.grad_norm == -math.inf  # the last value is still the last value


def test_the_maxima_cover_the_steps_since_the_previous_report() -> None:
    state = RankState()
    for loss in (3.0, 9.0, 4.0):
        state.set_loss(loss)
    assert state.report(IDENTITY, seq=1).loss_max == 9.0
    state.set_loss(5.0)
    assert state.report(IDENTITY, seq=2).loss_max == 5.0
    assert state.report(IDENTITY, seq=3).loss_max is None


def test_nothing_is_judged_before_the_window_holds_min_history_values() -> None:
    counter = SpikeCounter(2.0, SpikeRules(min_history=5), median=False)
    for value in (1.0, 1.0, 1.0, 1.0, 100.0):
        counter.observe(value)
    assert counter.spikes == 0
    counter.observe(100.0)  # 100 > 2 x mean(1, 1, 1, 1, 100) = 41.6
    assert counter.spikes == 1


def test_a_negative_loss_mean_judges_nothing() -> None:
    counter = SpikeCounter(2.0, SpikeRules(min_history=1), median=False)
    for value in (-5.0, -5.0, 3.0):
        counter.observe(value)
    assert counter.spikes == 0


def test_a_spike_among_losses_whose_sum_overflows_is_counted() -> None:
    """100 losses of 5e307 add up past the largest float: their mean is still 5e307, and 1.5e308 is a spike."""
    counter = SpikeCounter(2.0, SpikeRules(window=100), median=False)
    for _ in range(100):
        counter.observe(5e307)
    counter.observe(1.5e308)

    assert (1, 0) == (counter.spikes, counter.nonfinite)
    assert 5.1e307 == pytest.approx(counter.reference(), rel=1e-12)  # the last 100, the spike among them


@pytest.mark.parametrize("rules", [{"loss_factor": 1.0}, {"grad_norm_factor": math.nan}, {"window": 0},
                                   {"min_history": 200}])
def test_thresholds_that_cannot_work_are_refused(rules: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"must be|need"):
        SpikeRules(**rules)  # type: ignore[arg-type]


def test_the_factors_are_the_monitors_to_choose() -> None:
    strict, loose = (RankState(SpikeRules(loss_factor=f, min_history=3)) for f in (1.5, 3.0))
    for state in (strict, loose):
        for loss in (2.0, 2.0, 2.0, 4.0):
            state.set_loss(loss)
    assert (strict.loss_spikes, loose.loss_spikes) == (1, 0)


Series = Callable[[random.Random], list[float]]


def healthy_with_spikes(rng: random.Random) -> list[float]:
    """A noisy level with spikes of 3-50x planted, and a NaN or an infinity now and then."""
    values = [rng.lognormvariate(0.0, 0.3) for _ in range(3000)]
    for index in rng.sample(range(len(values)), 60):
        values[index] *= rng.uniform(3.0, 50.0)
    for index in rng.sample(range(len(values)), 20):
        values[index] = rng.choice((math.nan, math.inf, -math.inf))
    return values


def warm_up(rng: random.Random) -> list[float]:
    """A fast fall from 10x the final level: batches the bound cannot clear."""
    return [(0.3 + 3.0 * math.exp(-step / 80)) * rng.lognormvariate(0.0, 0.5) for step in range(1500)]


def around_zero(rng: random.Random) -> list[float]:
    """Negative and zero values: references at or below zero judge nothing, the others still do."""
    return [rng.choice((0.0, rng.gauss(0.05, 1.0), rng.expovariate(1.0) * 20)) for _ in range(1500)]


def level_shifts(rng: random.Random) -> list[float]:
    """A level that falls 10x and comes back, with values near either factor x the level: the windows just
    after a fall hold the smallest values of their batch, so a bound only a little too high misses spikes."""
    return [(10.0 if step // 150 % 2 else 1.0) * rng.choice((rng.lognormvariate(0.0, 0.1), rng.uniform(1.5, 2.5),
                                                              rng.uniform(8.0, 12.0))) for step in range(3000)]


def judged_one_by_one(values: list[float], factor: float, *, median: bool, rules: SpikeRules) -> int:
    """The rule as SPEC §5 words it: each finite value against the window of finite values before it."""
    window: list[float] = []
    spikes = 0
    for value in filter(math.isfinite, values):
        if len(window) >= rules.min_history:
            reference = statistics.median(window) if median else statistics.fmean(window)
            spikes += reference > 0.0 and value > factor * reference
        window = [*window, value][-rules.window:]
    return spikes


@pytest.mark.parametrize("series", [healthy_with_spikes, warm_up, around_zero, level_shifts])
@pytest.mark.parametrize("median", [True, False], ids=["median", "mean"])
@pytest.mark.parametrize("reads", ["every step", "at random", "at the end"])
def test_the_counter_counts_what_judging_each_value_alone_counts(series: Series, median: bool, reads: str) -> None:
    rng = random.Random(f"{series.__name__} {median} {reads}")
    values = series(rng)
    factor = 10.0 if median else 2.0
    rules = SpikeRules(window=rng.choice((30, 100)))
    counter = SpikeCounter(factor, rules, median=median)
    peaks: list[float | None] = []
    since_read: list[float] = []
    for value in values:
        counter.observe(value)
        since_read.append(value)
        if reads == "every step" or (reads == "at random" and rng.random() < 0.02):
            assert counter.last is value
            peaks.append(counter.take_peak())
            assert peaks[-1] == max(filter(math.isfinite, since_read), default=None)
            since_read = []
    expected = judged_one_by_one(values, factor, median=median, rules=rules)
    assert counter.spikes == expected
    assert counter.nonfinite == sum(not math.isfinite(value) for value in values)
    assert counter.take_peak() == max(filter(math.isfinite, since_read), default=None)
    if series is healthy_with_spikes:
        assert expected >= 30  # the planted spikes, not a series where nothing is ever judged


def test_a_reader_thread_loses_no_value_of_the_training_thread() -> None:
    """The training thread appends without the lock and judges every batch unless the reader is judging:
    with threads switching as often as CPython allows, every value is judged once and every peak is taken."""
    values = healthy_with_spikes(random.Random(5))
    rules = SpikeRules()
    counter = SpikeCounter(10.0, rules, median=True)
    peaks: list[float] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            peak = counter.take_peak()
            peaks.extend([] if peak is None else [peak])
            assert counter.spikes >= 0

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    reader = threading.Thread(target=read)
    try:
        reader.start()
        for value in values:
            counter.observe(value)
    finally:
        done.set()
        reader.join()
        sys.setswitchinterval(previous)
    peaks.extend([] if (peak := counter.take_peak()) is None else [peak])
    assert counter.spikes == judged_one_by_one(values, 10.0, median=True, rules=rules)
    assert counter.nonfinite == 20
    assert max(peaks) == max(filter(math.isfinite, values))


class ObservedWhileTaken(list[float]):
    """A pending list into which the training thread appends `late` just as the judging thread takes its values."""

    def __init__(self, late: float) -> None:
        super().__init__()
        self.late: float | None = late

    @overload
    def __getitem__(self, index: SupportsIndex) -> float: ...

    @overload
    def __getitem__(self, index: slice) -> list[float]: ...

    def __getitem__(self, index: SupportsIndex | slice) -> float | list[float]:
        taken = super().__getitem__(index)
        if isinstance(index, slice) and self.late is not None:
            self.append(self.late)
            self.late = None
        return taken


def test_a_value_observed_while_another_thread_takes_the_pending_ones_waits_for_the_next_judging() -> None:
    counter = SpikeCounter(2.0, SpikeRules(min_history=1), median=False)
    counter._pending = ObservedWhileTaken(late=9.0)
    counter.observe(1.0)
    assert counter.last == 1.0  # 1.0 judged; 9.0 observed meanwhile, left for the next read
    assert (counter.spikes, counter.last, counter.take_peak()) == (1, 9.0, 9.0)
