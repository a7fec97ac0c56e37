"""From per-rank figures over a window to findings ranked by the share of the job's time they cost (pure)."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from trainmon.diagnose.model import Diagnosis, Finding, Hang, Hardware, MountSignals, Rank, RankStack

# Which hardware signals bear on which cause (a storage slowdown shows as data wait, a fabric one as
# communication wait: they are told apart by their own counters and signals).
CAUSE_SIGNALS = {
    "straggler": ("throttle", "xid", "ecc", "health", "ib_errors", "nvme_latency"),
    "communication": ("ib_errors", "ib_degraded", "xid", "health"),
    "data_loading": ("nvme_latency",),
    "storage": ("nvme_latency",),
    "stall": ("xid", "ecc", "health", "throttle"),
    "hang": ("xid", "health", "ib_errors", "ib_degraded"),
    # A rank's own GPU: what slows one GPU down, or corrupts its numbers.
    "slow_rank": ("throttle", "power_cap", "clocks", "pcie_link", "xid", "ecc"),
    "instability": ("throttle", "power_cap", "clocks", "pcie_link", "xid", "ecc"),
}
# Signals of one GPU (the others, InfiniBand ports and NVMe devices, are the node's).
GPU_SIGNALS = frozenset({"throttle", "power_cap", "clocks", "pcie_link", "xid", "ecc", "health"})
SDC_CHECK = "dcgmi diag -r 3"
# Found however little time they cost so far: each is a reason to act now.
ALWAYS_REPORTED = frozenset({"stall", "hang", "slow_rank", "instability", "silent_data_corruption"})
# The classes of a hung job, strongest evidence first, as TrainmonJobHung weighs them (prometheus/rulegen/hang.py).
HANG_WEIGHTS = {"gone": 4000, "data": 3000, "host": 2000, "collective": 1000, "unknown": 0}
FLIGHT_RECORDER_DEFAULT = "/tmp/nccl_trace_rank_"  # torch's TORCH_NCCL_DEBUG_INFO_TEMP_FILE default


@dataclass(frozen=True, slots=True, kw_only=True)
class Thresholds:
    min_share: float = 0.10  # a cause costing less of the job's time is not reported
    straggler_score: float = 0.75  # as TrainmonStragglerRank
    dataloader_bound: float = 0.20  # as TrainmonDataLoaderBound: data wait over this share of step time
    stall_seconds: float = 900.0  # as TrainmonTrainingStalled
    hang_seconds: float = 300.0  # as TrainmonCollectiveHang
    storage_factor: float = 2.0  # as TrainmonStorageSlow: a mount's signal against its own window before
    slow_rank_zscore: float = 3.5  # as TrainmonSlowRank (prometheus/rulegen/config.py)
    slow_rank_excess: float = 0.03
    slow_rank_mad_floor: float = 0.005
    straggler_cause_share: float = 0.8  # as rank:trainmon_train_straggler_cause:share


def diagnose(job_id: str, since: str, ranks: Sequence[Rank], hardware: Sequence[Hardware],
             thresholds: Thresholds = Thresholds(), mounts: Sequence[MountSignals] = (),
             stacks: Mapping[int, RankStack] | None = None) -> Diagnosis:
    """`stacks`: what the daemons serve for the ranks of a hung job (the culprit's at least), by rank."""
    total = sum(r.seconds for r in ranks)
    if total <= 0:
        return Diagnosis(job_id=job_id, since=since, findings=(), mfu=None, goodput=None, ranks=len(ranks),
                         rank_seconds=0.0)
    signals = _Signals(hardware, ranks)
    stragglers = _stragglers(ranks, total, thresholds, signals)
    slow_ranks = _slow_ranks(ranks, total, thresholds, signals, {f.rank for f in stragglers})
    findings = [*(_with_cause(f, ranks, thresholds) for f in (*stragglers, *slow_ranks)), *_phases(ranks, total),
                *_stalls(ranks, total, thresholds, signals),
                *(_job_hang(ranks, total, signals, stacks or {}) or _hangs(ranks, total, thresholds, signals)),
                *_spikes(ranks, signals)]
    data_bound = _data_bound_nodes(ranks, total, thresholds, signals)
    # Peers waiting for a straggler, or for the ranks of a node that waits for data, is their cost, not the network's.
    explained = sum(f.share for f in stragglers) + sum(_waiting_for(ranks, f.instance) for f in data_bound) / total
    comm = sum(r.comm_wait for r in ranks) / total
    findings.append(Finding(cause="communication", share=max(comm - explained, 0.0),
                            detail=f"ranks blocked on communication {comm:.0%} of their time"
                                   + (f" ({explained:.0%} of it waiting for the straggler or a data-bound node)"
                                      if explained else ""),
                            hardware=signals.on_job("communication")))
    data = sum(r.data_wait for r in ranks) / total
    findings += data_bound or [_data_wait(data, [m for m in mounts if m.instance in {r.instance for r in ranks}],
                                          thresholds, signals)]
    kept = [f for f in findings if f.share >= thresholds.min_share or f.cause in ALWAYS_REPORTED]
    mfu, mfu_detail = _mfu(ranks)
    # Compute and rank time are separate increase() queries, each extrapolated to the window's edges: their
    # ratio can come out a little over 1, which a share of time cannot be.
    goodput = min(sum(r.compute for r in ranks) / total, 1.0)
    return Diagnosis(job_id=job_id, since=since, findings=tuple(sorted(kept, key=lambda f: -f.share)), mfu=mfu,
                     goodput=goodput, ranks=len(ranks), rank_seconds=total,
                     mfu_detail=mfu_detail)


def _data_wait(share: float, mounts: Sequence[MountSignals], t: Thresholds, signals: _Signals) -> Finding:
    """Data wait is `storage` when a mount of the job's nodes moved against its own past (latency, timeouts,
    throughput, metadata rate); otherwise the input pipeline itself (`data_loading`, a fast local tier)."""
    moved = [(m, e) for m in mounts if (e := m.evidence(t.storage_factor))]
    if not moved:
        return Finding(cause="data_loading", share=share,
                       detail=f"ranks waited for their next batch {share:.0%} of their time; no network file "
                              "system of their nodes slowed", hardware=signals.on_job("data_loading"))
    mount, evidence = max(moved, key=lambda item: len(item[1]))
    others = sorted({f"{m.mount} on {m.instance}" for m, _ in moved} - {f"{mount.mount} on {mount.instance}"})
    return Finding(
        cause="storage", share=share, mount=mount.mount, instance=mount.instance, signals=evidence,
        detail=f"ranks waited for their next batch {share:.0%} of their time while {mount.mount} on "
               f"{mount.instance} moved: {', '.join(_describe(name, v) for name, v in evidence.items())}"
               + (f" (also {', '.join(others)})" if others else ""),
        hardware=tuple(Hardware("fs_latency", m.instance, m.mount) for m, _ in moved) + signals.on_job("storage"))


def _data_bound_nodes(ranks: Sequence[Rank], total: float, t: Thresholds, signals: _Signals) -> list[Finding]:
    """Nodes whose ranks wait for data over the threshold while the job as a whole does not (a node's NVMe
    collapsed, its loader workers starve): the other ranks wait for them in collectives, which is this node's
    cost. Each with its own node's hardware, not the job's."""
    def share(group: Sequence[Rank]) -> float:
        steps = sum(r.step_seconds for r in group)
        return sum(r.data_wait for r in group) / steps if steps > 0 else 0.0

    if share(ranks) > t.dataloader_bound:
        return []
    findings = []
    for instance in sorted({r.instance for r in ranks}):
        mine = [r for r in ranks if r.instance == instance]
        if len(mine) == len(ranks) or share(mine) <= t.dataloader_bound:
            continue
        waited = _waiting_for(ranks, instance)
        findings.append(Finding(
            cause="data_loading", share=(sum(r.data_wait for r in mine) + waited) / total, instance=instance,
            ranks=tuple(r.rank for r in mine),
            detail=f"the {len(mine)} rank(s) on {instance} waited for their next batch {share(mine):.0%} of their step "
                   f"time while the job's other ranks did not; those waited {waited:.0f} rank-seconds for them in "
                   "collectives",
            hardware=signals.on_node("data_loading", instance)))
    return findings


def _waiting_for(ranks: Sequence[Rank], instance: str | None) -> float:
    """The communication wait of the ranks on other nodes than `instance`."""
    return sum(r.comm_wait for r in ranks if r.instance != instance)


def _describe(name: str, value: float) -> str:
    return {"rpc_latency_seconds": f"RPC latency {value * 1000:.1f} ms",
            "rpc_latency_before_seconds": f"from {value * 1000:.1f} ms",
            "rpc_timeouts": f"{value:.0f} RPC timeouts",
            "read_throughput_drop": f"read throughput down {value:.0%}",
            "metadata_ops_per_second": f"metadata {value:.0f} ops/s"}[name]


class _Signals:
    def __init__(self, hardware: Sequence[Hardware], ranks: Sequence[Rank]) -> None:
        self._hardware = hardware
        self._instances = {r.instance for r in ranks}

    def on_node(self, cause: str, instance: str) -> tuple[Hardware, ...]:
        return tuple(h for h in self._hardware if h.instance == instance and h.signal in CAUSE_SIGNALS[cause])

    def on_gpu(self, cause: str, instance: str, uuid: str) -> tuple[Hardware, ...]:
        return tuple(h for h in self.on_node(cause, instance) if h.device == uuid)

    def on_job(self, cause: str) -> tuple[Hardware, ...]:
        return tuple(h for h in self._hardware if h.instance in self._instances and h.signal in CAUSE_SIGNALS[cause])

    def of_culprit(self, cause: str, instance: str, uuid: str) -> tuple[tuple[Hardware, ...], tuple[Hardware, ...]]:
        """The signals on the culprit's GPU and node (another GPU's are not its), and the rest on the job's nodes.

        Without the culprit's GPU (`uuid` empty) every signal of its node is its.
        """
        own = tuple(h for h in self.on_node(cause, instance) if not uuid or h.signal not in GPU_SIGNALS
                    or h.device == uuid)
        return own, tuple(h for h in self.on_job(cause) if h not in own)


def _stragglers(ranks: Sequence[Rank], total: float, t: Thresholds, signals: _Signals) -> list[Finding]:
    """Ranks whose compute per step is slow against the fastest rank's; the cost is the others' wait for them."""
    stepping = [r for r in ranks if r.steps > 0]
    if len(stepping) < 2:
        return []
    per_step = _compute_per_step(stepping)
    # A rank whose waits swallow its step reads no compute: it is not the fastest.
    fastest = min((v for v in per_step.values() if v > 0), default=0.0)
    waiting = _waiting_more_than_the_median(stepping)
    findings = []
    for r in stepping:
        slow = per_step[r.rank]
        score = fastest / slow if slow > 0 else 1.0
        if score >= t.straggler_score or r.rank in waiting:
            continue
        cost = sum(max(slow - per_step[o.rank], 0.0) * o.steps for o in stepping if o is not r)
        own, elsewhere = signals.of_culprit("straggler", r.instance, r.uuid)
        findings.append(Finding(
            cause="straggler", share=cost / total, rank=r.rank, instance=r.instance, uuid=r.uuid or None,
            detail=f"rank {r.rank} computes {slow * 1000:.0f} ms per step against the fastest rank's "
                   f"{fastest * 1000:.0f} ms (score {score:.2f}); the other ranks wait for it",
            hardware=own, elsewhere=elsewhere))
    return findings


def _waiting_more_than_the_median(ranks: Sequence[Rank]) -> set[int]:
    """Ranks that wait in communication at least as much as the median rank: they wait for someone, so they are
    never the straggler."""
    shares = {r.rank: r.comm_wait / r.step_seconds if r.step_seconds > 0 else 0.0 for r in ranks}
    median = statistics.median(shares.values())
    return {rank for rank, share in shares.items() if share >= median}


def _compute_per_step(ranks: Sequence[Rank]) -> dict[int, float]:
    return {r.rank: r.compute / r.steps for r in ranks if r.steps > 0}


def _slow_ranks(ranks: Sequence[Rank], total: float, t: Thresholds, signals: _Signals,
                stragglers: set[int | None]) -> list[Finding]:
    """Ranks whose compute per step is an outlier among the job's (a robust z-score, as TrainmonSlowRank), too
    little slower to be a straggler: BLOOM-176B's one slow GPU cost 5%. The hardware is that GPU's own."""
    per_step = _compute_per_step(ranks)
    if len(per_step) < 3:
        return []
    median = statistics.median(per_step.values())
    mad = max(statistics.median(abs(v - median) for v in per_step.values()), t.slow_rank_mad_floor * median)
    findings = []
    for r in ranks:
        slow = per_step.get(r.rank)
        if slow is None or r.rank in stragglers or mad <= 0:
            continue
        z = 0.6745 * (slow - median) / mad
        if z <= t.slow_rank_zscore or slow <= (1 + t.slow_rank_excess) * median:
            continue
        cost = sum(max(slow - per_step[o.rank], 0.0) * o.steps for o in ranks if o.rank in per_step and o is not r)
        findings.append(Finding(
            cause="slow_rank", share=cost / total, rank=r.rank, instance=r.instance, uuid=r.uuid or None,
            detail=f"rank {r.rank} computes {slow * 1000:.0f} ms per step, {slow / median - 1:.1%} over the median "
                   f"rank's {median * 1000:.0f} ms (robust z-score {z:.1f}); the job steps at its pace",
            hardware=signals.on_gpu("slow_rank", r.instance, r.uuid)))
    return findings


CAUSE_WORDS = {
    "pipeline_stage": "its whole pipeline stage is that slow: rebalance the layers between stages",
    "data_imbalance": "it processes more tokens per step than its peers at a normal time per token: balance the "
                      "packing or the sequence lengths across ranks",
    "hardware": "the same tokens as its peers, more time per token: its GPU or node",
    "unknown": "no cause explains most of it (report tokens= and the pipeline stage to tell)",
}


def _with_cause(finding: Finding, ranks: Sequence[Rank], t: Thresholds) -> Finding:
    """A straggler or slow-rank finding with its cause and the share of step time recoverable without it."""
    per_step = _compute_per_step(ranks)
    cause, explained = straggler_cause(finding.rank, ranks, per_step, t.straggler_cause_share)
    recoverable = recoverable_share(ranks, per_step)
    why = f" ({explained:.0%} of its extra time)" if explained else ""
    return replace(finding, straggler_cause=cause, recoverable_share=recoverable,
                   detail=f"{finding.detail}; cause {cause}{why}: {CAUSE_WORDS[cause]}")


def straggler_cause(rank: int | None, ranks: Sequence[Rank], per_step: dict[int, float],
                    needed: float) -> tuple[str, float]:
    """Why `rank` computes slower than the median rank, and the share of its extra time (in logs: the factors of
    stage, tokens and time per token multiply) that explains; as the recording rules, first cause first."""
    median = statistics.median(per_step.values()) if per_step else 0.0
    slow = per_step.get(rank, 0.0) if rank is not None else 0.0
    if median <= 0 or slow <= median:
        return "unknown", 0.0
    excess = math.log(slow / median)
    me = next(r for r in ranks if r.rank == rank)
    mates = [per_step[r.rank] for r in ranks if r.pipeline_stage is not None
             and r.pipeline_stage == me.pipeline_stage and r.rank in per_step]
    tokens = {r.rank: r.tokens / r.steps for r in ranks if r.rank in per_step and r.tokens > 0}
    candidates = []
    if len(mates) > 1 and min(mates) > 0:
        candidates.append(("pipeline_stage", math.log(min(mates) / median) / excess))
    if rank in tokens:
        per_token = {r: per_step[r] / n for r, n in tokens.items()}
        candidates += [("data_imbalance", math.log(tokens[rank] / statistics.median(tokens.values())) / excess),
                       ("hardware", math.log(per_token[rank] / statistics.median(per_token.values())) / excess)]
    return next(((cause, min(share, 1.0)) for cause, share in candidates if share >= needed), ("unknown", 0.0))


def recoverable_share(ranks: Sequence[Rank], per_step: dict[int, float]) -> float | None:
    """The share of the job's step time saved if its slowest rank computed like its median one (every rank steps at
    the slowest one's pace): the what-if figure."""
    steps = [r.step_seconds / r.steps for r in ranks if r.steps > 0]
    if not per_step or not steps or statistics.median(steps) <= 0:
        return None
    gap = max(per_step.values()) - statistics.median(per_step.values())
    return min(max(gap / statistics.median(steps), 0.0), 1.0)


def _spikes(ranks: Sequence[Rank], signals: _Signals) -> list[Finding]:
    """Grad-norm or loss spikes: on most ranks at once the run is unstable; on one rank only, its GPU is suspect."""
    spiking = [r for r in ranks if r.grad_norm_spikes > 0 or r.loss_spikes > 0]
    if not spiking:
        return []
    windows = [r.spike_steps for r in spiking if r.spike_steps is not None]
    window = (int(min(w[0] for w in windows)), int(max(w[1] for w in windows))) if windows else None
    counts = (f"{sum(r.grad_norm_spikes for r in spiking):.0f} grad-norm and {sum(r.loss_spikes for r in spiking):.0f} "
              f"loss spikes")
    steps = f" around steps {window[0]}-{window[1]}" if window else ""
    if len(spiking) == 1 and len(ranks) > 2:
        (r,) = spiking
        return [Finding(
            cause="silent_data_corruption", share=0.0, rank=r.rank, instance=r.instance, uuid=r.uuid or None,
            ranks=(r.rank,), step_window=window,
            detail=f"suspect silent data corruption on GPU {r.uuid or '?'} ({r.instance}): only rank {r.rank} "
                   f"counted {counts}{steps} while its {len(ranks) - 1} peers stayed normal",
            suggestion=f"drain the node and run `{SDC_CHECK}` on GPU {r.uuid or '?'}",
            hardware=signals.on_gpu("instability", r.instance, r.uuid))]
    hardware = signals.on_job("instability")
    lined_up = "; hardware signals on the job's nodes line up: check them first" if hardware else \
        "; no hardware signal on the job's nodes"
    return [Finding(
        cause="instability", share=0.0, ranks=tuple(r.rank for r in spiking), step_window=window,
        detail=f"{len(spiking)} of {len(ranks)} ranks counted {counts}{steps}{lined_up}",
        suggestion="lower the learning rate or skip the batches of the window; roll back if the loss does not recover",
        hardware=hardware)]


def _phases(ranks: Sequence[Rank], total: float) -> list[Finding]:
    seconds: dict[str, float] = {}
    for r in ranks:
        for name, s in r.phases.items():
            seconds[name] = seconds.get(name, 0.0) + s
    return [Finding(cause="phase", share=s / total, phase=name,
                    detail=f"{s:.0f} rank-seconds inside mon.phase({name!r})") for name, s in seconds.items()]


def _stalls(ranks: Sequence[Rank], total: float, t: Thresholds, signals: _Signals) -> list[Finding]:
    return [Finding(cause="stall", share=min(r.since_last_step, r.seconds) / total, rank=r.rank,
                    instance=r.instance, uuid=r.uuid or None,
                    detail=f"rank {r.rank} is live, in no phase, and finished no step for {r.since_last_step:.0f} s",
                    hardware=signals.on_node("stall", r.instance))
            for r in ranks
            if r.live and not r.in_phase and r.since_last_step is not None and r.since_last_step > t.stall_seconds]


def _hangs(ranks: Sequence[Rank], total: float, t: Thresholds, signals: _Signals) -> list[Finding]:
    stuck = [r for r in ranks if r.live and r.inflight > t.hang_seconds]
    if not stuck:
        return []
    oldest = max(stuck, key=lambda r: r.inflight)
    return [Finding(cause="hang", share=sum(min(r.inflight, r.seconds) for r in stuck) / total,
                    instance=oldest.instance,
                    detail=f"{len(stuck)} rank(s) inside a collective for up to {oldest.inflight:.0f} s",
                    hardware=signals.on_node("hang", oldest.instance))]


def hang_culprit(ranks: Sequence[Rank]) -> tuple[str, Rank] | None:
    """The class of a hung job and the rank that holds it, as TrainmonJobHung decides: every rank suspected and one
    still alive; each rank's strongest class, and within it the rank whose stack the fewest share. None otherwise."""
    if not ranks or any(r.hung is None for r in ranks) or all(r.hung == "gone" for r in ranks):
        return None
    peers = Counter(r.signature for r in ranks if r.signature)
    most: dict[str, float] = {}
    for r in ranks:
        for group, issued in r.issued.items():
            most[group] = max(most.get(group, 0.0), issued)

    def class_of(r: Rank) -> str:
        if r.hung in ("gone", "data"):
            return r.hung
        if any(issued < most[group] for group, issued in r.issued.items()):
            return "host"
        return "collective" if r.hung == "collective" else "unknown"

    _, _, hang_class, culprit = max((HANG_WEIGHTS[c] - peers.get(r.signature, 0), -r.rank, c, r)
                                    for r in ranks if (c := class_of(r)))
    return hang_class, culprit


def _job_hang(ranks: Sequence[Rank], total: float, signals: _Signals,
              stacks: Mapping[int, RankStack]) -> list[Finding]:
    """Every rank stuck: the class, the culprit with its stack and group, the ranks grouped by stack."""
    found = hang_culprit(ranks)
    if found is None:
        return []
    hang_class, c = found
    by_stack: dict[str, list[int]] = {}
    for r in sorted(ranks, key=lambda r: r.rank):
        by_stack.setdefault(r.signature or f"({r.hung})", []).append(r.rank)
    groups = sorted(by_stack.items(), key=lambda item: (-len(item[1]), item[1][0]))
    healthy = set(groups[0][1]) if len(groups) > 1 else set()
    outliers = tuple((r.rank, r.instance, r.uuid) for r in ranks if healthy and r.rank not in healthy)
    mine = stacks.get(c.rank, RankStack())
    behind = sorted(g for g, n in c.issued.items() if any(o.issued.get(g, 0.0) > n for o in ranks))
    group = next(iter(behind or sorted(mine.in_flight) or sorted(c.issued)), None)
    timeout_left = min((r.timeout_left for r in ranks if r.timeout_left is not None), default=None)
    dump = _flight_recorder(c)
    stuck = sum(min(max(r.inflight, r.since_last_step or 0.0), r.seconds) for r in ranks)
    detail = (f"every rank is stuck ({hang_class}): rank {c.rank} on {c.instance} holds the job"
              + (f", in group {group}" + (f" (ranks {mine.group_ranks[group]})" if group in mine.group_ranks else "")
                 if group else "")
              + f"; {len(groups)} distinct stack(s)"
              + (f", outlier rank(s) {', '.join(str(o[0]) for o in outliers)}" if outliers else "")
              + (f"; NCCL's watchdog ends the job in {timeout_left:.0f} s" if timeout_left is not None else "")
              + ("" if mine.stack else "; the culprit's stack was not available from its daemon"))
    suggestion = f"read the flight recorder's dump {dump}" if dump else ""
    return [Finding(cause="hang", share=stuck / total, rank=c.rank, instance=c.instance, uuid=c.uuid or None,
                    ranks=tuple(r.rank for r in ranks), detail=detail, suggestion=suggestion,
                    hardware=signals.on_node("hang", c.instance),
                    hang=Hang(hang_class=hang_class, stack=mine.stack, stack_groups=tuple(
                        (s, tuple(r)) for s, r in groups), outliers=outliers, group=group,
                        group_ranks=mine.group_ranks.get(group) if group else None, timeout_left=timeout_left,
                        flight_recorder=dump))]


def _flight_recorder(r: Rank) -> str | None:
    """Where the culprit's NCCL flight recorder dumps (written when the watchdog fires), when the job runs it."""
    if r.nccl_env.get("TORCH_NCCL_TRACE_BUFFER_SIZE", "0").strip() in ("", "0"):
        return None
    prefix = r.nccl_env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") or FLIGHT_RECORDER_DEFAULT
    return f"{prefix}{r.rank} on {r.instance}"


def _mfu(ranks: Sequence[Rank]) -> tuple[float | None, str]:
    """Model FLOPs over peak FLOPs, over the ranks whose FLOPs and GPU peak are both known and that were
    there for some of the window (a rank whose process starts after `now` was there for none of it)."""
    known = [r for r in ranks if r.model_flops is not None and (r.peak_flops or 0.0) > 0 and r.seconds > 0]
    if not known:
        return None, "no rank reports model FLOPs on a GPU of known peak"
    flops = sum(r.model_flops or 0.0 for r in known)
    peak = sum((r.peak_flops or 0.0) * r.seconds for r in known)
    rate = flops / sum(r.seconds for r in known)
    return flops / peak, f"{rate / 1e12:.3g} TFLOP/s per rank against a dense peak of " \
                         f"{peak / sum(r.seconds for r in known) / 1e12:.4g} over {len(known)} rank(s)"
