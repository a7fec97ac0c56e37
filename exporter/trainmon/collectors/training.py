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

from trainmon.collectors.base import Collection, NodeResources
from trainmon.errors import CollectorError, NoData
from trainmon.families import Metric, ValueFamily, counter, gauge, histogram, info
from trainmon.ingest.ranks import RankSlot, TableView
from trainmon.ingest.server import IngestServer
from trainmon.ingest.stacks import NO_STACK, place, signature
from trainmon.settings import Settings
from trainmon.wire import DRIVER_RANK, PARALLEL_KEYS, STEP_BUCKETS, Inflight, Report

RANK = ("job_id", "rank")
INFO_LABELS = ("local_rank", "world_size", "uuid", "backend", "framework", "loss_scaler", "pid", "pod", "namespace")
HISTOGRAM_SERIES = len(STEP_BUCKETS) + 3  # the buckets, +Inf, _count and _sum
JOB_GAUGE_HELP = {  # the wire's `job_gauges` keys served, each as `trainmon_<key>`
    "train_mfu_reported_ratio": "Model FLOPs utilisation as the framework itself reports it (verl perf/mfu/actor).",
    "rl_actor_grad_norm": "Actor gradient norm of the last RL iteration, as the framework reports it "
                          "(verl actor/grad_norm, the mean over its optimizer steps).",
    "rl_reward_mean": "Mean sequence score of the last RL iteration (verl critic/score/mean).",
    "rl_response_length_mean": "Mean response length in tokens of the last RL iteration (verl response_length/mean).",
    "rl_response_clip_ratio": "Share of the last RL iteration's responses cut at the maximum length "
                              "(verl response_length/clip_ratio).",
    "rl_aborted_ratio": "Share of the last RL iteration's rollouts aborted (verl response/aborted_ratio).",
}


@dataclass(frozen=True, slots=True)
class Scalar:
    """A per-rank value: family name, help, kind, and how to read it (None = absent)."""

    name: str
    help: str
    make: Callable[[str, str, tuple[str, ...]], ValueFamily]
    read: Callable[[Report], float | None]


