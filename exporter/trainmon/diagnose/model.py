"""What `trainmon diagnose` finds: per-rank figures in, findings out (SPEC §2's JSON object)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainmon import DOCS_BASE

# Causes reported with the hardware signals that line up, whatever their share.
WITH_HARDWARE = frozenset({"straggler", "communication", "data_loading", "slow_rank", "instability",
                           "silent_data_corruption", "storage"})
RUNBOOK = f"{DOCS_BASE}/runbook.md"
RUNBOOK_ANCHORS = {
    "communication": "trainmoncommunicationbound", "data_loading": "trainmondataloaderbound",
    "phase": "time-in-phases", "stall": "trainmontrainingstalled", "straggler": "trainmonstragglerrank",
    "hang": "trainmonjobhung", "storage": "trainmonstorageslow", "mfu": "mfu", "goodput": "goodput",
    "slow_rank": "trainmonslowrank", "instability": "trainmonlossspike",
    "silent_data_corruption": "trainmongradnormspike",
}


def runbook_url(topic: str) -> str:
    return f"{RUNBOOK}#{RUNBOOK_ANCHORS[topic]}"


@dataclass(frozen=True, slots=True)
class Hardware:
    signal: str
    instance: str
    device: str

    def as_dict(self) -> dict[str, str]:
        return {"signal": self.signal, "instance": self.instance, "device": self.device}


@dataclass(frozen=True, slots=True, kw_only=True)
class Rank:
    """One rank over the window: seconds (cumulative counters' increase) and where it runs."""

    rank: int
    instance: str
    uuid: str = ""
    seconds: float  # wall time the rank was there in the window
    steps: float = 0.0
    step_seconds: float = 0.0
    tokens: float = 0.0  # real tokens processed in the window (0: the hook reports none)
    pipeline_stage: int | None = None
    comm_wait: float = 0.0
    data_wait: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    model_flops: float | None = None
    peak_flops: float | None = None
    live: bool = True
    in_phase: bool = False
    since_last_step: float | None = None  # seconds since its last step finished (None: no step yet)
    inflight: float = 0.0  # age of its oldest in-flight collective
    grad_norm_spikes: float = 0.0  # spikes the hook counted in the window (SPEC §5)
    loss_spikes: float = 0.0
    spike_steps: tuple[float, float] | None = None  # its step counter at the first and last scrape that saw one
    hung: str | None = None  # where it is stuck while suspected of a hang (`trainmon_train_hang_location`)
    signature: str = ""  # its stack's signature while suspected
    issued: dict[str, float] = field(default_factory=dict)  # group -> collectives issued on it
    timeout_left: float | None = None  # the least of its groups' timeout less its oldest collective's age there
    nccl_env: dict[str, str] = field(default_factory=dict)  # the flight recorder's variables, where set

    @property
    def compute(self) -> float:
        """Step time less exposed communication and data wait (SPEC §4)."""
        return max(self.step_seconds - self.comm_wait - self.data_wait, 0.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class MountSignals:
    """One network or parallel file-system mount of a job's node: the window against the window before it.

    Rates are per second; latencies seconds per RPC; None where the client does not count it.
    """

    instance: str
    mount: str
    read_rate: float | None = None
    read_rate_before: float | None = None
    rpc_latency: float | None = None
    rpc_latency_before: float | None = None
    timeouts: float = 0.0  # RPC timeouts within the window
    timeouts_before: float = 0.0
    metadata_rate: float | None = None  # every operation but read and write
    metadata_rate_before: float | None = None

    def evidence(self, factor: float) -> dict[str, float]:
        """The signals that moved by `factor` against the window before (empty: this mount looks healthy)."""
        found: dict[str, float] = {}
        if _rose(self.rpc_latency, self.rpc_latency_before, factor):
            found["rpc_latency_seconds"] = self.rpc_latency or 0.0
            found["rpc_latency_before_seconds"] = self.rpc_latency_before or 0.0
        if self.timeouts > 0 and self.timeouts > factor * self.timeouts_before:
            found["rpc_timeouts"] = self.timeouts
        if self.read_rate is not None and self.read_rate_before and self.read_rate * factor < self.read_rate_before:
            found["read_throughput_drop"] = 1 - self.read_rate / self.read_rate_before
        if _rose(self.metadata_rate, self.metadata_rate_before, factor):
            found["metadata_ops_per_second"] = self.metadata_rate or 0.0
        return found


def _rose(now: float | None, before: float | None, factor: float) -> bool:
    return now is not None and before is not None and before > 0 and now > factor * before


@dataclass(frozen=True, slots=True, kw_only=True)
class RankStack:
    """What a rank's daemon serves on /api/v1/ranks for a hang: its latest stack and its process groups."""

    stack: tuple[str, ...] | None = None
    group_ranks: dict[str, str] = field(default_factory=dict)  # group -> its global ranks
    in_flight: tuple[str, ...] = ()  # groups where it has issued more than it completed


@dataclass(frozen=True, slots=True, kw_only=True)
class Hang:
    """What a `hang` finding adds: the class, the culprit's stack and group, the ranks grouped by stack."""

    hang_class: str
    stack: tuple[str, ...] | None = None  # the culprit's, innermost frame first (None: its daemon did not say)
    stack_groups: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (signature, ranks), largest group first
    outliers: tuple[tuple[int, str, str], ...] = ()  # (rank, instance, uuid) outside the largest stack group
    group: str | None = None  # the culprit's process group where it lags or waits
    group_ranks: str | None = None  # that group's global ranks, `0-7` or `0-56:8`
    timeout_left: float | None = None  # seconds before NCCL's watchdog ends the job
    flight_recorder: str | None = None  # the culprit's dump path when the flight recorder is on

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"class": self.hang_class, "stack": list(self.stack) if self.stack else None,
                                  "stack_groups": [{"signature": s, "ranks": list(r)} for s, r in self.stack_groups],
                                  "outliers": [{"rank": r, "instance": i, "uuid": u} for r, i, u in self.outliers]}
        for key, value in (("group", self.group), ("group_ranks", self.group_ranks),
                           ("nccl_timeout_left_seconds", self.timeout_left), ("flight_recorder", self.flight_recorder)):
            if value is not None:
                out[key] = value
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    cause: str
    share: float
    detail: str  # the numbers behind it, for a person
    rank: int | None = None
    instance: str | None = None
    uuid: str | None = None
    phase: str | None = None
    mount: str | None = None
    hardware: tuple[Hardware, ...] = ()
    elsewhere: tuple[Hardware, ...] = ()  # signals on the job's nodes that are not the culprit's GPU or node
    signals: dict[str, float] = field(default_factory=dict)  # storage: what moved on the mount
    ranks: tuple[int, ...] = ()  # the ranks a job-wide cause was seen on
    step_window: tuple[int, int] | None = None
    suggestion: str = ""
    straggler_cause: str | None = None  # a slow rank's: hardware, data_imbalance, pipeline_stage, unknown
    recoverable_share: float | None = None  # of the job's step time, without its slowest rank
    hang: Hang | None = None

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"cause": self.cause, "share": round(self.share, 4)}
        for key in ("rank", "instance", "uuid", "mount", "phase"):
            value = getattr(self, key)
            if value is not None and value != "":
                out[key] = value
        if self.ranks:
            out["ranks"] = list(self.ranks)
        if self.step_window is not None:
            out["step_window"] = list(self.step_window)
        if self.suggestion:
            out["suggestion"] = self.suggestion
        if self.cause in WITH_HARDWARE:
            out["hardware"] = [h.as_dict() for h in self.hardware]
        if self.elsewhere:
            out["hardware_elsewhere"] = [h.as_dict() for h in self.elsewhere]
        if self.signals:
            out["signals"] = {name: round(value, 6) for name, value in self.signals.items()}
        if self.straggler_cause is not None:
            out["straggler_cause"] = self.straggler_cause
            out["recoverable_share"] = _ratio(self.recoverable_share)
        if self.hang is not None:
            out.update(self.hang.as_dict())
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnosis:
    job_id: str
    since: str
    findings: tuple[Finding, ...]
    mfu: float | None
    goodput: float | None
    ranks: int
    rank_seconds: float
    mfu_detail: str = ""

    def as_dict(self) -> dict[str, object]:
        return {"job_id": self.job_id, "since": self.since, "findings": [f.as_dict() for f in self.findings],
                "mfu": _ratio(self.mfu), "goodput": _ratio(self.goodput)}


def _ratio(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
