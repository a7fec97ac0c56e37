"""Alerting rules: every alert of SPEC §6 plus the ones a GPU-cluster on-call expects.

`critical` pages, `warning` files a ticket. Counters that may first appear already non-zero use
`rising()`, so a series' first increase is not missed.
"""

from __future__ import annotations

from dataclasses import replace

from .config import RulesConfig
from .model import Alert, Group
from .numerics import numerics_alerts
from .recording import NOT_OTHER

ON_RANK = "on (instance, job, job_id, rank)"
# NVML throttle reasons spelled `thermal`, `hw_thermal_slowdown`, `sw_thermal_slowdown`, ...
THERMAL = 'reason=~".*thermal.*"'


def rising(series: str, window: str) -> str:
    """A counter that grew within `window`, or that appeared within it already above zero."""
    return f"""(
  increase({series}[{window}]) > 0
or
  ({series} > 0 unless {series} offset {window})
)"""


def not_in_phase(c: RulesConfig, on: str = ON_RANK) -> str:
    return f"unless {on} {c.m('trainmon_train_phase')} == 1"


def exporter_alerts(c: RulesConfig) -> list[Alert]:
    success = c.m("trainmon_collector_success")
    return [
        Alert(
            alert="TrainmonExporterDown",
            expr=f"{c.m('up')} == 0",
            for_="5m",
            severity="critical",
            summary="A trainmon daemon cannot be scraped.",
            description=(
                "Prometheus has not scraped {{ $labels.instance }} (job {{ $labels.job }}) for 5 minutes: "
                "GPU, fabric and training alerts for this node are blind."
            ),
        ),
        Alert(
            alert="TrainmonExporterAbsent",
            expr=f"absent({c.m('up')})",
            for_="15m",
            severity="warning",
            summary="Prometheus has no trainmon target at all.",
            description=(
                "No target matches " + c.selector.replace('"', "'") + " for 15 minutes: service discovery "
                "or the scrape configuration lost every trainmon daemon."
            ),
        ),
        Alert(
            alert="TrainmonCollectorFailing",
            # A collector that never worked on this node (no InfiniBand: NoData) is not failing; the GPU
            # collector is, even if it never worked: a GPU node whose NVML never loads reports no GPU at all.
            expr=f"""
  {success} == 0
and on (instance, job, collector)
  (
    max_over_time({success}[1d]) == 1
  or
    {c.m("trainmon_collector_success", 'collector="gpu"')}
  )""",
            for_="15m",
            severity="warning",
            summary="A trainmon collector is failing.",
            description=(
                "Collector {{ $labels.collector }} on {{ $labels.instance }} has failed for 15 minutes; its metrics "
                "are missing. /api/v1/status says why."
            ),
        ),
    ]