SCALARS = (
    Scalar("train_steps_total", "Optimizer steps finished.", counter, lambda r: r.steps),
    Scalar("train_samples_total", "Samples processed.", counter, lambda r: r.samples),
    Scalar("train_tokens_total", "Tokens processed (the real tokens the loop reports, padding left out).", counter,
           lambda r: r.tokens),
    Scalar("train_microbatches_total", "Micro-batches (forward and backward passes) of the finished steps; absent "
           "where the loop does not say.", counter, lambda r: r.microbatches),
    Scalar("train_pipeline_stage", "The rank's pipeline stage (0 first); absent where the job has none known.",
           gauge, lambda r: r.pipeline_stage),
    Scalar("train_last_step_timestamp_seconds", "Unix time the last step finished.", gauge, lambda r: r.last_step),
    Scalar("train_process_start_timestamp_seconds", "Unix time the training process started.", gauge,
           lambda r: r.start_time),
    Scalar("train_first_step_timestamp_seconds", "Unix time the first step began.", gauge, lambda r: r.first_step),
    Scalar("train_model_flops_total", "Model FLOPs of the finished steps (from the FLOPs given to the hook).",
           counter, lambda r: r.model_flops),
    Scalar("train_comm_wait_seconds_total",
           "Time the training thread was blocked on communication (exposed, not overlapped).", counter,
           lambda r: r.comm_wait),
    Scalar("train_dataloader_wait_seconds_total", "Time the loop waited for the next batch.", counter,
           lambda r: r.data_wait),
    Scalar("train_loss_scale", "Current mixed-precision loss scale; absent without a scaler.", gauge,
           lambda r: r.loss_scale if r.loss_scaler != "none" else None),
    Scalar("train_skipped_steps_total", "Steps skipped for inf/NaN gradients.", counter, lambda r: r.skipped_steps),
    Scalar("train_loss", "Last reported loss.", gauge, lambda r: r.loss),
    Scalar("train_grad_norm", "Last reported gradient norm.", gauge, lambda r: r.grad_norm),
    Scalar("train_loss_max", "Largest finite loss of the steps reported in the last 30 s (the hook's maximum since "
           "its previous report, held by the daemon so that no scrape misses a spike).", gauge, lambda r: r.loss_max),
    Scalar("train_grad_norm_max", "Largest finite gradient norm of the steps reported in the last 30 s (held like "
           "trainmon_train_loss_max).", gauge, lambda r: r.grad_norm_max),
    Scalar("train_loss_spikes_total", "Steps whose loss exceeded the hook's factor (2) x the mean of the previous "
           "100 finite losses.", counter, lambda r: r.loss_spikes),
    Scalar("train_grad_norm_spikes_total", "Steps whose gradient norm exceeded the hook's factor (10) x the median "
           "of the previous 100 finite ones.", counter, lambda r: r.grad_norm_spikes),
    Scalar("train_nonfinite_loss_total", "Steps whose reported loss was NaN or inf.", counter,
           lambda r: r.nonfinite_losses),
    Scalar("train_cuda_alloc_retries_total", "CUDA caching-allocator retries (torch.cuda.memory_stats).", counter,
           lambda r: r.cuda_alloc_retries),
    Scalar("train_cuda_ooms_total", "CUDA out-of-memory errors (torch.cuda.memory_stats).", counter,
           lambda r: r.cuda_ooms),
    Scalar("train_collectives_captured_total", "CUDA collectives issued while a CUDA graph was being captured: "
           "counted once, their replays are unseen.", counter, lambda r: r.collectives_captured),
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
        return len(r.phase_seconds) + sum(k in JOB_GAUGE_HELP for k in r.job_gauges)
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
    rank_info = info("train_rank", "A training process reporting through the hook.", (*RANK, *INFO_LABELS))
    exited = gauge("train_rank_exited", "1 while a rank that exited is still served with its final values "
                   "(--exited-rank-retention); absent for a running rank.", RANK)
    for slot in slots:
        r = slot.report
        rank_info.add_metric([*_key(r), _opt(r.local_rank), _opt(r.world_size), r.uuid, r.backend, r.framework,
                              r.loss_scaler, str(r.pid), r.pod, r.namespace], {})
        if slot.exited_at is not None:
            exited.add_metric(_key(r), 1)
    out += [rank_info, exited]
    for scalar in SCALARS:
        family = scalar.make(scalar.name, scalar.help, RANK)
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
    messages = counter("ingest_messages_total", "Hook datagrams accepted.")
    messages.add_metric([], view.messages)
    coalesced = counter("ingest_coalesced_total",
                        "Accepted reports not applied because a newer one of the same process came in the same burst.")
    coalesced.add_metric([], view.coalesced)
    rejected = counter("ingest_rejected_total", "Hook datagrams rejected, by reason.", ("reason",))
    for reason, n in sorted(view.rejected.items()):
        rejected.add_metric([reason], n)
    live = gauge("ingest_ranks", "Live training ranks (job_id, rank pairs); exited ones still served not counted.")
    live.add_metric([], len(view.running))
    evicted = counter("ingest_evicted_total", "Entries dropped from the ingest tables, by reason.", ("reason",))
    for reason, n in sorted(view.evicted.items()):
        evicted.add_metric([reason], n)
    exits = counter("train_rank_exits_total",
                    "Ranks that left: clean (said goodbye), error (ending through an uncaught exception) or lost "
                    "(silent for --rank-ttl).", ("job_id", "reason"))
    for (job_id, reason), n in sorted(view.exits.items()):
        exits.add_metric([job_id, reason], n)
    rebound = counter("ingest_socket_rebinds_total", "Times the ingest socket file or its directory vanished "
                      "and was made again.")
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
    suspected = gauge("train_hang_suspected", "1 while the rank's oldest collective or its step has not moved for "
                      "longer than its hang threshold (the larger of the hook's floor and 5x its median step), "
                      "outside declared phases, or while its process is gone; 0 otherwise.", RANK)
    where = gauge("train_hang_location", "1 while the rank is suspected of a hang, `location` where its stack is: "
                  "collective, data (loading), other (also while its stack has not arrived) or gone (its process "
                  "died, or ended through an error).", (*RANK, "location"))
    stacks = info("train_stack", "1 while the rank is suspected of a hang; `signature` is a short hash of its "
                  "training thread's stack (unknown until it arrives), the stack itself on /api/v1/ranks.",
                  (*RANK, "signature"))
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
    family = histogram("train_step_duration_seconds", "Step wall time.", RANK)
    bounds = [*(floatToGoString(b) for b in STEP_BUCKETS), "+Inf"]
    for r in reports:
        family.add_metric(_key(r), list(zip(bounds, r.step_buckets, strict=True)), r.step_seconds_sum)
    return family


def _collective_families(reports: Iterable[Report]) -> list[Metric]:
    labels = (*RANK, "op", "group")
    time_ = counter("nccl_time_seconds_total", "Time in collectives: blocking calls from call to return; async "
                    "ones from the call until wait()/is_completed() or the step end saw them done; DDP buckets "
                    "from the comm hook to its future (the default hook's division included); on CUDA between "
                    "events around them. Waiting for peers included.", labels)
    calls = counter("nccl_calls_total", "Collective calls.", labels)
    sent = counter("nccl_bytes_total", "Bytes of the collectives' input tensors.", labels)
    untimed = counter("nccl_untimed_calls_total", "Collective calls counted without a time of their own (async NCCL "
                      "without TRAINMON_NCCL_TIMING, spans CUDA could not read): nccl_time covers the other calls.",
                      labels)
    size = gauge("nccl_group_size", "Ranks in the process group.", (*RANK, "group"))
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
    issued = counter("nccl_issued_total", "Collectives this rank has issued on the group (its sequence number).",
                     (*RANK, "group"))
    completed = counter("nccl_completed_total", "Collectives this rank has completed on the group.", (*RANK, "group"))
    inflight = gauge("nccl_inflight_oldest_seconds", "Age of the oldest issued-but-not-completed collective on the "
                     "group; absent when none.", (*RANK, "group", "op"))
    timeout = gauge("train_pg_timeout_seconds", "The process group's timeout (NCCL's watchdog ends the job after it); "
                    "the hang alerts fire at half of it when that is earlier.", (*RANK, "group"))
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
    families = {key: gauge(key, help_, RANK) for key, help_ in JOB_GAUGE_HELP.items()}
    for r in drivers:
        for key, value in sorted(r.job_gauges.items()):
            if key in families:
                families[key].add_metric(_key(r), value)
    return list(families.values())


def _label_families(reports: Iterable[Report], drivers: Iterable[Report], running: Iterable[Report]) -> list[Metric]:
    phase = gauge("train_phase", "1 while the rank is inside mon.phase(...).", (*RANK, "phase"))
    env = info("train_nccl_env", "An NCCL_* or TORCH_NCCL_* variable set in the rank's environment.",
               (*RANK, "name", "value"))
    phase_seconds = counter("train_phase_seconds_total", "Time spent inside mon.phase(...), per phase.",
                            (*RANK, "phase"))
    hook_errors = counter("train_hook_errors_total", "Errors the hook swallowed, by kind.", (*RANK, "kind"))
    parallel = info("train_parallel", "The job's parallel layout; unknown dimensions are empty.",
                    (*RANK, *PARALLEL_KEYS))
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

