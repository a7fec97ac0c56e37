"""What `trainmon top` shows, from two reads of the daemon's own endpoints (pure: no I/O, no terminal).

A read is the `/metrics` text and the `/api/v1/status` answer taken together. Gauges (utilisation, memory,
power, health, loss, phase) are the latest read's; rates (step time, steps/s, communication and data-wait
shares) are the difference between two reads of different collections, over the time between them as
the training collector stamped it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from trainmon.catalog.daemon import COLLECTOR_LAST_SUCCESS_TIMESTAMP_SECONDS
from trainmon.catalog.gpu import (
    GPU_FB_TOTAL_BYTES,
    GPU_FB_USED_BYTES,
    GPU_HEALTH_ACTION,
    GPU_HEALTH_REASON_INFO,
    GPU_INFO,
    GPU_POWER_LIMIT_WATTS,
    GPU_POWER_WATTS,
    GPU_SM_UTILIZATION_RATIO,
    GPU_UP,
    GPU_UTILIZATION_RATIO,
    GPUS_EXPECTED,
)
from trainmon.catalog.hpc_jobs import GPU_JOB_INFO
from trainmon.catalog.pod_resources import GPU_ALLOCATION_INFO
from trainmon.catalog.training import (
    TRAIN_COMM_WAIT_SECONDS_TOTAL,
    TRAIN_DATALOADER_WAIT_SECONDS_TOTAL,
    TRAIN_HANG_SUSPECTED,
    TRAIN_LAST_STEP_TIMESTAMP_SECONDS,
    TRAIN_LOSS,
    TRAIN_PHASE,
    TRAIN_RANK_EXITED,
    TRAIN_RANK_INFO,
    TRAIN_STEP_DURATION_SECONDS,
    TRAIN_STEPS_TOTAL,
)

Labels = tuple[tuple[str, str], ...]
# A rank with no step for this long, and not in a phase, is listed as failing (TrainmonTrainingStalled's age).
STALLED_SECONDS = 900.0
EXITED = "exited"  # the phase shown for a rank that ended and is still served (trainmon_train_rank_exited)


@dataclass(frozen=True, slots=True)
class Read:
    """One read of the daemon: every sample by metric name, and the status answer."""

    samples: Mapping[str, Mapping[Labels, float]]
    status: Mapping[str, Any]
    at: float  # wall time of the read

    def values(self, name: str) -> Mapping[Labels, float]:
        return self.samples.get(name, {})

    def by(self, name: str, *keys: str) -> dict[tuple[str, ...], float]:
        """`name`'s samples keyed by the values of `keys` (the first sample of each key wins)."""
        out: dict[tuple[str, ...], float] = {}
        for labels, value in self.values(name).items():
            out.setdefault(tuple(dict(labels).get(k, "") for k in keys), value)
        return out

    @property
    def collected_at(self) -> float | None:
        """When the training collector last succeeded (the time base of the rank rates), else the snapshot's time."""
        training = self.by(COLLECTOR_LAST_SUCCESS_TIMESTAMP_SECONDS.name, "collector").get(("training",))
        taken = self.status.get("taken_at")
        return training if training is not None else float(taken) if isinstance(taken, (int, float)) else None


def parse_read(metrics_text: str, status: Mapping[str, Any], at: float) -> Read:
    """A read from the `/metrics` text (Prometheus format) and the decoded status JSON.

    Raises:
        ValueError: the text is not in the Prometheus text format.
    """
    samples: dict[str, dict[Labels, float]] = defaultdict(dict)
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            samples[sample.name][tuple(sorted(sample.labels.items()))] = sample.value
    return Read(samples=dict(samples), status=status, at=at)


@dataclass(frozen=True, slots=True)
class GpuRow:
    index: str
    name: str
    up: bool
    utilization: float | None
    sm_activity: float | None
    memory_used: float | None
    memory_total: float | None
    power: float | None
    power_limit: float | None
    health: str
    owner: str


@dataclass(frozen=True, slots=True)
class RankRow:
    job_id: str
    rank: str
    gpu: str
    step_seconds: float | None
    steps_per_second: float | None
    comm_share: float | None
    data_share: float | None
    loss: float | None
    phase: str
    since_last_step: float | None


