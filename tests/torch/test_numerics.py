"""Loss and grad-norm spikes (SPEC §5): the rolling statistics are exact, non-finite values are not spikes,
and the BLOOM-176B spike series counts where the issue says it must."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from trainmon.torch._numerics import SpikeCounter, SpikeRules
from trainmon.torch._state import Identity, RankState

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
