"""The one place users re-target the rule bundle: selector and thresholds, each with when to change it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from bundle.config import IDLE_SM_RATIO, SELECTOR

from trainmon import DOCS_BASE
from trainmon.catalog import Family

RUNBOOK = f"{DOCS_BASE}/runbook.md"


@dataclass(frozen=True, slots=True, kw_only=True)
class RulesConfig:
    """Parameters of prometheus/rules.yml and alerts.yml (see docs/runbook.md, "Parameters")."""

    # How Prometheus scrapes trainmon. Change it when your scrape job has another name.
    selector: str = SELECTOR
    # Where each alert's runbook_url points; the anchor is the lower-cased alert name.
    runbook: str = RUNBOOK
    # Your Grafana's base URL: each alert's dashboard_url is a panel of the trainmon dashboards there.
    grafana_url: str = "http://localhost:3000"
    # Seed guide: gradient communication above 40% of step time means the job is network bound.
    comm_bound_ratio: float = 0.40
    # Waiting for batches above this share of step time means the input pipeline is the bottleneck.
    dataloader_bound_ratio: float = 0.20
    # A rank whose relative straggler score (the job's fastest compute time over its own) is below
    # this is a straggler (nvidia-resiliency-ext's default; 0.75 = a third slower than the fastest)...
    straggler_score_threshold: float = 0.75
    # ...while the job's median rank spends at least this share of step time waiting in collectives.
    straggler_peer_wait_ratio: float = 0.15
    # The individual score compares a rank's recent compute time per step with its best over this.
    straggler_individual_window: str = "1h"
    # A straggler's cause (pipeline stage, data imbalance, hardware) is named only when it explains at least this
    # share of the rank's extra compute time per step (traceml's rule); otherwise it is `unknown`.
    straggler_cause_share: float = 0.8
    # The trainmon_gpu_peak_flops dtype MFU divides by: the precision the model trains in.
    mfu_dtype: str = "bf16"
    # A live rank, not in a phase, with no finished step for this long is stalled. Raise it for jobs
    # whose steps take longer than a few minutes.
    stall_seconds: int = 900
    # A collective in flight this long on a group is a hang (SPEC §6). Raise it above your longest
    # legitimate wait outside a phase (a slow rank's checkpoint that is not inside mon.phase).
    collective_hang_seconds: int = 300
    # Throughput below this fraction of the job's own average over the baseline window regressed.
    throughput_floor_ratio: float = 0.75
    baseline_window: str = "1h"
    baseline_offset: str = "15m"
    # Loss divergence: the job's mean loss of the last 30 minutes above this x the 30 minutes before
    # (a loss rising 20% over an hour crosses 1.05 within about 40 minutes; a healthy job's loss falls)...
    loss_diverging_ratio: float = 1.05
    # ...or one rank with more than this many loss spikes in 30 minutes (llm-foundry's KillLossSpike patience).
    loss_spike_patience: int = 4
    # Loss spikes, non-finite losses and loss-scale collapses on more than this share of a job's ranks alert
    # once for the job; on fewer, once per rank (a suspect GPU: silent data corruption).
    numerics_job_wide_ratio: float = 0.5
    # Neither is judged in a job's first minutes: warm-up loss falls fast and swings.
    warmup_seconds: int = 1200
    # Throughput drift: the job's steps per second of training time (phases excluded) this far below its
    # best hourly mean for the alert's `for:` (30m; `alert_for` changes it). Llama 3 reports 1-2% diurnal
    # variation: 3% clears it.
    throughput_drift_ratio: float = 0.03
    throughput_drift_lookback: str = "24h"
    # Slow rank: a robust z-score (Iglewicz-Hoaglin modified z, 0.6745 x distance / MAD) of a rank's compute
    # time per step over its job's ranks above this...
    slow_rank_zscore: float = 3.5
    # ...and at least this much above the job's median rank (a 5% slow GPU cost BLOOM 5% throughput).
    slow_rank_excess_ratio: float = 0.03
    # The MAD is floored at this share of the median, so very uniform ranks do not make noise an outlier.
    slow_rank_mad_floor_ratio: float = 0.005
    # SM activity below this on a training rank's GPU is idle (NCCL spin kernels stay near 0 here).
    idle_sm_ratio: float = IDLE_SM_RATIO
    # Where SM activity is absent (pre-Hopper without GPM): power below this share of the limit.
    idle_power_ratio: float = 0.25
    # XIDs that need an operator (not application XIDs 13, 31, 43), and how long one keeps firing.
    critical_xids: tuple[int, ...] = (48, 62, 64, 74, 79, 95, 119, 120)
    xid_firing_seconds: int = 900
    # Share of time spent thermally throttled.
    thermal_throttle_ratio: float = 0.10
    # Mean NVMe request latency over this (datacenter NVMe answers in 0.1-0.2 ms) and this many times the
    # drive's own median of the last day, or the fastest drive of its model on the node, is slow...
    nvme_latency_floor_seconds: float = 0.002
    nvme_slow_factor: float = 10.0
    # ...and over this whatever its past and its siblings.
    nvme_latency_seconds: float = 0.05
    # Symbol and receive errors per port in 10 minutes.
    infiniband_errors: int = 10
    # An alert's `for:` by alert name, e.g. {"TrainmonTrainingStalled": "30m"}, where the generator's own
    # is not right for you (an alert without one keeps none).
    alert_for: Mapping[str, str] = field(default_factory=dict)
    # A rule group's evaluation interval by group name, e.g. {"trainmon.gpu": "1m"}.
    group_intervals: Mapping[str, str] = field(default_factory=dict)
    # A file-system mount is slow when its RPC latency (or timeout rate) over 5 minutes is this many
    # times its own over the last hour, while a job on the node waits for data over this share of its
    # step time (half of dataloader_bound_ratio: storage is named before the input pipeline is blamed).
    storage_slow_factor: float = 2.0
    storage_dataloader_ratio: float = 0.10
    # A checkpoint phase this many times the median of its job's earlier completed checkpoints (of the last
    # day) is slow, once the job has completed this many: a job's first checkpoints have no usual length.
    checkpoint_slow_factor: float = 3.0
    checkpoint_baseline_count: int = 3
    # NVLink errors (CRC, replay, recovery) per link in 10 minutes; a few CRC errors a day are normal.
    nvlink_errors: int = 10

    def m(self, metric: Family | str, *matchers: str) -> str:
        """`metric{<selector>, *matchers}` of a family or one of its series (`Family.sum`)."""
        return f"{metric}{{{', '.join((self.selector, *matchers))}}}"

    def critical_xid_pattern(self) -> str:
        """The regular expression matching the critical XIDs."""
        return "|".join(str(x) for x in self.critical_xids)

    def for_duration(self, alert: str, default: str) -> str:
        return default if default == "0s" else self.alert_for.get(alert, default)

    def group_interval(self, group: str, default: str) -> str:
        return self.group_intervals.get(group, default)

    def runbook_url(self, alert: str) -> str:
        return f"{self.runbook}#{alert.lower()}"
