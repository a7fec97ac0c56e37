"""The cost of one GPU collection cycle on 8 GPUs: NVML calls and microseconds.

    python -m tests.bench.bench_gpu_cycle

Through the C fake libnvidia-ml.so.1 (real ctypes and pynvml, a near-free library) and through the
Python stand-in `ScenarioLibrary` (what `trainmon demo` uses). A real driver adds its own time per
call on top; the call count is what carries over. Prints figures, asserts nothing.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.fake_nvml import scenario
from tests.fake_nvml.build import SONAME, build_fake_nvml
from trainmon.collectors.base import NodeResources
from trainmon.collectors.gpu import GpuCollector
from trainmon.settings import Settings
from trainmon.simulation.scenario import ScenarioLibrary, static_source

GPUS = 8
CYCLES = 300
INTERVAL = 5.0


class SteppingClock:
    """Each cycle is one interval after the last, so every cycle takes a GPM window."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += INTERVAL
        return self.now


def measure(label: str, library: object, calls: Callable[[], int], processes: bool) -> list[str]:
    collector = GpuCollector(Settings(interval=INTERVAL, sysfs=Path("/nonexistent"), gpu_processes=processes,
                                      state_dir=None),
                             NodeResources(), library=library, clock=SteppingClock())
    start, before = time.perf_counter(), calls()
    collector.collect()
    first_us, first_calls = (time.perf_counter() - start) * 1e6, calls() - before
    collector.collect()
    timings, counts = [], []
    for _ in range(CYCLES):
        before, start = calls(), time.perf_counter()
        collector.collect()
        timings.append((time.perf_counter() - start) * 1e6)
        counts.append(calls() - before)
    collector.close()
    per_cycle = statistics.median(counts)
    median = statistics.median(timings)
    return [f"{label:<34} first cycle (init, discovery, XID arming): {first_calls} calls, {first_us:,.0f} us",
            f"{'':<34} steady cycle: {per_cycle:.0f} calls ({per_cycle / GPUS:.1f} per GPU), "
            f"median {median:,.0f} us ({median / GPUS:,.0f} us per GPU), p90 "
            f"{statistics.quantiles(timings, n=10)[-1]:,.0f} us"]


def main() -> None:
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise SystemExit("bench_gpu_cycle needs gcc for the fake libnvidia-ml.so.1")
    node = scenario.node(GPUS)
    lines = []
    with tempfile.TemporaryDirectory(prefix="trainmon-bench-gpu-") as tmp:
        directory = build_fake_nvml(compiler, Path(tmp))
        os.environ["FAKE_NVML_SCENARIO"] = str(scenario.write(Path(tmp) / "scenario.json", node))
        fake = ctypes.CDLL(str(directory / SONAME))
        fake.fakeNvmlCallCount.restype = ctypes.c_ulonglong
        lines += measure("C fake (ctypes)", fake, lambda: int(fake.fakeNvmlCallCount()), processes=False)
        lines += measure("C fake, --gpu-processes", fake, lambda: int(fake.fakeNvmlCallCount()), processes=True)
    python = ScenarioLibrary(static_source(node))
    lines += measure("Python stand-in (demo)", python, lambda: python.calls, processes=False)
    print(f"{GPUS} GPUs, {CYCLES} cycles, collector only (no rendering)")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
