"""The training hook's added time per step and per collective, hook on vs off (gloo, CPU).

    python -m tests.bench.bench_hook [--rounds 1000] [--calls 40]

Prints figures; asserts nothing. One gloo process (world size 1) so that peers add no noise:
what is measured is the Python the hook runs around each call, which is what the budget is about
(SPEC §5: at most 20 µs per step, 3 µs per blocking collective and 5 µs per async collective +
`wait()`, in-flight bookkeeping included).

Each round times a short block of calls of every operation twice, hook off and hook on, in
alternating order (off-on, then on-off), so the two halves of a pair are a millisecond apart and
a shared machine's drift hits both alike. "Off" is torch's own function and torch's `Work.wait`,
"on" the hook's wrapper (the monitor stays installed throughout; its reporter thread runs). The
figure is the median of the paired differences with its 95% confidence interval (distribution-free:
order statistics of the binomial), in training-thread CPU time (`thread_time`) and in wall time,
which also counts what the hook's other threads take from a 2-core node.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from tests.helpers.net import free_port
from trainmon.torch import TrainingMonitor

ROUNDS = 1000
CALLS = 40  # a block of ~1 ms: short, so each pair sees the machine in one state
Z95 = 1.96


@dataclass
class Samples:
    """Per-block means in µs, hook off and on, thread and wall time: one entry per round."""

    thread: tuple[list[float], list[float]] = field(default_factory=lambda: ([], []))
    wall: tuple[list[float], list[float]] = field(default_factory=lambda: ([], []))


@dataclass(frozen=True)
class Operation:
    """One operation, hook off and on; `waits_patched` is whether `Work.wait` is the hook's while it runs
    (from an async call until the step end) or torch's."""

    off: Callable[[], None]
    on: Callable[[], None]
    waits_patched: bool = False


def timed_block(body: Callable[[], None], calls: int) -> tuple[float, float]:
    """Mean thread and wall time of `body` in µs over `calls` calls."""
    thread0, wall0 = time.thread_time(), time.perf_counter()
    for _ in range(calls):
        body()
    return ((time.thread_time() - thread0) / calls * 1e6, (time.perf_counter() - wall0) / calls * 1e6)


REFERENCE_TABLE: dict[int, float] = {}


def reference_call() -> None:
    """A fixed bit of Python like the hook's bookkeeping (a call, a clock read, a dict store and pop): its
    time tracks how fast this shared machine is at the moment, so runs in different states compare."""
    REFERENCE_TABLE[0] = time.perf_counter()
    REFERENCE_TABLE.pop(0)


def operations(mon: TrainingMonitor) -> dict[str, Operation]:
    """Each operation, hook off (torch's functions, saved before they were wrapped) and on (`dist`'s
    attributes, which the hook patched)."""
    tensor = torch.ones(16)
    all_reduce = getattr(dist.all_reduce, "__trainmon_original__", dist.all_reduce)
    broadcast = getattr(dist.broadcast, "__trainmon_original__", dist.broadcast)
    values = itertools.cycle([2.2 + 0.01 * i for i in range(7)])

    def step() -> None:
        mon.step_begin()
        mon.step_end(samples=8, tokens=128, microbatches=4)

    def step_with_values() -> None:
        loss = next(values)
        mon.step_begin()
        mon.step_end(samples=8, tokens=128, loss=loss, grad_norm=loss / 8)

    def nothing() -> None:
        pass

    return {
        "step boundary (begin+end)": Operation(nothing, step),
        "step with loss+grad_norm": Operation(nothing, step_with_values),
        "all_reduce (blocking)": Operation(lambda: all_reduce(tensor), lambda: dist.all_reduce(tensor)),
        "broadcast (blocking)": Operation(lambda: broadcast(tensor, src=0), lambda: dist.broadcast(tensor, src=0)),
        "all_reduce (async + wait)": Operation(lambda: all_reduce(tensor, async_op=True).wait(),
                                               lambda: dist.all_reduce(tensor, async_op=True).wait()),
        # the hook's `Work.wait` stays until the step end: until then a blocking call passes through it
        "broadcast, after async, same step": Operation(lambda: broadcast(tensor, src=0),
                                                       lambda: dist.broadcast(tensor, src=0), waits_patched=True),
    }


def median_ci(values: list[float]) -> tuple[float, float, float]:
    """The median and its 95% confidence interval from order statistics (needs no distribution)."""
    ordered, n = sorted(values), len(values)
    k = max(0, math.floor(n / 2 - Z95 * math.sqrt(n) / 2))
    return statistics.median(ordered), ordered[k], ordered[min(n - 1, n - 1 - k)]


def paired(off: list[float], on: list[float]) -> list[float]:
    return [b - a for a, b in zip(off, on, strict=True)]


def measure(mon: TrainingMonitor, rounds: int, calls: int) -> tuple[dict[str, Samples], list[float]]:
    ops = operations(mon)
    intercept = mon._collectives.completions.intercept
    results = {name: Samples() for name in ops}
    reference: list[float] = []
    for i in range(rounds):
        reference.append(timed_block(reference_call, calls * 10)[0])
        for name, op in ops.items():
            for on in (False, True) if i % 2 == 0 else (True, False):
                intercept(op.waits_patched and on)  # off is torch's `Work.wait` too
                thread_us, wall_us = timed_block(op.on if on else op.off, calls)
                results[name].thread[on].append(thread_us)
                results[name].wall[on].append(wall_us)
    return results, reference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--calls", type=int, default=CALLS, help="calls per timed block")
    args = parser.parse_args()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    with tempfile.TemporaryDirectory() as tmp:  # no daemon listens: the cost of the hook alone
        mon = TrainingMonitor(job_id="bench", env={"TRAINMON_INGEST_SOCKET": f"{tmp}/none.sock"},
                              flops_per_token=1e9)  # FLOPs accounting on, as MFU needs
        results, reference = measure(mon, args.rounds, args.calls)
        mon.close()
    dist.destroy_process_group()
    print(f"torch {torch.__version__}, gloo world size 1; {args.rounds} rounds, each a block of {args.calls} calls "
          "per operation hook off and on (alternating order); off: torch's functions and Work.wait")
    unit = statistics.median(reference)
    print(f"machine speed: a reference Python call took {unit:.3f} µs (median; {min(reference):.3f}-"
          f"{max(reference):.3f} over the rounds); 'refs' = the added thread time in reference calls")
    print(f"{'operation':<34}{'off µs':>8}{'on µs':>8}{'added µs (thread)':>19}{'95% CI':>15}"
          f"{'added µs (wall)':>17}{'95% CI':>15}{'refs':>7}")
    for name, samples in results.items():
        thread, low, high = median_ci(paired(*samples.thread))
        wall, wall_low, wall_high = median_ci(paired(*samples.wall))
        print(f"{name:<34}{statistics.median(samples.thread[0]):>8.2f}{statistics.median(samples.thread[1]):>8.2f}"
              f"{thread:>19.2f}{f'{low:.2f}..{high:.2f}':>15}{wall:>17.2f}{f'{wall_low:.2f}..{wall_high:.2f}':>15}"
              f"{thread / unit:>7.1f}")
    bare, valued = results["step boundary (begin+end)"].thread[1], results["step with loss+grad_norm"].thread[1]
    added, low, high = median_ci(paired(bare, valued))
    print(f"numerics (hook on, a step with loss+grad_norm minus a bare step in the same round): {added * 1e3:.0f} ns "
          f"per step, 95% CI {low * 1e3:.0f}..{high * 1e3:.0f} ns")


if __name__ == "__main__":
    main()
