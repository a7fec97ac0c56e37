"""The `training` collector: per-rank reports of the training hook, received over the ingest sockets.

The receiver thread (`trainmon.ingest.server`) keeps the latest report of every live rank in a
`RankTable`; `collect()` copies it and turns it into families, so ranks that said goodbye or went
silent for `--rank-ttl` are simply absent. Binding the socket is retried every cycle: a socket
directory that cannot be made fails this collector with the reason while the others serve.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.utils import floatToGoString

from trainmon.collectors.base import Collection
from trainmon.errors import NoData
from trainmon.families import Metric, counter, gauge, histogram, info
from trainmon.ingest.ranks import RankState, RankTable, TableView
from trainmon.ingest.server import IngestServer
from trainmon.settings import Settings
from trainmon.wire import PARALLEL_KEYS, STEP_BUCKETS, Report

RANK = ("job_id", "rank")
INFO_LABELS = ("local_rank", "world_size", "uuid", "backend", "framework", "loss_scaler", "pid")


@dataclass(frozen=True, slots=True)
class Scalar:
    """A per-rank value: family name, help, kind, and how to read it (None = absent)."""

    name: str
    help: str
    make: Callable[[str, str, tuple[str, ...]], Metric]
    read: Callable[[Report], float | None]


SCALARS = (
    Scalar("train_steps_total", "Optimizer steps finished.", counter, lambda r: r.steps),
    Scalar("train_samples_total", "Samples processed.", counter, lambda r: r.samples),
    Scalar("train_tokens_total", "Tokens processed.", counter, lambda r: r.tokens),
    Scalar("train_last_step_timestamp_seconds", "Unix time the last step finished.", gauge, lambda r: r.last_step),
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
    Scalar("train_nonfinite_loss_total", "Steps whose reported loss was NaN or inf.", counter,
           lambda r: r.nonfinite_losses),
    Scalar("train_cuda_alloc_retries_total", "CUDA caching-allocator retries (torch.cuda.memory_stats).", counter,
           lambda r: r.cuda_alloc_retries),
    Scalar("train_cuda_ooms_total", "CUDA out-of-memory errors (torch.cuda.memory_stats).", counter,
           lambda r: r.cuda_ooms),
)


class TrainingCollector:
    name = "training"

    def __init__(self, settings: Settings) -> None:
        self.table = RankTable(max_ranks=settings.max_ranks, ttl=settings.rank_ttl)
        self._server = IngestServer(self.table, socket_path=settings.ingest_socket,
                                    mode=settings.ingest_socket_mode, group=settings.ingest_socket_group,
                                    udp=settings.ingest_udp, inherited_fd=settings.ingest_socket_fd)

    def collect(self) -> Collection:
        if not self._server.enabled:
            raise NoData("ingest disabled: --ingest-socket is empty and --ingest-udp is not set")
        self._server.start()
        view = self.table.view()
        ranks = sorted(view.ranks, key=lambda s: (s.report.job_id, s.report.rank))
        return Collection(
            families=(*rank_families(ranks), *ingest_families(view)),
            found=(*(f"ingest listening on {e}" for e in self._server.endpoints()),
                   *(f"job {s.report.job_id} rank {s.report.rank}: {s.report.steps} steps" for s in ranks)),
            details={"ranks": [rank_details(s) for s in ranks]},
        )

    def close(self) -> None:
        self._server.close()


def rank_families(ranks: Iterable[RankState]) -> list[Metric]:
    reports = [s.report for s in ranks]
    out: list[Metric] = []
    rank_info = info("train_rank", "A training process reporting through the hook.", (*RANK, *INFO_LABELS))
    for r in reports:
        rank_info.add_metric([*_key(r), _opt(r.local_rank), _opt(r.world_size), r.uuid, r.backend, r.framework,
                              r.loss_scaler, str(r.pid)], {})
    out.append(rank_info)
    for scalar in SCALARS:
        family = scalar.make(scalar.name, scalar.help, RANK)
        for r in reports:
            value = scalar.read(r)
            if value is not None:
                family.add_metric(_key(r), value)
        out.append(family)
    out.append(_step_histogram(reports))
    out.extend(_collective_families(reports))
    out.extend(_label_families(reports))
    return out


def ingest_families(view: TableView) -> list[Metric]:
    messages = counter("ingest_messages_total", "Hook datagrams accepted.")
    messages.add_metric([], view.messages)
    coalesced = counter("ingest_coalesced_total",
                        "Accepted reports not applied because a newer one of the same process came in the same burst.")
    coalesced.add_metric([], view.coalesced)
    rejected = counter("ingest_rejected_total", "Hook datagrams rejected, by reason.", ("reason",))
    for reason, n in sorted(view.rejected.items()):
        rejected.add_metric([reason], n)
    live = gauge("ingest_ranks", "Live training ranks (job_id, rank pairs).")
    live.add_metric([], len(view.ranks))
    evicted = counter("ingest_evicted_total", "Entries dropped from the ingest tables, by reason.", ("reason",))
    for reason, n in sorted(view.evicted.items()):
        evicted.add_metric([reason], n)
    exits = counter("train_rank_exits_total",
                    "Ranks that left: clean (said goodbye) or lost (silent for --rank-ttl).", ("job_id", "reason"))
    for (job_id, reason), n in sorted(view.exits.items()):
        exits.add_metric([job_id, reason], n)
    return [messages, coalesced, rejected, live, evicted, exits]


def rank_details(state: RankState) -> dict[str, object]:
    r = state.report
    return {"job_id": r.job_id, "rank": r.rank, "pid": r.pid, "world_size": r.world_size, "uuid": r.uuid,
            "steps": r.steps, "last_step": r.last_step, "phase": r.phase, "last_report": state.received_wall}


def _step_histogram(reports: Iterable[Report]) -> Metric:
    family = histogram("train_step_duration_seconds", "Step wall time.", RANK)
    bounds = [*(floatToGoString(b) for b in STEP_BUCKETS), "+Inf"]
    for r in reports:
        family.add_metric(_key(r), list(zip(bounds, r.step_buckets, strict=True)), r.step_seconds_sum)
    return family


def _collective_families(reports: Iterable[Report]) -> list[Metric]:
    labels = (*RANK, "op", "group")
    time_ = counter("nccl_time_seconds_total", "Time in collectives, launch to completion, waiting for peers "
                    "included.", labels)
    calls = counter("nccl_calls_total", "Collective calls.", labels)
    sent = counter("nccl_bytes_total", "Bytes of the collectives' input tensors.", labels)
    size = gauge("nccl_group_size", "Ranks in the process group.", (*RANK, "group"))
    for r in reports:
        for c in r.collectives:
            key = [*_key(r), c.op, c.group]
            time_.add_metric(key, c.seconds)
            calls.add_metric(key, c.calls)
            sent.add_metric(key, c.bytes)
        for group, n in sorted(r.group_sizes.items()):
            size.add_metric([*_key(r), group], n)
    return [time_, calls, sent, size]


def _label_families(reports: Iterable[Report]) -> list[Metric]:
    phase = gauge("train_phase", "1 while the rank is inside mon.phase(...).", (*RANK, "phase"))
    env = info("train_nccl_env", "An NCCL_* or TORCH_NCCL_* variable set in the rank's environment.",
               (*RANK, "name", "value"))
    parallel = info("train_parallel", "The job's parallel layout; unknown dimensions are empty.",
                    (*RANK, *PARALLEL_KEYS))
    for r in reports:
        if r.phase:
            phase.add_metric([*_key(r), r.phase], 1)
        for name, value in sorted(r.nccl_env.items()):
            env.add_metric([*_key(r), name, value], {})
        if r.parallel:
            parallel.add_metric([*_key(r), *(_opt(r.parallel.get(k)) for k in PARALLEL_KEYS)], {})
    return [phase, env, parallel]


def _key(r: Report) -> list[str]:
    return [r.job_id, str(r.rank)]


def _opt(value: int | None) -> str:
    return "" if value is None else str(value)