def gpu_alerts(c: RulesConfig) -> list[Alert]:
    xid_matcher = 'xid=~"' + "|".join(str(x) for x in c.critical_xids) + '"'
    lost = Alert(
        alert="TrainmonGPULost",
        expr=f"{c.m('trainmon_gpu_up')} == 0",
        for_="2m",
        severity="critical",
        summary="A GPU is lost.",
        description="GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} fails every NVML read.",
        labels=(("cause", "nvml_read_failing"),),
    )
    return [
        lost,
        replace(
            lost,
            # GPUs on the PCI bus that NVML does not list as up (also: every GPU gone, NVML down).
            expr=f"""
  {c.m("trainmon_gpus_expected")}
>
  (
    instance:trainmon_gpu_up:sum
  or
    0 * {c.m("trainmon_gpus_expected")}
  )
unless on (instance, job)
  {c.m("trainmon_gpu_up")} == 0""",
            description=("{{ $labels.instance }} has {{ $value }} NVIDIA GPUs on the PCI bus but fewer answer NVML."),
            labels=(("cause", "missing_from_nvml"),),
        ),
        replace(
            lost,
            # A GPU that fell off the PCI bus entirely, or a node back from reboot with fewer GPUs.
            expr=f"""
  {c.m("trainmon_gpus_expected")}
<
  max_over_time({c.m("trainmon_gpus_expected")}[6h])""",
            description=(
                "{{ $labels.instance }} now sees {{ $value }} GPUs on the PCI bus, fewer than in the last 6 hours."
            ),
            labels=(("cause", "missing_from_pci_bus"),),
        ),
        Alert(
            alert="TrainmonGPUXidCritical",
            expr=(f"time() - {c.m('trainmon_gpu_xid_last_timestamp_seconds', xid_matcher)} < {c.xid_firing_seconds}"),
            severity="critical",
            summary="A GPU reported an XID that needs an operator.",
            description=(
                "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} reported XID "
                "{{ $labels.xid }} {{ $value | humanizeDuration }} ago."
            ),
        ),
        Alert(
            alert="TrainmonGPUEccUncorrectable",
            # A level check: a count already present at the first scrape must alert too.
            expr=c.m("trainmon_gpu_ecc_errors_total", 'error="uncorrected"') + " > 0",
            severity="critical",
            summary="A GPU has uncorrectable ECC errors.",
            description=(
                "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} counts {{ $value }} "
                "uncorrectable (volatile) ECC errors since the driver loaded."
            ),
        ),
        Alert(
            alert="TrainmonGPURowRemapFailure",
            expr=f"{c.m('trainmon_gpu_row_remap_failure')} == 1",
            severity="critical",
            summary="A GPU failed to remap a memory row.",
            description=(
                "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} could not remap a "
                "faulty memory row: it needs an RMA."
            ),
        ),
        Alert(
            alert="TrainmonGPURowRemapPending",
            expr=f"{c.m('trainmon_gpu_row_remap_pending')} == 1",
            for_="15m",
            severity="warning",
            summary="A GPU needs a reset to apply remapped memory rows.",
            description=(
                "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} has a row remap "
                "pending; drain the node and reset the GPU."
            ),
        ),
        Alert(
            alert="TrainmonGPUThermalThrottle",
            expr=(f"rate({c.m('trainmon_gpu_throttle_seconds_total', THERMAL)}[5m]) > {c.thermal_throttle_ratio}"),
            for_="10m",
            severity="warning",
            summary="A GPU is thermally throttled.",
            description=(
                "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} spent "
                "{{ $value | humanizePercentage }} of the last 5 minutes throttled ({{ $labels.reason }})."
            ),
        ),
        Alert(
            alert="TrainmonGPUPCIeLinkDegraded",
            # Width, not generation: idle GPUs lower their PCIe generation to save power.
            expr=f"""
  {c.m("trainmon_gpu_pcie_link_width", 'kind="current"')}
< ignoring (kind)
  {c.m("trainmon_gpu_pcie_link_width", 'kind="max"')}""",
            for_="30m",
            severity="warning",
            summary="A GPU's PCIe link runs narrower than it can.",
            description=(
                "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} runs its PCIe link at "
                "x{{ $value }}, below its maximum width."
            ),
        ),
    ]


