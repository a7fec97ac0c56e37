"""What the hook's spike counters cost per value observed, judging included, on series of different shapes.

    python -m tests.bench.bench_numerics [--values 20000] [--rounds 7]

Prints figures; asserts nothing. `SpikeCounter.observe` appends and judges a window's worth at a time: a batch
its cheapest bound clears costs a `min`, a `max` and a `sum` in C; the others a sort and the statistic of each
value above a tighter bound. Training-thread CPU time, the best of the rounds; the loop's own cost is taken off
(a call to a function that does nothing).
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections.abc import Callable

from trainmon.hook.numerics import SpikeCounter, SpikeRules

Series = Callable[[random.Random, int], list[float]]

SERIES: dict[str, Series] = {
    "steady loss (2.2 +- 1.5%)": lambda rng, n: [2.2 * (1 + rng.gauss(0.0, 0.015)) for _ in range(n)],
    "steady grad norm (lognormal 0.3)": lambda rng, n: [0.25 * rng.lognormvariate(0.0, 0.3) for _ in range(n)],
    "noisy loss (lognormal 0.3)": lambda rng, n: [2.2 * rng.lognormvariate(0.0, 0.3) for _ in range(n)],
    "grad norm, a zero every 50 steps": lambda rng, n: [
        0.0 if i % 50 == 0 else 0.25 * rng.lognormvariate(0.0, 0.3) for i in range(n)],
    "warm-up (10x fall), every 2000 steps": lambda rng, n: [
        (0.3 + 3.0 * math.exp(-(i % 2000) / 100)) * rng.lognormvariate(0.0, 0.3) for i in range(n)],
    "negative loss (-1 +- 0.3)": lambda rng, n: [rng.gauss(-1.0, 0.3) for _ in range(n)],
}


def ns_per_value(call: Callable[[float], None], values: list[float], finish: Callable[[], object]) -> float:
    """CPU time of this thread per value: `call` on each, then `finish` (the counter judges what is left)."""
    start = time.thread_time()
    for value in values:
        call(value)
    finish()
    return (time.thread_time() - start) / len(values) * 1e9


def nothing(_: float) -> None:
    pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--values", type=int, default=20_000, help="values per series")
    parser.add_argument("--rounds", type=int, default=7, help="rounds per figure (the best is printed)")
    args = parser.parse_args()
    rules = SpikeRules()
    print(f"SpikeCounter.observe, window {rules.window}, the last batch judged too: CPU ns per value, best of "
          f"{args.rounds} rounds of {args.values} values, less the loop's own (a call to a function doing nothing)")
    print(f"{'series':<36}{'loss rule':>11}{'grad-norm rule':>16}{'spikes per 1000':>17}")
    for name, make in SERIES.items():
        values = make(random.Random(name), args.values)
        loop = min(ns_per_value(nothing, values, int) for _ in range(args.rounds))
        costs, spikes = [], []
        for factor, median in ((2.0, False), (10.0, True)):  # mean x 2, median x 10
            counters = [SpikeCounter(factor, rules, median=median) for _ in range(args.rounds)]
            costs.append(min(ns_per_value(counter.observe, values, counter.reference) for counter in counters) - loop)
            spikes.append(f"{counters[0].spikes * 1000 / len(values):.1f}")
        print(f"{name:<36}{costs[0]:>11.0f}{costs[1]:>16.0f}{' / '.join(spikes):>17}")


if __name__ == "__main__":
    main()
