"""The training hook's added CPU time per step and per collective, hook on vs off (gloo, CPU).

    python -m tests.bench.bench_hook

Prints figures; asserts nothing. One gloo process (world size 1) so that peers add no noise:
what is measured is the Python the hook runs around each call, which is what the budget is about
(SPEC §5: at most 20 µs per step, 3 µs per blocking collective and 5 µs per async collective +
`wait()`, in-flight bookkeeping included). Each figure is the median over alternating rounds. The last
line is what the loss and grad-norm numerics add to a step (tests/bench/bench_numerics.py: on other series).
"""

from __future__ import annotations

import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from tests.helpers.net import free_port
from trainmon.torch import TrainingMonitor

ROUNDS = 200  # many short rounds: the median of paired differences is what settles, not one long mean
CALLS = 250


def mean_call_us(body: Callable[[], None]) -> float:
    """CPU time of the calling thread per call: what the hook adds to the training thread, and
    unlike wall time not inflated when other processes share the cores."""
    start = time.thread_time()
    for _ in range(CALLS):
        body()
    return (time.thread_time() - start) / CALLS * 1e6


REFERENCE_TABLE: dict[int, float] = {}


def reference_call() -> None:
    """A fixed bit of Python like the hook's bookkeeping (a call, a clock read, a dict store and pop): its
    time tracks how fast this shared machine is at the moment, so runs in different states compare."""
    REFERENCE_TABLE[0] = time.perf_counter()
    REFERENCE_TABLE.pop(0)


def workloads(mon: TrainingMonitor) -> dict[str, Callable[[bool], None]]:
    """Each operation, hook on (True) or off (False); collectives through `dist`'s attributes, which
    the hook patches, so off is torch alone (no patched `Work.wait` either)."""
    tensor = torch.ones(16)

    def step(on: bool) -> None:
        if on:
            mon.step_begin()
            mon.step_end(samples=8, tokens=128)

    values = itertools.cycle([2.2 + 0.01 * i for i in range(7)])

    def step_with_values(on: bool) -> None:
        loss = next(values)
        if on:
            mon.step_begin()
            mon.step_end(samples=8, tokens=128, loss=loss, grad_norm=loss / 8)

    return {
        "step boundary (begin+end)": step,
        "step with loss+grad_norm": step_with_values,
        "all_reduce (blocking)": lambda _: dist.all_reduce(tensor),
        "broadcast (blocking)": lambda _: dist.broadcast(tensor, src=0),
        "all_reduce (async + wait)": lambda _: dist.all_reduce(tensor, async_op=True).wait(),
        # torch's `Work.wait` comes back at the step end: until then a blocking call passes through ours
        "broadcast, after async, same step": lambda _: dist.broadcast(tensor, src=0),
    }


def main() -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    with tempfile.TemporaryDirectory() as tmp:  # no daemon listens: the cost of the hook alone
        mon = TrainingMonitor(job_id="bench", env={"TRAINMON_INGEST_SOCKET": f"{tmp}/none.sock"},
                              flops_per_token=1e9)  # FLOPs accounting on, as MFU needs
        ops = workloads(mon)
        recorder = mon._collectives
        results: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in ops}
        reference: list[float] = []
        installed = True
        for i in range(ROUNDS):  # off-on, then on-off: drift of a shared machine and the order hit both alike
            reference.append(mean_call_us(reference_call))
            for on in (False, True) if i % 2 == 0 else (True, False):
                if on != installed:
                    recorder.install() if on else recorder.uninstall()
                    installed = on
                for name, op in ops.items():
                    results[name][on].append(mean_call_us(lambda: op(on)))  # noqa: B023  # called at once
        mon.close()
    dist.destroy_process_group()
    print(f"torch {torch.__version__}, gloo world size 1, training-thread CPU time per call, "
          f"median of {ROUNDS} rounds alternating off-on and on-off x {CALLS} calls; off: hook uninstalled")
    unit = statistics.median(reference)
    print(f"machine speed: a reference Python call took {unit:.3f} µs (median; {min(reference):.3f}-"
          f"{max(reference):.3f} over the rounds); 'added refs' = added µs in reference calls, comparable across "
          f"the machine's fast and slow states")
    print(f"{'operation':<34}{'off µs':>10}{'on µs':>10}{'added µs':>10}{'quartiles':>16}{'added refs':>12}")
    for name, (off_us, on_us) in results.items():
        added, low, high = paired_difference(off_us, on_us)
        print(f"{name:<34}{statistics.median(off_us):>10.2f}{statistics.median(on_us):>10.2f}{added:>10.2f}"
              f"{f'{low:.2f}..{high:.2f}':>16}{added / unit:>12.1f}")
    added, low, high = paired_difference(results["step boundary (begin+end)"][True],
                                         results["step with loss+grad_norm"][True])
    print(f"numerics (hook on, a step with loss+grad_norm minus a bare step in the same round): {added * 1e3:.0f} ns "
          f"per step, quartiles {low * 1e3:.0f}..{high * 1e3:.0f} ns")


def paired_difference(before_us: list[float], after_us: list[float]) -> tuple[float, float, float]:
    """Median and quartiles of the round-by-round differences: paired, so the machine's drift cancels."""
    paired = [b - a for a, b in zip(before_us, after_us, strict=True)]
    low, _, high = statistics.quantiles(paired, n=4)
    return statistics.median(paired), low, high


if __name__ == "__main__":
    main()