def training_alerts(c: RulesConfig) -> list[Alert]:
    last_step = c.m("trainmon_train_last_step_timestamp_seconds")
    sm = "rank:trainmon_gpu_sm_utilization_ratio:join"
    baseline = f"avg_over_time(job_id:trainmon_train_steps:avg_rate5m[{c.baseline_window}] offset {c.baseline_offset})"
    return [
        Alert(
            alert="TrainmonGPUIdleDuringTraining",
            # SM activity (GPM); where it is absent, power. Never the coarse utilization, which reads
            # 100% while NCCL kernels spin in a hang.
            expr=f"""
(
    {sm} < {c.idle_sm_ratio}
  or
    (
      rank:trainmon_gpu_power_per_limit:join < {c.idle_power_ratio}
    unless on (instance, uuid)
      {sm}
    )
)
{not_in_phase(c)}""",
            for_="15m",
            severity="warning",
            summary="A training rank's GPU is idle.",
            description=(
                "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) of rank {{ $labels.rank }}, job {{ $labels.job_id }} "
                "on {{ $labels.instance }} has been idle for 15 minutes (activity {{ $value | humanizePercentage }})."
            ),
        ),
        Alert(
            alert="TrainmonCommunicationBound",
            expr=f"job_id:trainmon_train_comm_wait_per_step_time:ratio > {c.comm_bound_ratio}",
            for_="15m",
            severity="warning",
            summary="A training job spends too much of each step waiting for communication.",
            description=(
                "Job {{ $labels.job_id }} waits on communication for {{ $value | humanizePercentage }} of its "
                f"step time (threshold {c.comm_bound_ratio:.0%})."
            ),
        ),
        Alert(
            alert="TrainmonDataLoaderBound",
            expr=f"job_id:trainmon_train_dataloader_wait_per_step_time:ratio > {c.dataloader_bound_ratio}",
            for_="15m",
            severity="warning",
            summary="A training job waits for its input pipeline.",
            description=(
                "Job {{ $labels.job_id }} waits for the next batch for {{ $value | humanizePercentage }} of its "
                f"step time (threshold {c.dataloader_bound_ratio:.0%})."
            ),
        ),
        Alert(
            alert="TrainmonTrainingStalled",
            expr=f"""
  time() - {last_step} > {c.stall_seconds}
{not_in_phase(c)}""",
            for_="5m",
            severity="critical",
            summary="A training rank stopped finishing steps.",
            description=(
                "Rank {{ $labels.rank }} of job {{ $labels.job_id }} on {{ $labels.instance }} is alive but "
                "finished its last step {{ $value | humanizeDuration }} ago, outside any phase."
            ),
        ),
        Alert(
            alert="TrainmonRankLost",
            expr=rising(c.m("trainmon_train_rank_exits_total", 'reason="lost"'), "15m"),
            severity="warning",
            summary="Training ranks went silent without saying goodbye.",
            description=(
                "Ranks of job {{ $labels.job_id }} on {{ $labels.instance }} stopped reporting without a clean "
                "exit in the last 15 minutes (crash, OOM kill or hang of the whole process)."
            ),
        ),
        Alert(
            alert="TrainmonThroughputRegression",
            expr=f"""
  job_id:trainmon_train_steps:avg_rate5m
<
  {c.throughput_floor_ratio} * {baseline}
{not_in_phase(c, "on (job, job_id)")}""",
            for_="15m",
            severity="warning",
            summary="A training job is slower than its own recent past.",
            description=(
                'Job {{ $labels.job_id }} runs {{ printf "%.2f" $value }} steps/s, under '
                f"{c.throughput_floor_ratio:.0%} of its average over the previous {c.baseline_window}."
            ),
        ),
        Alert(
            alert="TrainmonStragglerRank",
            # Its compute is slow against the job's fastest rank, while the median rank waits in collectives.
            expr=f"""
  rank:trainmon_train_straggler_score:relative < {c.straggler_score_threshold}
and on (job, job_id)
  quantile without (instance, rank) (0.5, rank:trainmon_train_comm_wait_per_step_time:ratio)
  > {c.straggler_peer_wait_ratio}""",
            for_="10m",
            severity="warning",
            summary="One rank computes slower than the rest of its job.",
            description=(
                "Rank {{ $labels.rank }} of job {{ $labels.job_id }} on {{ $labels.instance }} has a straggler score "
                'of {{ printf "%.2f" $value }} (the fastest rank\'s compute time over its own) while the job\'s median '
                "rank waits in collectives."
            ),
        ),
    ]


def rank_counter_alerts(c: RulesConfig) -> list[Alert]:
    """Per-rank counters that rose in 10 minutes (out of memory, non-finite losses): a group of their own,
    since at 1,000 nodes each reads 8,000 ranks' raw series three times."""
    return [
        Alert(
            alert="TrainmonGPUMemoryPressure",
            expr=f"""
  {rising(c.m("trainmon_train_cuda_ooms_total"), "10m")}
or
  increase({c.m("trainmon_train_cuda_alloc_retries_total")}[10m]) > 0""",
            severity="warning",
            summary="A training rank is short of GPU memory.",
            description=(
                "Rank {{ $labels.rank }} of job {{ $labels.job_id }} on {{ $labels.instance }}: the CUDA caching "
                "allocator retried allocations or ran out of memory in the last 10 minutes."
            ),
        ),
        Alert(
            alert="TrainmonLossNonFinite",
            expr=rising(c.m("trainmon_train_nonfinite_loss_total"), "10m"),
            severity="warning",
            summary="A training rank reported a NaN or infinite loss.",
            description=(
                "Rank {{ $labels.rank }} of job {{ $labels.job_id }} on {{ $labels.instance }} reported a "
                "non-finite loss in the last 10 minutes."
            ),
        ),
    ]


