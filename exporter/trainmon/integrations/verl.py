"""verl (checked with 0.9.1): RL post-training reported through trainmon, with no change to verl.

`install()` (or `VERL_USE_EXTERNAL_MODULES=trainmon.integrations.verl_auto`, which verl imports in
every one of its processes) patches three classes, each only in the process that uses it:

- the driver (`RayPPOTrainer.fit`'s process): every `verl.utils.tracking.Tracking` gets a
  `"trainmon"` backend, `TrainmonTracking`, next to the configured loggers. verl's `timing_s/<phase>`
  become `trainmon_train_phase_seconds_total{phase}`, and `perf/mfu/actor`, `actor/grad_norm`,
  `critic/score/mean`, `response_length/mean`, `response_length/clip_ratio`, `response/aborted_ratio`
  job gauges, all reported under `rank="driver"` (`wire.DRIVER_RANK`), which the rules never count as a rank;
- each `verl.workers.engine_workers.TrainingWorker` (actor, critic) is watched by its process's
  monitor (`watch_worker`): one trainmon step per optimizer step of its engine (`optimizer_zero_grad`
  to `optimizer_step`, whose return value is the gradient norm), not per `update_actor`; between two
  `train_mini_batch` calls (one `update_actor`) the worker is in the `rollout` phase, because the
  rollout is driven from the driver and the worker sees no call around it, so a long rollout is never
  read as a stall;
- `ActorRolloutRefWorker.update_weights` (trainer to rollout weight sync) runs in the `update_weights` phase.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from trainmon import wire
from trainmon.torch import Patches, Phase, TrainingMonitor

FRAMEWORK = "verl"
PHASE_PREFIX = "timing_s/"
WHOLE_ITERATION = "step"  # timing_s/step spans every other phase: it is the RL iteration, not a phase of it
GAP_PHASE = "rollout"
WEIGHT_SYNC_PHASE = "update_weights"
# verl's metric key -> the `wire` job gauge it sets (served as trainmon_<gauge>).
JOB_GAUGES = {
    "perf/mfu/actor": "train_mfu_reported_ratio",
    "actor/grad_norm": "rl_actor_grad_norm",
    "critic/score/mean": "rl_reward_mean",
    "response_length/mean": "rl_response_length_mean",
    "response_length/clip_ratio": "rl_response_clip_ratio",
    "response/aborted_ratio": "rl_aborted_ratio",
}


class DriverMonitor(TrainingMonitor):
    """The monitor of a process that is no training rank: it reports as `wire.DRIVER_RANK`."""

    def _refresh_identity(self) -> None:
        super()._refresh_identity()
        self.identity.rank, self.identity.world_size, self.identity.local_rank = wire.DRIVER_RANK, None, None


class TrainmonTracking:
    """A verl `Tracking` backend: `Tracking.log(data, step)` calls `log` once per RL iteration, in the driver."""

    def __init__(self, monitor: TrainingMonitor) -> None:
        self.monitor = monitor

    def log(self, data: Mapping[str, Any], step: int) -> None:
        state = self.monitor.state
        for key, raw in data.items():
            value = _number(raw)
            if value is None or not isinstance(key, str):
                continue
            if key.startswith(PHASE_PREFIX) and key != PHASE_PREFIX + WHOLE_ITERATION and value >= 0:
                state.add_phase_time(key[len(PHASE_PREFIX):][: wire.MAX_TEXT], value)
            elif key in JOB_GAUGES:
                state.job_gauges[JOB_GAUGES[key]] = value

    def finish(self) -> None:
        """verl's `Tracking.finish` does not call unknown backends; the monitor says goodbye at exit."""


def driver_monitor(job_id: str | None = None) -> DriverMonitor:
    monitor = DriverMonitor(job_id=job_id)
    monitor.set_framework(FRAMEWORK)
    monitor.watch()  # starts reporting: the driver never steps
    return monitor


def watch_worker(worker: Any, monitor: TrainingMonitor, patches: Patches | None = None) -> TrainingMonitor:
    """Steps and the rollout gap of one `TrainingWorker` (after its `__init__`: it needs `worker.engine`)."""
    patches = patches or Patches()
    engine = worker.engine
    monitor.set_framework(FRAMEWORK)
    monitor.watch(optimizer=getattr(engine, "optimizer", None))
    patches.wrap(engine, "optimizer_zero_grad", lambda zero_grad: _before(zero_grad, monitor.step_begin))

    def end_step(grad_norm: object) -> None:
        known = isinstance(grad_norm, torch.Tensor) or _number(grad_norm) is not None
        monitor.step_end(grad_norm=grad_norm if known else None)

    patches.wrap(engine, "optimizer_step", lambda step: _after(step, end_step))
    gap: list[Phase] = []

    def leave_gap() -> None:
        while gap:
            gap.pop().__exit__(None, None, None)

    def enter_gap(_: object) -> None:
        gap.append(monitor.phase(GAP_PHASE).__enter__())

    patches.wrap(worker, "train_mini_batch", lambda train: _after(_before(train, leave_gap), enter_gap))
    return monitor


class Integration:
    """What `install` patched, and the monitors it made (one per process, made when first needed)."""

    def __init__(self, job_id: str | None) -> None:
        self.job_id = job_id
        self.patches = Patches()
        self._worker_monitor: TrainingMonitor | None = None
        self.driver: DriverMonitor | None = None

    @property
    def worker_monitor(self) -> TrainingMonitor:
        if self._worker_monitor is None:
            self._worker_monitor = TrainingMonitor(job_id=self.job_id)
        return self._worker_monitor

    def uninstall(self) -> None:
        """Restore verl's classes and close the monitors made here."""
        self.patches.restore()
        for monitor in (self._worker_monitor, self.driver):
            if monitor is not None:
                monitor.close()


def install(job_id: str | None = None) -> Integration:
    """Patch verl's `Tracking`, `TrainingWorker` and `ActorRolloutRefWorker` classes (see the module doc)."""
    from verl.utils.tracking import Tracking
    from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker

    integration = Integration(job_id)

    def add_backend(init: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(init)
        def __init__(tracking: Any, *args: Any, **kwargs: Any) -> None:
            init(tracking, *args, **kwargs)
            if integration.driver is None:
                integration.driver = driver_monitor(job_id)
            tracking.logger["trainmon"] = TrainmonTracking(integration.driver)
        return __init__

    def watch_after_init(init: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(init)
        def __init__(worker: Any, *args: Any, **kwargs: Any) -> None:
            init(worker, *args, **kwargs)
            watch_worker(worker, integration.worker_monitor, integration.patches)
        return __init__

    def in_phase(update_weights: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(update_weights)  # keeps verl's dispatch attributes (`@register`)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            with integration.worker_monitor.phase(WEIGHT_SYNC_PHASE):
                return await update_weights(*args, **kwargs)
        return wrapper

    integration.patches.wrap(Tracking, "__init__", add_backend)
    integration.patches.wrap(TrainingWorker, "__init__", watch_after_init)
    integration.patches.wrap(ActorRolloutRefWorker, "update_weights", in_phase)
    return integration


def _before(method: Callable[..., Any], hook: Callable[[], None]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        hook()
        return method(*args, **kwargs)
    return wrapper


def _after(method: Callable[..., Any], hook: Callable[[Any], None]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = method(*args, **kwargs)
        hook(result)
        return result
    return wrapper


def _number(raw: object) -> float | None:
    """A finite float from a Python or numpy number (what verl logs), else None."""
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None
