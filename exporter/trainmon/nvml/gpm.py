"""SM, tensor and DRAM activity from NVML GPM (Hopper and later), one window per cycle.

Each GPU keeps its previous sample; every cycle takes one new sample and asks NVML for the
metrics between the two, so the window is the collection interval. The first cycle has no
values, a window under `MIN_WINDOW_S` is skipped (the older sample is kept, so the next window
is long enough), and a window over `MAX_WINDOW_S` (a stalled daemon) starts over.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import pynvml

from trainmon.nvml.metrics import GpuMetric

MIN_WINDOW_S = 0.1
MAX_WINDOW_S = 600.0
PERCENT = 0.01

# GPM metric id -> the ratio metric it feeds (values arrive in percent).
GPM_METRICS: dict[int, GpuMetric] = {
    pynvml.NVML_GPM_METRIC_SM_UTIL: GpuMetric.SM_UTILIZATION_RATIO,
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: GpuMetric.SM_OCCUPANCY_RATIO,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: GpuMetric.TENSOR_ACTIVE_RATIO,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: GpuMetric.DRAM_ACTIVE_RATIO,
}


@dataclass(frozen=True, slots=True)
class GpmWindow:
    ratios: dict[GpuMetric, float]  # metric -> 0..1, only the metrics this GPU answered
    seconds: float


def sampler(handle: Any) -> GpmSampler | None:
    """A sampler where GPM works on this GPU; None where it does not (or its samples cannot be had)."""
    try:
        if pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
            return GpmSampler(handle)
    except pynvml.NVMLError:
        pass
    return None


class GpmSampler:
    """Two GPM samples of one GPU, alternating; valid until NVML is shut down."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self._previous = pynvml.nvmlGpmSampleAlloc()
        self._current = pynvml.nvmlGpmSampleAlloc()
        self._previous_at: float | None = None

    def advance(self, now: float) -> GpmWindow | None:
        """Take this cycle's sample; the window since the last one, when it is usable.

        Raises:
            pynvml.NVMLError: the sample could not be taken (the GPU is failing).
        """
        if self._previous_at is not None and now - self._previous_at < MIN_WINDOW_S:
            return None
        pynvml.nvmlGpmSampleGet(self._handle, self._current)
        window = None if self._previous_at is None else now - self._previous_at
        ratios = self._metrics() if window is not None and window <= MAX_WINDOW_S else None
        self._previous, self._current = self._current, self._previous
        self._previous_at = now
        return GpmWindow(ratios, window) if ratios is not None and window is not None else None

    def restart(self) -> None:
        """After a refused sample: the next sample starts a fresh window (the refused ones are skipped)."""
        self._previous_at = None

    def _metrics(self) -> dict[GpuMetric, float]:
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1, request.sample2 = self._previous, self._current
        for slot, metric_id in enumerate(GPM_METRICS):
            request.metrics[slot].metricId = metric_id
        pynvml.nvmlGpmMetricsGet(request)
        ratios = {}
        for slot, name in enumerate(GPM_METRICS.values()):
            metric = request.metrics[slot]
            if metric.nvmlReturn == pynvml.NVML_SUCCESS:
                ratios[name] = min(1.0, max(0.0, metric.value * PERCENT))
        return ratios

    def close(self) -> None:
        """Free the samples (only while NVML is still initialised)."""
        for sample in (self._previous, self._current):
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlGpmSampleFree(sample)
