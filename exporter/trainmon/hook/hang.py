"""Hang suspicion and the stuck thread's stack, decided on the reporter thread. Standard library only.

A rank is suspected of a hang while its oldest collective has been in flight, or its progress (the
last step, or leaving a phase) is older than its threshold: the larger of a floor (30 s,
`TrainingMonitor(hang_threshold_s=…)` or `TRAINMON_HANG_THRESHOLD_S`) and 5x its median step time, so
a job of 20 s steps is not called hung after 30 s. Never before its first completed step (compilation
makes the first one long), never inside a declared phase. The median comes from the step histogram
the rank already keeps, so the training thread pays nothing for it.

The first report of an episode carries the training thread's stack, read with `sys._current_frames()`
(no CUDA call, no signal, the training thread is not interrupted); the rank stepping again ends the
episode.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Mapping, Sequence

from trainmon.wire import MAX_FRAME_TEXT, MAX_FRAMES, MAX_STACK_BYTES, STEP_BUCKETS, Report

DEFAULT_FLOOR_S = 30.0
STEP_FACTOR = 5.0
HANG_THRESHOLD_ENV = "TRAINMON_HANG_THRESHOLD_S"


def floor_from(value: float | None, env: Mapping[str, str]) -> float:
    """The threshold's floor: `value` when given (ValueError unless positive and finite), else the
    environment's when it is a positive number, else DEFAULT_FLOOR_S."""
    if value is not None:
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"hang_threshold_s must be a positive number of seconds, not {value!r}")
        return float(value)
    try:
        from_env = float(env.get(HANG_THRESHOLD_ENV, DEFAULT_FLOOR_S))
    except ValueError:
        return DEFAULT_FLOOR_S
    return from_env if math.isfinite(from_env) and from_env > 0 else DEFAULT_FLOOR_S


def median_step_seconds(buckets: Sequence[int]) -> float | None:
    """The median of the step histogram (cumulative counts per STEP_BUCKETS bound, then +Inf),
    interpolated within its bucket as Prometheus' histogram_quantile does; None without steps."""
    total = buckets[-1]
    if not total:
        return None
    half = total / 2
    below, lower = 0, 0.0
    for bound, count in zip(STEP_BUCKETS, buckets, strict=False):
        if count >= half:
            return lower + (bound - lower) * (half - below) / (count - below)
        below, lower = count, bound
    return STEP_BUCKETS[-1]


def threshold(floor: float, buckets: Sequence[int]) -> float:
    median = median_step_seconds(buckets)
    return floor if median is None else max(floor, STEP_FACTOR * median)


def thread_stack(thread_id: int) -> tuple[str, ...]:
    """The thread's stack, innermost frame first, each `file:line:function`, within the wire's bounds."""
    frame = sys._current_frames().get(thread_id)
    frames: list[str] = []
    size = 0
    while frame is not None and len(frames) < MAX_FRAMES:
        code = frame.f_code
        text = f"{code.co_filename}:{frame.f_lineno}:{code.co_name}"
        if len(text) > MAX_FRAME_TEXT:  # a deep path: its tail says where
            text = "…" + text[1 - MAX_FRAME_TEXT:]
        text = text if text.isprintable() else repr(text)[1:MAX_FRAME_TEXT - 1]
        size += len(text.encode())
        if size > MAX_STACK_BYTES:
            break
        frames.append(text)
        frame = frame.f_back
    return tuple(frames)


class HangWatch:
    """Marks reports of a rank past its hang threshold, and the first of each episode with the stack.

    `thread` is the training thread's id (set by the monitor at the first step); only the reporter
    thread calls `mark`.
    """

    def __init__(self, floor: float) -> None:
        self.floor = floor
        self.thread: int | None = None
        self._episode_steps = -1  # the step count at which this episode's stack was taken

    def stuck_seconds(self, report: Report, progress_at: float) -> float:
        """How long the rank has not progressed: its oldest collective's age, or time since its progress."""
        return max(max(report.inflight_age.values(), default=0.0), time.time() - progress_at)

    def mark(self, report: Report, progress_at: float | None) -> Report:
        """`report`, with `hang_suspected` and, once per episode, `stack` set where it is past the threshold."""
        if report.steps == 0 or report.phase or progress_at is None:
            return report
        if self.stuck_seconds(report, progress_at) <= threshold(self.floor, report.step_buckets):
            return report
        if self._episode_steps == report.steps or self.thread is None:
            return dataclasses.replace(report, hang_suspected=1)
        self._episode_steps = report.steps
        return dataclasses.replace(report, hang_suspected=1, stack=thread_stack(self.thread))
