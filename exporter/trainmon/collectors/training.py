"""The `training` collector: per-rank reports of the training hook, read from the daemon's rank table.

The daemon owns the `IngestServer`, whose receiver thread keeps the latest report of every live
rank in a `RankTable`; `collect()` has the server check itself (bind, re-make a vanished socket,
restart a stopped receiver, each failing this collector with the reason while the others serve),
copies the table and turns it into families, so ranks that went silent for `--rank-ttl` are simply
absent. A rank that said goodbye is served `--exited-rank-retention` more with its final values, marked by
`trainmon_train_rank_exited`, without what describes a running process (its phase, its collectives in
flight), then is absent too.

`rank_series` is what one rank costs in series; the table refuses a rank that would take the sum
past `--max-training-series`, so the worst case is bounded whatever the hooks send.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass

from prometheus_client.utils import floatToGoString

from trainmon.catalog import PREFIX, Family
from trainmon.catalog import training as catalog
from trainmon.collectors.base import Collection, NodeResources
from trainmon.errors import CollectorError, NoData
from trainmon.families import Metric, counter, gauge, histogram, info, value_family
from trainmon.ingest.ranks import RankSlot, TableView
from trainmon.ingest.server import IngestServer
from trainmon.ingest.stacks import NO_STACK, place, signature
from trainmon.settings import Settings
from trainmon.wire import DRIVER_RANK, PARALLEL_KEYS, STEP_BUCKETS, Inflight, Report

HISTOGRAM_SERIES = len(STEP_BUCKETS) + 3  # the buckets, +Inf, _count and _sum
# The wire's `job_gauges` keys served, each as the family `trainmon_<key>`.
JOB_GAUGES: dict[str, Family] = {family.name.removeprefix(PREFIX): family for family in (
    catalog.TRAIN_MFU_REPORTED_RATIO, catalog.RL_ACTOR_GRAD_NORM, catalog.RL_REWARD_MEAN,
    catalog.RL_RESPONSE_LENGTH_MEAN, catalog.RL_RESPONSE_CLIP_RATIO, catalog.RL_ABORTED_RATIO)}


@dataclass(frozen=True, slots=True)
class Scalar:
    """A per-rank value: its family, and how to read it (None = absent)."""

    family: Family
    read: Callable[[Report], float | None]


SCALARS = (
    Scalar(catalog.TRAIN_STEPS_TOTAL, lambda r: r.steps),
    Scalar(catalog.TRAIN_SAMPLES_TOTAL, lambda r: r.samples),
    Scalar(catalog.TRAIN_TOKENS_TOTAL, lambda r: r.tokens),
    Scalar(catalog.TRAIN_MICROBATCHES_TOTAL, lambda r: r.microbatches),
    Scalar(catalog.TRAIN_PIPELINE_STAGE, lambda r: r.pipeline_stage),
    Scalar(catalog.TRAIN_LAST_STEP_TIMESTAMP_SECONDS, lambda r: r.last_step),
    Scalar(catalog.TRAIN_PROCESS_START_TIMESTAMP_SECONDS, lambda r: r.start_time),
    Scalar(catalog.TRAIN_FIRST_STEP_TIMESTAMP_SECONDS, lambda r: r.first_step),
    Scalar(catalog.TRAIN_MODEL_FLOPS_TOTAL, lambda r: r.model_flops),
    Scalar(catalog.TRAIN_COMM_WAIT_SECONDS_TOTAL, lambda r: r.comm_wait),
    Scalar(catalog.TRAIN_DATALOADER_WAIT_SECONDS_TOTAL, lambda r: r.data_wait),
    Scalar(catalog.TRAIN_LOSS_SCALE, lambda r: r.loss_scale if r.loss_scaler != "none" else None),
    Scalar(catalog.TRAIN_SKIPPED_STEPS_TOTAL, lambda r: r.skipped_steps),
    Scalar(catalog.TRAIN_LOSS, lambda r: r.loss),
    Scalar(catalog.TRAIN_GRAD_NORM, lambda r: r.grad_norm),
    Scalar(catalog.TRAIN_LOSS_MAX, lambda r: r.loss_max),
    Scalar(catalog.TRAIN_GRAD_NORM_MAX, lambda r: r.grad_norm_max),
    Scalar(catalog.TRAIN_LOSS_SPIKES_TOTAL, lambda r: r.loss_spikes),
    Scalar(catalog.TRAIN_GRAD_NORM_SPIKES_TOTAL, lambda r: r.grad_norm_spikes),
    Scalar(catalog.TRAIN_NONFINITE_LOSS_TOTAL, lambda r: r.nonfinite_losses),
    Scalar(catalog.TRAIN_CUDA_ALLOC_RETRIES_TOTAL, lambda r: r.cuda_alloc_retries),
    Scalar(catalog.TRAIN_CUDA_OOMS_TOTAL, lambda r: r.cuda_ooms),
    Scalar(catalog.TRAIN_COLLECTIVES_CAPTURED_TOTAL, lambda r: r.collectives_captured),
)


class TrainingCollector:
    """Reads the rank table of the daemon's ingest server, which the daemon starts, maintains and closes."""

    name = "training"

    def __init__(self, settings: Settings, resources: NodeResources) -> None:
        if resources.ingest is None:
            raise ValueError("the training collector needs the daemon's ingest server")
        self._ingest: IngestServer = resources.ingest

    def collect(self) -> Collection:
        if not self._ingest.enabled:
            raise NoData("ingest disabled: --ingest-socket is empty and --ingest-udp is not set")
        if self._ingest.trouble is not None:
            raise CollectorError(self._ingest.trouble)
        view = self._ingest.table.view()
        ranks = sorted(view.ranks, key=lambda s: (s.report.job_id, s.report.rank))
        return Collection(
            families=(*rank_families(ranks, time.time(), view.taken_at, view.dead),
                      *ingest_families(view, self._ingest.rebinds)),
            found=(*(f"ingest listening on {e}" for e in self._ingest.endpoints()),
                   *(f"job {s.report.job_id} rank {s.report.rank}: {s.report.steps} steps"
                     f"{' (exited)' if s.exited_at is not None else ''}" for s in ranks)),
            details={"ranks": [rank_details(s) for s in ranks],
                     "rank_hangs": [rank_details(s) | hang_details(s) for s in ranks]},
        )

    def close(self) -> None:
        pass