def loss_scale_alerts(c: RulesConfig) -> list[Alert]:
    """Each rank's loss scale against its own hour: 8,000 ranks' hour of samples at 1,000 nodes, the
    costliest read of any alert, for a condition that develops over minutes (it must hold 5 of them)."""
    return [
        Alert(
            alert="TrainmonLossScaleCollapse",
            # The gauge exists only where a loss scaler does (bf16 runs have none).
            expr=f"""
  {c.m("trainmon_train_loss_scale")}
<=
  clamp_min(max_over_time({c.m("trainmon_train_loss_scale")}[1h]) / 1024, 1)
unless {ON_RANK}
  {c.m("trainmon_train_rank_info", 'loss_scaler="none"')}""",
            for_="5m",
            severity="warning",
            summary="A rank's mixed-precision loss scale collapsed.",
            description=(
                "Rank {{ $labels.rank }} of job {{ $labels.job_id }} runs at loss scale {{ $value }}: gradients "
                "keep overflowing and steps are being skipped."
            ),
        ),
    ]


def collective_alerts(c: RulesConfig) -> list[Alert]:
    """`TrainmonCollectiveHang`: a group whose oldest collective is in flight past the threshold.

    `cause` says what trainmon can tell: a member has issued fewer collectives (the alert names it,
    ranks in a phase excepted); a member reports nothing on the group any more (dead rank or node);
    every member waits and none lags (the network or NCCL); or the waiting is on groups folded into
    `other`, whose members cannot be compared.
    """
    limit = c.collective_hang_seconds
    hung = f"job_id_group:trainmon_nccl_inflight_oldest_seconds:max > {limit}"
    waiting = c.m("trainmon_nccl_inflight_oldest_seconds", NOT_OTHER)
    phase = c.m("trainmon_train_phase")
    missing = "job_id_group:trainmon_nccl_group_size:max - job_id_group:trainmon_nccl_members:count > 0"
    summary = "A collective has been in flight for too long: the job is hung."
    return [
        Alert(
            alert="TrainmonCollectiveHang",
            expr=f"""
(
    rank_group:trainmon_nccl_issued:lag > 0
  {not_in_phase(c)}
  and on (job, job_id, group)
    {hung}
)
* on (instance, job, job_id, rank) group_left (uuid)
  rank:trainmon_train_rank_info:max""",
            severity="critical",
            labels=(("cause", "lagging_rank"),),
            summary=summary,
            description=(
                "Rank {{ $labels.rank }} of job {{ $labels.job_id }} on {{ $labels.instance }} (GPU "
                "{{ $labels.uuid }}) has issued {{ $value }} fewer collectives on group {{ $labels.group }} "
                f"than its peers, who have waited in one for over {limit}s: it holds the "
                "job. Dump its stack (py-spy dump) and the NCCL flight recorder."
            ),
        ),
        Alert(
            alert="TrainmonCollectiveHang",
            expr=f"""
  {missing}
and on (job, job_id, group)
  {hung}
unless on (job, job_id)
  {phase} == 1""",
            severity="critical",
            labels=(("cause", "member_missing"),),
            summary=summary,
            description=(
                "{{ $value }} member(s) of group {{ $labels.group }} of job {{ $labels.job_id }} report nothing "
                f"on it while the others have waited in a collective for over {limit}s: a rank is gone "
                "(crashed or killed, or its node or trainmon daemon is down). Check TrainmonRankLost and "
                "TrainmonExporterDown for the job's nodes; the NCCL flight recorder names the missing rank."
            ),
        ),
        Alert(
            alert="TrainmonCollectiveHang",
            expr=f"""
  count without (instance, rank, op) ({waiting} > {limit})
== on (job, job_id, group)
  job_id_group:trainmon_nccl_members:count
and on (job, job_id, group)
  job_id_group:trainmon_nccl_issued:spread == 0
unless on (job, job_id, group)
  {missing}
unless on (job, job_id)
  {phase} == 1""",
            severity="critical",
            labels=(("cause", "network_or_nccl"),),
            summary=summary,
            description=(
                "All {{ $value }} ranks of group {{ $labels.group }} of job {{ $labels.job_id }} have waited "
                f"in the same collective for over {limit}s and none lags: suspect the "
                "network or NCCL (check the fabric alerts and the NCCL flight recorder)."
            ),
        ),
        Alert(
            alert="TrainmonCollectiveHang",
            expr=f"""
  count without (instance, rank, op) ({c.m("trainmon_nccl_inflight_oldest_seconds", 'group="other"')} > {limit})
unless on (job, job_id)
  {hung}
unless on (job, job_id)
  {phase} == 1""",
            severity="critical",
            labels=(("cause", "untracked_group"),),
            summary=summary,
            description=(
                "{{ $value }} rank(s) of job {{ $labels.job_id }} have waited over "
                f"{limit}s in a collective on process groups folded into `other` (each rank "
                "tracks its first 8 groups by name), so trainmon cannot compare their members: dump the NCCL "
                "flight recorder and py-spy of the waiting ranks to find the one that never joined."
            ),
        ),
    ]