@dataclass(frozen=True, slots=True)
class View:
    version: str
    simulated: bool
    collected_at: float | None
    gpus: tuple[GpuRow, ...]
    ranks: tuple[RankRow, ...]
    failing: tuple[str, ...] = field(default=())


def build_view(now: Read, before: Read | None) -> View:
    """The view of `now`, with rates against `before` (None, or the same collection: no rates yet)."""
    if before is not None and before.collected_at == now.collected_at:
        before = None
    gpus = _gpus(now)
    ranks = _ranks(now, before)
    return View(version=str(now.status.get("version", "")), simulated=bool(now.status.get("simulated")),
                collected_at=now.collected_at, gpus=gpus, ranks=ranks, failing=_failing(now, gpus, ranks))


def _gpus(read: Read) -> tuple[GpuRow, ...]:
    """Every GPU the daemon lists: those it reads (`trainmon_gpu_info`) and those lost since (`trainmon_gpu_up` 0)."""
    info = {dict(labels)["gpu"]: dict(labels) for labels in (*read.values(GPU_UP.name),
                                                              *read.values(GPU_INFO.name))}
    index_of = {labels["uuid"]: gpu for gpu, labels in info.items()}
    owners = _owners(read, index_of)
    health = {gpu: action for (gpu, action), v in read.by(GPU_HEALTH_ACTION.name, "gpu", "action").items()
              if v == 1}

    def gauge(name: str) -> dict[str, float]:
        return {gpu: v for (gpu,), v in read.by(name, "gpu").items()}

    up, util, sm = gauge(GPU_UP.name), gauge(GPU_UTILIZATION_RATIO.name), \
        gauge(GPU_SM_UTILIZATION_RATIO.name)
    used, total = gauge(GPU_FB_USED_BYTES.name), gauge(GPU_FB_TOTAL_BYTES.name)
    power, limit = gauge(GPU_POWER_WATTS.name), gauge(GPU_POWER_LIMIT_WATTS.name)
    return tuple(
        GpuRow(index=gpu, name=info[gpu].get("name", ""), up=up.get(gpu) == 1, utilization=util.get(gpu),
               sm_activity=sm.get(gpu), memory_used=used.get(gpu), memory_total=total.get(gpu),
               power=power.get(gpu), power_limit=limit.get(gpu), health=health.get(gpu, "-"),
               owner=", ".join(owners.get(gpu, ())) or "-")
        for gpu in sorted(info, key=_index_order))


def _owners(read: Read, index_of: Mapping[str, str]) -> dict[str, list[str]]:
    """Per GPU index: the scheduler's job and the Kubernetes pod that hold it, else the training job on it."""
    owners: dict[str, list[str]] = defaultdict(list)
    for (gpu, scheduler, job), _ in read.by(GPU_JOB_INFO.name, "gpu", "scheduler", "job_id").items():
        owners[gpu].append(f"{scheduler} {job}")
    for (gpu, namespace, pod), _ in read.by(GPU_ALLOCATION_INFO.name, "gpu", "namespace", "pod").items():
        owners[gpu].append(f"pod {namespace}/{pod}")
    for (uuid, job), _ in sorted(read.by(TRAIN_RANK_INFO.name, "uuid", "job_id").items()):
        if uuid in index_of and not owners[index_of[uuid]]:
            owners[index_of[uuid]].append(f"job {job}")
    return owners