def rank_series(r: Report) -> int:
    """The samples `rank_families` serves for `r`: the table's unit for `--max-training-series`."""
    if r.rank == DRIVER_RANK:
        return len(r.phase_seconds) + sum(k in JOB_GAUGES for k in r.job_gauges)
    return (1 + sum(scalar.read(r) is not None for scalar in SCALARS) + HISTOGRAM_SERIES
            + 3 * len(r.collectives) + len(r.collectives_untimed) + len(r.group_sizes) + 2 * len(r.group_seqs)
            + len(r.inflight)
            + (1 if r.phase else 0) + len(r.phase_seconds) + len(r.nccl_env) + (1 if r.parallel else 0)
            + len(r.hook_errors) + len(r.pg_timeouts) + 1 + 2 * r.hang_suspected)


def rank_families(ranks: Iterable[RankSlot], now: float, clock: float,
                  dead: Container[tuple[str, int]] = frozenset()) -> list[Metric]:
    """The per-rank families; `clock` (the rank table's monotonic clock) and `now` (Unix time, for a hook
    that sends no ages) age the in-flight collectives (`inflight_age`); `dead` ranks' processes are gone.

    A framework driver's report (`DRIVER_RANK`) gives only its phase times and job gauges, so that
    the rules, which count and compare ranks, never see it as one.
    """
    drivers = [s.report for s in ranks if s.report.rank == DRIVER_RANK]
    slots = [s for s in ranks if s.report.rank != DRIVER_RANK]
    reports = [s.report for s in slots]
    out: list[Metric] = []
    rank_info, exited = info(catalog.TRAIN_RANK_INFO), gauge(catalog.TRAIN_RANK_EXITED)
    for slot in slots:
        r = slot.report
        rank_info.add_metric([*_key(r), _opt(r.local_rank), _opt(r.world_size), r.uuid, r.backend, r.framework,
                              r.loss_scaler, str(r.pid), r.pod, r.namespace], {})
        if slot.exited_at is not None:
            exited.add_metric(_key(r), 1)
    out += [rank_info, exited]
    for scalar in SCALARS:
        family = value_family(scalar.family)
        for r in reports:
            value = scalar.read(r)
            if value is not None:
                family.add_metric(_key(r), value)
        out.append(family)
    out.append(_step_histogram(reports))
    out.extend(_collective_families(reports))
    out.extend(_group_families(slots, now, clock))
    out.extend(_hang_families(slots, dead))
    out.extend(_label_families(reports, drivers, running=[s.report for s in slots if s.exited_at is None]))
    out.extend(_job_gauge_families(drivers))
    return out


