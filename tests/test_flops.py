"""trainmon.flops: the dense-transformer estimate and the per-step count."""

from __future__ import annotations

import math

import pytest

from trainmon.flops import FlopsRate, transformer_flops_per_token


def test_the_estimate_is_six_n_plus_attention() -> None:
    """A GPT-3 175B-like model: 6·N dominates, attention adds 12·L·H·T."""
    n, layers, hidden, seq = 174.6e9, 96, 12288, 2048

    assert 1_047_600_000_000 + 28_991_029_248 == transformer_flops_per_token(n, layers, hidden, seq)


@pytest.mark.parametrize("sizes", [(-1, 1, 1, 1), (1, 1, math.inf, 1), (math.nan, 1, 1, 1)])
def test_bad_sizes_are_refused(sizes: tuple[float, int, int, int]) -> None:
    with pytest.raises(ValueError, match="finite and non-negative"):
        transformer_flops_per_token(*sizes)


def test_a_step_counts_by_the_one_unit_given() -> None:
    rates = (FlopsRate(per_token=10), FlopsRate(per_sample=10), FlopsRate(per_step=7), FlopsRate())

    assert [2560.0, 40.0, 7.0, 0.0] == [rate.of_step(4, 256) for rate in rates]


@pytest.mark.parametrize(("kwargs", "message"), [({"per_token": 1, "per_step": 2}, "give one of"),
                                                 ({"per_sample": -5}, "finite and non-negative"),
                                                 ({"per_step": math.nan}, "finite and non-negative")])
def test_ambiguous_or_bad_rates_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FlopsRate(**kwargs)