def _ranks(now: Read, before: Read | None) -> tuple[RankRow, ...]:
    info = now.by(TRAIN_RANK_INFO.name, "job_id", "rank", "uuid")
    gpu_of = {dict(labels)["uuid"]: dict(labels)["gpu"] for labels in (*now.values(GPU_UP.name),
                                                                        *now.values(GPU_INFO.name))}
    phases = {(job, rank): phase for (job, rank, phase), v in
              now.by(TRAIN_PHASE.name, "job_id", "rank", "phase").items() if v == 1}
    loss = now.by(TRAIN_LOSS.name, "job_id", "rank")
    last_step = now.by(TRAIN_LAST_STEP_TIMESTAMP_SECONDS.name, "job_id", "rank")
    exited = {key for key, v in now.by(TRAIN_RANK_EXITED.name, "job_id", "rank").items() if v == 1}
    rows = []
    for job, rank, uuid in sorted(info, key=lambda k: (k[0], _index_order(k[1]))):
        key = (job, rank)
        # An exited rank is served with its final values until the daemon drops it: no rates (0 steps/s
        # would read as a stall), and its phase says it ended.
        delta = _Delta(now, None if key in exited else before)
        steps = delta.of(TRAIN_STEP_DURATION_SECONDS.count, key)
        step_sum = delta.of(TRAIN_STEP_DURATION_SECONDS.sum, key)
        rows.append(RankRow(
            job_id=job, rank=rank, gpu=gpu_of.get(uuid, uuid or "-"),
            step_seconds=step_sum / steps if steps and step_sum is not None else None,
            steps_per_second=delta.rate(TRAIN_STEPS_TOTAL.name, key),
            comm_share=_share(delta.of(TRAIN_COMM_WAIT_SECONDS_TOTAL.name, key), step_sum),
            data_share=_share(delta.of(TRAIN_DATALOADER_WAIT_SECONDS_TOTAL.name, key), step_sum),
            loss=loss.get(key), phase=EXITED if key in exited else phases.get(key, "-"),
            since_last_step=(now.collected_at or now.at) - last_step[key] if key in last_step else None))
    return tuple(rows)


class _Delta:
    """Increases of a rank's counters between two reads."""

    def __init__(self, now: Read, before: Read | None) -> None:
        self._now, self._before = now, before
        self._seconds = (now.collected_at or 0.0) - (before.collected_at or 0.0) if before is not None else 0.0

    def of(self, name: str, key: tuple[str, str]) -> float | None:
        if self._before is None:
            return None
        now, before = self._now.by(name, "job_id", "rank").get(key), self._before.by(name, "job_id", "rank").get(key)
        return now - before if now is not None and before is not None and now >= before else None

    def rate(self, name: str, key: tuple[str, str]) -> float | None:
        increase = self.of(name, key)
        return increase / self._seconds if increase is not None and self._seconds > 0 else None


def _share(part: float | None, whole: float | None) -> float | None:
    return part / whole if part is not None and whole else None


def _failing(read: Read, gpus: Iterable[GpuRow], ranks: Iterable[RankRow]) -> tuple[str, ...]:
    """What needs a person: failing collectors, GPUs down or whose verdict asks for action, stalled or hung ranks."""
    out = [f"collector {c.get('name')}: {c.get('error') or c.get('state')}"
           for c in read.status.get("collectors", ()) if not c.get("ok", True)]
    reasons = {gpu: reason for (gpu, reason), v in read.by(GPU_HEALTH_REASON_INFO.name, "gpu", "reason").items()
               if v == 1}
    expected = read.values(GPUS_EXPECTED.name)
    listed = len(list(gpus))
    if expected and listed < max(expected.values()):
        out.append(f"{listed} GPU(s) answer NVML of {max(expected.values()):.0f} on the PCI bus: a GPU is lost")
    for g in gpus:
        if not g.up:
            out.append(f"GPU {g.index} is not answering NVML")
        if g.health not in {"-", "none"}:
            out.append(f"GPU {g.index} needs {g.health}" + (f": {reasons[g.index]}" if g.index in reasons else ""))
    hung = {key for key, v in read.by(TRAIN_HANG_SUSPECTED.name, "job_id", "rank").items() if v == 1}
    for r in ranks:
        if (r.job_id, r.rank) in hung:
            out.append(f"{r.job_id} rank {r.rank}: suspected hang")
        elif r.phase == "-" and r.since_last_step is not None and r.since_last_step > STALLED_SECONDS:
            out.append(f"{r.job_id} rank {r.rank}: no step for {r.since_last_step:.0f} s")
    return tuple(out)


def _index_order(value: str) -> tuple[int, str]:
    return (int(value), "") if value.isdigit() else (1 << 30, value)