def ingest_families(view: TableView, rebinds: int) -> list[Metric]:
    messages = counter(catalog.INGEST_MESSAGES_TOTAL)
    messages.add_metric([], view.messages)
    coalesced = counter(catalog.INGEST_COALESCED_TOTAL)
    coalesced.add_metric([], view.coalesced)
    rejected = counter(catalog.INGEST_REJECTED_TOTAL)
    for reason, n in sorted(view.rejected.items()):
        rejected.add_metric([reason], n)
    live = gauge(catalog.INGEST_RANKS)
    live.add_metric([], len(view.running))
    evicted = counter(catalog.INGEST_EVICTED_TOTAL)
    for reason, n in sorted(view.evicted.items()):
        evicted.add_metric([reason], n)
    exits = counter(catalog.TRAIN_RANK_EXITS_TOTAL)
    for (job_id, reason), n in sorted(view.exits.items()):
        exits.add_metric([job_id, reason], n)
    rebound = counter(catalog.INGEST_SOCKET_REBINDS_TOTAL)
    rebound.add_metric([], rebinds)
    return [messages, coalesced, rejected, live, evicted, exits, rebound]


def rank_details(state: RankSlot) -> dict[str, object]:
    r = state.report
    return {"job_id": r.job_id, "rank": r.rank, "pid": r.pid, "world_size": r.world_size, "uuid": r.uuid,
            "steps": r.steps, "last_step": r.last_step, "phase": r.phase, "last_report": state.received_wall,
            "exited": state.exited_at is not None}


def hang_details(slot: RankSlot) -> dict[str, object]:
    """What `/api/v1/ranks` adds for a rank: its hang state, its latest stack, its groups (never labels)."""
    r, stack = slot.report, slot.stack
    return {"hang_suspected": bool(r.hang_suspected) and slot.exited_at is None,
            "stack": list(stack) if stack else None, "stack_signature": signature(stack) if stack else None,
            "stack_place": place(stack) if stack else None, "stack_received": slot.stack_wall,
            "groups": {g.group: {"issued": g.issued, "completed": g.completed, "ranks": r.group_ranks.get(g.group),
                                 "timeout_seconds": r.pg_timeouts.get(g.group)} for g in r.group_seqs}}


def _hang_families(slots: Iterable[RankSlot], dead: Container[tuple[str, int]]) -> list[Metric]:
    """A rank whose process died without a goodbye, or said goodbye through an uncaught exception, is `gone`:
    suspected, since the others will wait for it."""
    suspected, where = gauge(catalog.TRAIN_HANG_SUSPECTED), gauge(catalog.TRAIN_HANG_LOCATION)
    stacks = info(catalog.TRAIN_STACK_INFO)
    for slot in slots:
        r = slot.report
        gone = (r.job_id, r.rank) in dead or (slot.exited_at is not None and r.exit_reason == "error")
        hung = slot.exited_at is None and r.hang_suspected
        suspected.add_metric(_key(r), 1 if hung or gone else 0)
        if gone:
            where.add_metric([*_key(r), "gone"], 1)
        elif hung:
            where.add_metric([*_key(r), place(slot.stack) if slot.stack else "other"], 1)
            stacks.add_metric([*_key(r), signature(slot.stack) if slot.stack else NO_STACK], {})
    return [suspected, where, stacks]


def _step_histogram(reports: Iterable[Report]) -> Metric:
    family = histogram(catalog.TRAIN_STEP_DURATION_SECONDS)
    bounds = [*(floatToGoString(b) for b in STEP_BUCKETS), "+Inf"]
    for r in reports:
        family.add_metric(_key(r), list(zip(bounds, r.step_buckets, strict=True)), r.step_seconds_sum)
    return family