def fabric_alerts(c: RulesConfig) -> list[Alert]:
    state = c.m("trainmon_infiniband_state_id")
    return [
        Alert(
            alert="TrainmonInfinibandLinkDown",
            # Only ports that were ACTIVE (4) in the last day: never-cabled ports stay quiet.
            expr=f"""
  {state} != 4
and on (instance, job, device, port)
  max_over_time({state}[1d]) == 4""",
            for_="2m",
            severity="critical",
            summary="An InfiniBand port that was active is down.",
            description=(
                "Port {{ $labels.port }} of {{ $labels.device }} on {{ $labels.instance }} left the ACTIVE "
                "state (state {{ $value }}); NCCL traffic on this rail fails or falls back."
            ),
        ),
        Alert(
            alert="TrainmonInfinibandErrors",
            expr=f"""
  increase({c.m("trainmon_infiniband_link_downed_total")}[10m]) > 0
or
  increase({c.m("trainmon_infiniband_symbol_error_total")}[10m]) > {c.infiniband_errors}
or
  increase({c.m("trainmon_infiniband_port_errors_received_total")}[10m]) > {c.infiniband_errors}""",
            severity="warning",
            summary="An InfiniBand port is flapping or counting errors.",
            description=(
                "Port {{ $labels.port }} of {{ $labels.device }} on {{ $labels.instance }} went down or counted "
                "{{ $value | humanize }} errors in 10 minutes: check the cable and transceiver."
            ),
        ),
        Alert(
            alert="TrainmonNVMeLatencyHigh",
            expr=f"""
  instance_device:trainmon_nvme_request_seconds:mean5m > {c.nvme_latency_seconds}
and
  instance_device:trainmon_nvme_requests:rate5m > 1""",
            for_="15m",
            severity="warning",
            summary="An NVMe namespace answers slowly.",
            description=(
                "{{ $labels.device }} on {{ $labels.instance }} takes {{ $value | humanizeDuration }} per request "
                "on average over 5 minutes."
            ),
        ),
    ]


def alert_groups(c: RulesConfig) -> list[Group]:
    groups = {
        "trainmon.exporter": (exporter_alerts(c), "30s"),
        "trainmon.gpu": (gpu_alerts(c), "30s"),
        "trainmon.training": (training_alerts(c), "30s"),
        "trainmon.rank_counters": (rank_counter_alerts(c), "30s"),
        "trainmon.loss_scale": (loss_scale_alerts(c), "1m"),
        "trainmon.numerics": (numerics_alerts(c), "30s"),
        "trainmon.collectives": (collective_alerts(c), "30s"),
        "trainmon.fabric": (fabric_alerts(c), "30s"),
    }
    return [
        Group(name=name, interval=interval, rules=[replace(a, runbook_url=c.runbook_url(a.alert)) for a in alerts])
        for name, (alerts, interval) in groups.items()
    ]