def _collective_families(reports: Iterable[Report]) -> list[Metric]:
    time_, calls = counter(catalog.NCCL_TIME_SECONDS_TOTAL), counter(catalog.NCCL_CALLS_TOTAL)
    sent, untimed = counter(catalog.NCCL_BYTES_TOTAL), counter(catalog.NCCL_UNTIMED_CALLS_TOTAL)
    size = gauge(catalog.NCCL_GROUP_SIZE)
    for r in reports:
        for c in r.collectives:
            key = [*_key(r), c.op, c.group]
            time_.add_metric(key, c.seconds)
            calls.add_metric(key, c.calls)
            sent.add_metric(key, c.bytes)
        for u in r.collectives_untimed:
            untimed.add_metric([*_key(r), u.op, u.group], u.calls)
        for group, n in sorted(r.group_sizes.items()):
            size.add_metric([*_key(r), group], n)
    return [time_, calls, sent, untimed, size]


def _group_families(slots: Iterable[RankSlot], now: float, clock: float) -> list[Metric]:
    issued, completed = counter(catalog.NCCL_ISSUED_TOTAL), counter(catalog.NCCL_COMPLETED_TOTAL)
    inflight, timeout = gauge(catalog.NCCL_INFLIGHT_OLDEST_SECONDS), gauge(catalog.TRAIN_PG_TIMEOUT_SECONDS)
    for slot in slots:
        r = slot.report
        for g in r.group_seqs:
            issued.add_metric([*_key(r), g.group], g.issued)
            completed.add_metric([*_key(r), g.group], g.completed)
        for f in r.inflight if slot.exited_at is None else ():  # an exited rank waits on nothing
            inflight.add_metric([*_key(r), f.group, f.op], inflight_age(slot, f, now, clock))
        for group, seconds in sorted(r.pg_timeouts.items()):
            timeout.add_metric([*_key(r), group], seconds)
    return [issued, completed, inflight, timeout]


def inflight_age(slot: RankSlot, collective: Inflight, now: float, clock: float) -> float:
    """Seconds `collective` has been in flight: its age when the hook made the report, on the hook's monotonic
    clock, plus the table's monotonic time since the report came in, so that no step of a wall clock moves
    it. A hook older than `inflight_age` gives only `since`: Unix time now minus then."""
    age = slot.report.inflight_age.get(collective.group)
    if age is None:
        return max(0.0, now - collective.since)
    return age + max(0.0, clock - slot.received_at)


def _job_gauge_families(drivers: Iterable[Report]) -> list[Metric]:
    families = {key: gauge(family) for key, family in JOB_GAUGES.items()}
    for r in drivers:
        for key, value in sorted(r.job_gauges.items()):
            if key in families:
                families[key].add_metric(_key(r), value)
    return list(families.values())


def _label_families(reports: Iterable[Report], drivers: Iterable[Report], running: Iterable[Report]) -> list[Metric]:
    phase, env = gauge(catalog.TRAIN_PHASE), info(catalog.TRAIN_NCCL_ENV_INFO)
    phase_seconds, hook_errors = counter(catalog.TRAIN_PHASE_SECONDS_TOTAL), counter(catalog.TRAIN_HOOK_ERRORS_TOTAL)
    parallel = info(catalog.TRAIN_PARALLEL_INFO)
    for r in (*reports, *drivers):
        for name, seconds in sorted(r.phase_seconds.items()):
            phase_seconds.add_metric([*_key(r), name], seconds)
    for r in running:
        if r.phase:
            phase.add_metric([*_key(r), r.phase], 1)
    for r in reports:
        for kind, n in sorted(r.hook_errors.items()):
            hook_errors.add_metric([*_key(r), kind], n)
        for name, value in sorted(r.nccl_env.items()):
            env.add_metric([*_key(r), name, value], {})
        if r.parallel:
            parallel.add_metric([*_key(r), *(_opt(r.parallel.get(k)) for k in PARALLEL_KEYS)], {})
    return [phase, phase_seconds, env, parallel, hook_errors]


def _key(r: Report) -> list[str]:
    return [r.job_id, "driver" if r.rank == DRIVER_RANK else str(r.rank)]


def _opt(value: int | None) -> str:
    return "" if value is None else str(value)

