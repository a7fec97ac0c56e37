"""Alerting rules: every alert of SPEC §6 plus the ones a GPU-cluster on-call expects.

`critical` pages, `warning` files a ticket. Counters that may first appear already non-zero use
`rising()`, so a series' first increase is not missed.
"""

from __future__ import annotations

from dataclasses import replace

from bundle import links
from trainmon.catalog import Family, aer, daemon, gpu, infiniband, nvme, pod_resources, training

from . import hang
from .config import RulesConfig
from .dashboards import panel_url
from .model import Alert, Group
from .names import NOT_OTHER, RANK_INFO
from .nccl import nccl_alerts
from .numerics import (
    STRAGGLER_CAUSE_SENTENCE,
    loss_scale_event,
    nonfinite_event,
    numerics_alerts,
    rank_event_alerts,
    rising,
)

ON_RANK = "on (instance, job, job_id, rank)"
ON_JOB = "on (job, job_id)"
COMM_WAIT_MEDIAN = "quantile without (instance, rank) (0.5, rank:trainmon_train_comm_wait_per_step_time:ratio)"
DATA_WAIT_NODE = "instance_job_id:trainmon_train_dataloader_wait_per_step_time:ratio"
# NVML throttle reasons spelled `thermal`, `hw_thermal_slowdown`, `sw_thermal_slowdown`, ...
THERMAL = 'reason=~".*thermal.*"'


def not_in_phase(c: RulesConfig, on: str = ON_RANK) -> str:
    return f"unless {on} {c.m(training.TRAIN_PHASE)} == 1"


def exporter_alerts(c: RulesConfig) -> list[Alert]:
    success = c.m(daemon.COLLECTOR_SUCCESS)
    return [
        Alert(
            alert="TrainmonExporterDown",
            dashboard_url=panel_url(c, links.SCRAPE_HEALTH),
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
            dashboard_url=panel_url(c, links.NODES),
            expr=f"absent({c.m('up')})",
            for_="15m",
            severity="warning",
            summary="Prometheus has no trainmon target at all.",
            description=(
                f"No target matches {c.selector} for 15 minutes: service discovery "
                "or the scrape configuration lost every trainmon daemon."
            ),
        ),
        Alert(
            alert="TrainmonCollectorFailing",
            dashboard_url=panel_url(c, links.FAILING_COLLECTORS),
            # A collector that never worked on this node (no InfiniBand: NoData) is not failing; the GPU
            # collector is, even if it never worked: a GPU node whose NVML never loads reports no GPU at all.
            expr=f"""
  {success} == 0
and on (instance, job, collector)
  (
    max_over_time({success}[1d]) == 1
  or
    {c.m(daemon.COLLECTOR_SUCCESS, 'collector="gpu"')}
  )""",
            for_="15m",
            severity="warning",
            summary="A trainmon collector is failing.",
            description=(
                "Collector {{ $labels.collector }} on {{ $labels.instance }} has failed for 15 minutes; its metrics "
                "are missing. /api/v1/status says why."
            ),
        ),
        Alert(
            alert="TrainmonKubeletSocketMissing",
            dashboard_url=panel_url(c, links.KUBERNETES_OWNERS),
            # Hooked ranks in pods name their pod; such a node's daemon has no pod_resources collector.
            expr=f"""
  group by (job, instance) ({c.m(training.TRAIN_RANK_INFO, 'pod!=""')})
unless on (job, instance)
  {c.m(daemon.COLLECTOR_SUCCESS, 'collector="pod_resources"')}""",
            for_="1h",
            # Worth a ticket, not a page: training runs; only the GPUs' owners are unknown.
            severity="info",
            summary="A Kubernetes node runs trainmon without the kubelet socket.",
            description=(
                "Pods on {{ $labels.instance }} train on GPUs, but its trainmon daemon has no "
                f"--kubelet-pod-resources-socket: {pod_resources.GPU_ALLOCATION_INFO} is missing, so GPUs without "
                "a hook have no owner. Deploy the pod-resources overlay."
            ),
        ),
    ]


def gpu_alerts(c: RulesConfig) -> list[Alert]:
    xid_matcher = f'xid=~"{c.critical_xid_pattern()}"'
    lost = Alert(
        alert="TrainmonGPULost",
        dashboard_url=panel_url(c, links.GPUS_LOST),
        expr=f"{c.m(gpu.GPU_UP)} == 0",
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
  {c.m(gpu.GPUS_EXPECTED)}
>
  (
    instance:trainmon_gpu_up:sum
  or
    0 * {c.m(gpu.GPUS_EXPECTED)}
  )
unless on (instance, job)
  {c.m(gpu.GPU_UP)} == 0""",
            description=("{{ $labels.instance }} has {{ $value }} NVIDIA GPUs on the PCI bus but fewer answer NVML."),
            labels=(("cause", "missing_from_nvml"),),
        ),
        replace(
            lost,
            # A GPU that fell off the PCI bus entirely, or a node back from reboot with fewer GPUs.
            expr=f"""
  {c.m(gpu.GPUS_EXPECTED)}
<
  max_over_time({c.m(gpu.GPUS_EXPECTED)}[6h])""",
            description=(
                "{{ $labels.instance }} now sees {{ $value }} GPUs on the PCI bus, fewer than in the last 6 hours."
            ),
            labels=(("cause", "missing_from_pci_bus"),),
        ),
        Alert(
            alert="TrainmonGPUXidCritical",
            dashboard_url=panel_url(c, links.XID_ERRORS),
            expr=(f"time() - {c.m(gpu.GPU_XID_LAST_TIMESTAMP_SECONDS, xid_matcher)} < {c.xid_firing_seconds}"),
            severity="critical",
            summary="A GPU reported an XID that needs an operator.",
            description=(
                "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} reported XID "
                "{{ $labels.xid }} {{ $value | humanizeDuration }} ago."
            ),
        ),
        Alert(
            alert="TrainmonGPUEccUncorrectable",
            dashboard_url=panel_url(c, links.ECC_ERRORS_AND_REMAPPED_ROWS),
            # A level check: a count already present at the first scrape must alert too.
            expr=c.m(gpu.GPU_ECC_ERRORS_TOTAL, 'error="uncorrected"') + " > 0",
            severity="critical",
            summary="A GPU has uncorrectable ECC errors.",
            description=(
                "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} counts {{ $value }} "
                "uncorrectable (volatile) ECC errors since the driver loaded."
            ),
        ),
        Alert(
            alert="TrainmonGPURowRemapFailure",
            dashboard_url=panel_url(c, links.ECC_ERRORS_AND_REMAPPED_ROWS),
            expr=f"{c.m(gpu.GPU_ROW_REMAP_FAILURE)} == 1",
            severity="critical",
            summary="A GPU failed to remap a memory row.",
            description=(
                "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} could not remap a "
                "faulty memory row: it needs an RMA."
            ),
        ),
        Alert(
            alert="TrainmonGPURowRemapPending",
            dashboard_url=panel_url(c, links.ECC_ERRORS_AND_REMAPPED_ROWS),
            expr=f"{c.m(gpu.GPU_ROW_REMAP_PENDING)} == 1",
            for_="15m",
            # Worth a ticket, not a page: the GPU works on; the remap applies at the next reset.
            severity="info",
            summary="A GPU needs a reset to apply remapped memory rows.",
            description=(
                "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} has a row remap "
                "pending; drain the node and reset the GPU at the next maintenance window."
            ),
        ),
        Alert(
            alert="TrainmonGPUThermalThrottle",
            dashboard_url=panel_url(c, links.TIME_THROTTLED),
            expr=(f"rate({c.m(gpu.GPU_THROTTLE_SECONDS_TOTAL, THERMAL)}[5m]) > {c.thermal_throttle_ratio}"),
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
            dashboard_url=panel_url(c, links.PCIE_LINK_WIDTH),
            # Width, not generation: idle GPUs lower their PCIe generation to save power.
            expr=f"""
  {c.m(gpu.GPU_PCIE_LINK_WIDTH, 'kind="current"')}
< ignoring (kind)
  {c.m(gpu.GPU_PCIE_LINK_WIDTH, 'kind="max"')}""",
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
    last_step = c.m(training.TRAIN_LAST_STEP_TIMESTAMP_SECONDS)
    sm = "rank:trainmon_gpu_sm_utilization_ratio:join"
    baseline = f"avg_over_time(job_id:trainmon_train_steps:avg_rate5m[{c.baseline_window}] offset {c.baseline_offset})"
    return [
        Alert(
            alert="TrainmonGPUIdleDuringTraining",
            dashboard_url=panel_url(c, links.SM_ACTIVITY_BY_RANK),
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
            dashboard_url=panel_url(c, links.COMMUNICATION_WAIT_SHARE_PER_RANK),
            # Not while one node of the job waits for data and the job as a whole does not: the others' wait is
            # for that node's ranks (TrainmonDataLoaderBound names it), not for the network.
            expr=f"""
  job_id:trainmon_train_comm_wait_outside_phases_per_step_time:ratio > {c.comm_bound_ratio}
unless {ON_JOB}
  ({node_data_bound(c)})""",
            for_="15m",
            severity="warning",
            summary="A training job spends too much of each step waiting for communication.",
            description=(
                "Job {{ $labels.job_id }} waits on communication for {{ $value | humanizePercentage }} of its "
                f"step time (threshold {c.comm_bound_ratio:.0%}), outside checkpoints and other phases."
            ),
        ),
        *dataloader_alerts(c),
        Alert(
            alert="TrainmonTrainingStalled",
            dashboard_url=panel_url(c, links.STEP_TIME_PER_RANK),
            expr=f"""
  time() - {last_step} > {c.stall_seconds}
{not_in_phase(c)}
unless {ON_RANK} {c.m(training.TRAIN_RANK_EXITED)} == 1""",
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
            dashboard_url=panel_url(c, links.ABSENT_RANKS),
            expr=rising(c.m(training.TRAIN_RANK_EXITS_TOTAL, 'reason="lost"'), "15m"),
            severity="warning",
            summary="Training ranks went silent without saying goodbye.",
            description=(
                "Ranks of job {{ $labels.job_id }} on {{ $labels.instance }} stopped reporting without a clean "
                "exit in the last 15 minutes (crash, OOM kill or hang of the whole process)."
            ),
        ),
        Alert(
            alert="TrainmonThroughputRegression",
            dashboard_url=panel_url(c, links.SAMPLES_PER_SECOND),
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
            dashboard_url=panel_url(c, links.STRAGGLER_SCORE_BY_RANK),
            # Its compute per step is slow against the job's fastest rank, while the median rank waits in
            # collectives and it waits less than that: a rank that waits in communication is never the straggler.
            expr=f"""
  rank:trainmon_train_straggler_score:relative < {c.straggler_score_threshold}
and {ON_RANK}
  rank:trainmon_train_comm_wait_per_step_time:ratio
  < {ON_JOB} group_left
  {COMM_WAIT_MEDIAN}
and {ON_JOB}
  {COMM_WAIT_MEDIAN} > {c.straggler_peer_wait_ratio}
{not_in_phase(c)}""",
            for_="10m",
            severity="warning",
            summary="One rank computes slower than the rest of its job.",
            description=(
                "Rank {{ $labels.rank }} of job {{ $labels.job_id }} on {{ $labels.instance }} has a straggler score "
                'of {{ printf "%.2f" $value }} (the fastest rank\'s compute time over its own) while the job\'s median '
                f"rank waits in collectives.{STRAGGLER_CAUSE_SENTENCE}"
            ),
        ),
    ]


def node_data_bound(c: RulesConfig) -> str:
    """The nodes of a job whose ranks wait for data over the threshold while the job as a whole does not."""
    return f"""
  {DATA_WAIT_NODE} > {c.dataloader_bound_ratio}
unless {ON_JOB}
  job_id:trainmon_train_dataloader_wait_per_step_time:ratio > {c.dataloader_bound_ratio}"""


def dataloader_alerts(c: RulesConfig) -> list[Alert]:
    """The job waits for data; or only the ranks of one node do (its local NVMe, its loader workers), and the
    rest of the job waits for them in collectives: then the node is named, not the job."""
    bound = Alert(
        alert="TrainmonDataLoaderBound",
        dashboard_url=panel_url(c, links.DATA_LOADER_WAIT_SHARE_PER_RANK),
        expr=f"job_id:trainmon_train_dataloader_wait_per_step_time:ratio > {c.dataloader_bound_ratio}",
        for_="15m",
        severity="warning",
        labels=(("scope", "job"),),
        summary="A training job waits for its input pipeline.",
        description=(
            "Job {{ $labels.job_id }} waits for the next batch for {{ $value | humanizePercentage }} of its "
            f"step time (threshold {c.dataloader_bound_ratio:.0%})."
        ),
    )
    return [bound, replace(
        bound,
        expr=node_data_bound(c),
        labels=(("scope", "node"),),
        summary="One node's ranks wait for their input and hold their job back.",
        description=(
            "The ranks of job {{ $labels.job_id }} on {{ $labels.instance }} wait for the next batch for "
            "{{ $value | humanizePercentage }} of their step time while the job's other nodes do not: the rest "
            "of the job waits for them in collectives. Look at this node's data path (TrainmonNVMeLatencyHigh, "
            "TrainmonStorageSlow, loader workers, CPU) and run `trainmon diagnose`."
        ),
    )]


def rank_counter_alerts(c: RulesConfig) -> list[Alert]:
    """Per-rank counters that rose in 10 minutes (out of memory, non-finite losses): a group of their own,
    since at 1,000 nodes each reads 8,000 ranks' raw series three times."""
    return [
        Alert(
            alert="TrainmonGPUMemoryPressure",
            dashboard_url=panel_url(c, links.ALLOCATOR_RETRIES_AND_OOMS),
            expr=f"""
  {rising(c.m(training.TRAIN_CUDA_OOMS_TOTAL), "10m")}
or
  increase({c.m(training.TRAIN_CUDA_ALLOC_RETRIES_TOTAL)}[10m]) > 0""",
            severity="warning",
            summary="A training rank is short of GPU memory.",
            description=(
                "Rank {{ $labels.rank }} of job {{ $labels.job_id }} on {{ $labels.instance }}: the CUDA caching "
                "allocator retried allocations or ran out of memory in the last 10 minutes."
            ),
        ),
        *rank_event_alerts(c, nonfinite_event(c)),
    ]


def loss_scale_alerts(c: RulesConfig) -> list[Alert]:
    """Each rank's loss scale against its own hour, recorded every minute (trainmon.loss_scale.rules)."""
    return rank_event_alerts(c, loss_scale_event(c))


def collective_alerts(c: RulesConfig) -> list[Alert]:
    """`TrainmonCollectiveHang`: a group whose oldest collective is in flight past the threshold.

    `cause` says what trainmon can tell: a member has issued fewer collectives (the alert names it,
    ranks in a phase excepted); a member reports nothing on the group any more (dead rank or node);
    every member waits and none lags (the network or NCCL); or the waiting is on groups folded into
    `other`, whose members cannot be compared.
    """
    limit = c.collective_hang_seconds
    hung = past_hang_threshold("job_id_group:trainmon_nccl_inflight_oldest_seconds:max", limit, "")
    oldest = training.NCCL_INFLIGHT_OLDEST_SECONDS
    waiting = past_hang_threshold(c.m(oldest, NOT_OTHER), limit, " on (job, job_id, group) group_left ()")
    untracked = past_hang_threshold(c.m(oldest, 'group="other"'), limit, " on (job, job_id, group) group_left ()")
    threshold = f"{limit}s, or half the group's timeout when that is shorter"
    phase = c.m(training.TRAIN_PHASE)
    missing = "job_id_group:trainmon_nccl_group_size:max - job_id_group:trainmon_nccl_members:count > 0"
    summary = "A collective has been in flight for too long: the job is hung."
    return [
        Alert(
            alert="TrainmonCollectiveHang",
            dashboard_url=panel_url(c, links.COLLECTIVES_BEHIND_THE_GROUP),
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
                f"than its peers, who have waited in one past the hang threshold ({threshold}): it holds the "
                "job. Dump its stack (py-spy dump) and the NCCL flight recorder."
            ),
        ),
        Alert(
            alert="TrainmonCollectiveHang",
            dashboard_url=panel_url(c, links.COLLECTIVES_BEHIND_THE_GROUP),
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
                f"on it while the others have waited in a collective past the hang threshold ({threshold}): a "
                "rank is gone (crashed or killed, or its node or trainmon daemon is down). Check TrainmonRankLost and "
                "TrainmonExporterDown for the job's nodes; the NCCL flight recorder names the missing rank."
            ),
        ),
        Alert(
            alert="TrainmonCollectiveHang",
            dashboard_url=panel_url(c, links.COLLECTIVES_BEHIND_THE_GROUP),
            expr=f"""
  count without (instance, rank, op) {waiting}
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
                f"in the same collective past the hang threshold ({threshold}) and none lags: suspect the "
                "network or NCCL (check the fabric alerts and the NCCL flight recorder)."
            ),
        ),
        Alert(
            alert="TrainmonCollectiveHang",
            dashboard_url=panel_url(c, links.COLLECTIVES_BEHIND_THE_GROUP),
            expr=f"""
  count without (instance, rank, op) {untracked}
unless on (job, job_id)
  {hung}
unless on (job, job_id)
  {phase} == 1""",
            severity="critical",
            labels=(("cause", "untracked_group"),),
            summary=summary,
            description=(
                "{{ $value }} rank(s) of job {{ $labels.job_id }} have waited past the hang threshold "
                f"({threshold}) in a collective on process groups folded into `other` (each rank "
                "tracks its first 8 groups by name), so trainmon cannot compare their members: dump the NCCL "
                "flight recorder and py-spy of the waiting ranks to find the one that never joined."
            ),
        ),
    ]


def past_hang_threshold(ages: str, limit: int, matching: str) -> str:
    """`ages` that are past the hang threshold: `limit`, or half the group's timeout where that is shorter (NCCL's
    watchdog ends the job at its timeout, without a goodbye). `matching` joins per-rank ages to their group's."""
    return f"""(
    {ages} > {limit}
  or
    {ages} >{matching} (job_id_group:trainmon_train_pg_timeout_seconds:min / 2)
)"""


def fabric_alerts(c: RulesConfig) -> list[Alert]:
    state = c.m(infiniband.INFINIBAND_STATE_ID)
    return [
        Alert(
            alert="TrainmonInfinibandLinkDown",
            dashboard_url=panel_url(c, links.INFINIBAND_LINK_STATE),
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
            dashboard_url=panel_url(c, links.INFINIBAND_ERRORS),
            expr=f"""
  increase({c.m(infiniband.INFINIBAND_LINK_DOWNED_TOTAL)}[10m]) > 0
or
  increase({c.m(infiniband.INFINIBAND_SYMBOL_ERROR_TOTAL)}[10m]) > {c.infiniband_errors}
or
  increase({c.m(infiniband.INFINIBAND_PORT_ERRORS_RECEIVED_TOTAL)}[10m]) > {c.infiniband_errors}""",
            severity="warning",
            summary="An InfiniBand port is flapping or counting errors.",
            description=(
                "Port {{ $labels.port }} of {{ $labels.device }} on {{ $labels.instance }} went down or counted "
                "{{ $value | humanize }} errors in 10 minutes: check the cable and transceiver."
            ),
        ),
        nvme_alert(c),
        infiniband_degraded_alert(c),
    ]


def nvme_alert(c: RulesConfig) -> Alert:
    """A drive against its own day and against the fastest drive of its model on the node, above a floor that
    fits NVMe (0.1-0.2 ms is normal: 12 ms is 100 times slower and fails a fixed 50 ms threshold), or over the
    absolute figure whatever its past and siblings. One alert per drive whichever holds."""
    latency = "instance_device:trainmon_nvme_request_seconds:mean5m"
    factor = f"{c.nvme_slow_factor:g}"
    return Alert(
        alert="TrainmonNVMeLatencyHigh",
        dashboard_url=panel_url(c, links.NVME_LATENCY),
        expr=f"""
(
    {latency} > {c.nvme_latency_floor_seconds:g}
  and
    (
        {latency} > {factor} * instance_device:trainmon_nvme_request_seconds:median1d
      or
        max without (model) (
            {latency}
          * on (job, instance, device) group_left (model)
            {c.m(nvme.NVME_INFO)}
          > on (job, instance, model) group_left
            {factor} * instance_model:trainmon_nvme_request_seconds:min
        )
    )
  or
    {latency} > {c.nvme_latency_seconds:g}
)
and
  instance_device:trainmon_nvme_requests:rate5m > 1""",
        for_="10m",
        severity="warning",
        summary="An NVMe namespace answers slowly.",
        description=(
            "{{ $labels.device }} on {{ $labels.instance }} takes {{ $value | humanizeDuration }} per request "
            f"on average over 5 minutes: over {factor}x its median of the last day or the fastest drive of its "
            f"model on the node (and over {c.nvme_latency_floor_seconds:g} s), or over {c.nvme_latency_seconds:g} s. "
            "Ranks on this node that read from it wait for their data (see TrainmonDataLoaderBound)."
        ),
    )


def infiniband_degraded_alert(c: RulesConfig) -> Alert:
    """A port that trained below its rate or width after a flap: slower than its own best of the last day, or
    than the node's fastest port of the same role (link layer and board). The rate (lanes x lane speed) shows
    both a lower speed and fewer lanes."""
    rate = "instance_port:trainmon_infiniband_rate_bytes_per_second:role"
    return Alert(
        alert="TrainmonInfinibandLinkDegraded",
        dashboard_url=panel_url(c, links.INFINIBAND_LINK_STATE),
        expr=f"""
  {rate} < on (job, instance, device, port) group_left
  instance_port:trainmon_infiniband_rate_bytes_per_second:max1d
or
  {rate} < on (job, instance, link_layer, board_id) group_left
  max by (job, instance, link_layer, board_id) ({rate})""",
        for_="10m",
        severity="warning",
        summary="An InfiniBand port runs below its rate.",
        description=(
            "Port {{ $labels.port }} of {{ $labels.device }} on {{ $labels.instance }} is active at "
            "{{ $value | humanize }}B/s, below its own rate of the last day or the node's other "
            "{{ $labels.link_layer }} ports of its board ({{ $labels.board_id }}): it trained at a lower speed or "
            "on fewer lanes. Every collective through it runs slower; reseat or replace the cable or transceiver."
        ),
    )


def storage_alerts(c: RulesConfig) -> list[Alert]:
    """Storage tier 3 named beside the job that waits on it. A mount is judged against its own best 5 minutes
    of the last hour, a checkpoint against its job's usual one: no absolute latency fits Lustre, GPFS and
    NFS alike."""
    data_wait = f"instance_job_id:trainmon_train_dataloader_wait_per_step_time:ratio > {c.storage_dataloader_ratio}"
    factor = c.storage_slow_factor
    mount = "instance_mount:trainmon_fs"
    signals = {
        "rpc_latency": (
            f"  {mount}_rpc_seconds:mean5m > {factor:g} * {mount}_rpc_seconds:mean5m_min1h\nand\n"
            f"  {mount}_rpcs:rate5m > 1",
            "answers in {{ $value | humanizeDuration }} per RPC",
        ),
        "rpc_timeouts": (
            f"  {mount}_rpc_timeouts:rate5m > {factor:g} * {mount}_rpc_timeouts:rate5m_min1h",
            "times out {{ $value | humanize }} RPCs per second",
        ),
    }
    alerts = [
        Alert(
            alert="TrainmonStorageSlow",
            expr=f"(\n{condition}\n)\nand on (job, instance)\n  {data_wait}",
            # Longer than the 5-minute window a healthy one-minute checkpoint burst stays in.
            for_="10m",
            severity="warning",
            labels=(("signal", signal),),
            summary="A network or parallel file system slows the training jobs on a node.",
            dashboard_url=panel_url(c, links.FILE_SYSTEM_RPC_LATENCY),
            description=(
                f"{{{{ $labels.mount }}}} on {{{{ $labels.instance }}}} {what}, over {factor:g}x its best 5 "
                f"minutes of the last hour, while a training job on this node waits for data over "
                f"{c.storage_dataloader_ratio:.0%} of its step time."
            ),
        )
        for signal, (condition, what) in signals.items()
    ]
    return [
        *alerts,
        Alert(
            alert="TrainmonCheckpointWriteSlow",
            # Against the job's earlier completed checkpoints (those done over 10 minutes ago: not this one),
            # and only once there are enough of them to have a usual length.
            expr=f"""
  job_id:trainmon_train_checkpoint_seconds:increase10m
> {ON_JOB}
  {c.checkpoint_slow_factor:g} * (job_id:trainmon_train_checkpoint_seconds:median1d offset 10m)
and {ON_JOB}
  (job_id:trainmon_train_checkpoints_completed:count1d offset 10m) >= {c.checkpoint_baseline_count}""",
            severity="warning",
            summary="A training job's checkpoint takes much longer than its usual one.",
            dashboard_url=panel_url(c, links.CHECKPOINT_WRITES),
            description=(
                "Job {{ $labels.job_id }} spent {{ $value | humanizeDuration }} checkpointing in 10 minutes, over "
                f"{c.checkpoint_slow_factor:g}x the median of its earlier completed checkpoints; its nodes write "
                '{{ with printf "job_id:trainmon_fs_written_bytes:rate5m{job_id=\'%s\'}" $labels.job_id | query }}'
                "{{ . | first | value | humanize1024 }}B/s{{ else }}nothing measured{{ end }} "
                "to their network file systems."
            ),
        ),
    ]


def with_rank(c: RulesConfig, series: str) -> str:
    """`series` per GPU, with `job_id` and `rank` of the training rank on that GPU where there is one."""
    return f"""
  ({series})
* on (instance, uuid) group_left (job_id, rank)
  {RANK_INFO}
or
  (
    {series}
  unless on (instance, uuid)
    {RANK_INFO}
  )"""


RANK = "{{ with $labels.job_id }} Job {{ . }} rank {{ $labels.rank }} runs on it.{{ end }}"


def on_this_gpu(c: RulesConfig, metric: Family, text: str) -> str:
    """Template: `text` for each series of `metric` on the alert's GPU, queried when the alert is sent."""
    query = c.m(metric, 'instance="%s"', 'uuid="%s"')
    return f"{{{{ range printf `{query}` $labels.instance $labels.uuid | query }}}}{text}{{{{ end }}}}"


def gpu_context(c: RulesConfig) -> str:
    """The verdict's reasons, and the rank and the pod on the GPU."""
    return (on_this_gpu(c, gpu.GPU_HEALTH_REASON_INFO, " {{ .Labels.reason }}.") + RANK
            + on_this_gpu(c, pod_resources.GPU_ALLOCATION_INFO, " Pod {{ .Labels.namespace }}/{{ .Labels.pod }}."))


def health_alerts(c: RulesConfig) -> list[Alert]:
    """The verdict per GPU (trainmon_gpu_health_action): one alert per action worth an operator.

    restart_app is the job owner's business (XID 13, 31, …): no alert.
    """
    def needing(action: str) -> str:
        return c.m(gpu.GPU_HEALTH_ACTION, f'action="{action}"') + " == 1"

    return [
        Alert(
            alert="TrainmonGPUNeedsReset",
            expr=with_rank(c, needing("reset_gpu")),
            for_="1m",
            severity="warning",
            summary="A GPU needs a reset.",
            dashboard_url=panel_url(c, links.HEALTH_VERDICT_PER_GPU),
            description=(
                "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} needs a GPU reset."
                + gpu_context(c)
            ),
        ),
        Alert(
            alert="TrainmonNodeNeedsReboot",
            expr=f"count by (job, instance) ({needing('reboot')}) > 0",
            for_="1m",
            severity="warning",
            summary="A node needs a reboot.",
            dashboard_url=panel_url(c, links.HEALTH_VERDICT_PER_GPU),
            description="{{ $value }} GPU(s) on {{ $labels.instance }} need the node rebooted (see their "
                        f"{gpu.GPU_HEALTH_REASON_INFO}).",
        ),
        Alert(
            alert="TrainmonGPUNeedsService",
            expr=with_rank(c, needing("drain")),
            severity="critical",
            summary="A GPU needs service: drain its node.",
            dashboard_url=panel_url(c, links.HEALTH_VERDICT_PER_GPU),
            description=(
                "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} needs service."
                + gpu_context(c)
            ),
        ),
    ]


def interconnect_alerts(c: RulesConfig) -> list[Alert]:
    """Per-link NVLink errors and fatal PCIe errors; correctable PCIe errors alert nobody."""
    nvlink = c.m(gpu.GPU_NVLINK_ERRORS_TOTAL)
    return [
        Alert(
            alert="TrainmonNVLinkErrors",
            # The series appear at their first error (zeros are not served): a new one counts from zero.
            expr=f"""
  increase({nvlink}[10m]) > {c.nvlink_errors}
or
  ({nvlink} > {c.nvlink_errors} unless {nvlink} offset 10m)""",
            severity="warning",
            summary="An NVLink link counts errors.",
            dashboard_url=panel_url(c, links.NVLINK_ERRORS_PER_LINK),
            description=(
                "NVLink {{ $labels.link }} of GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} "
                "counted {{ $value | humanize }} {{ $labels.error }} errors in 10 minutes."
            ),
        ),
        Alert(
            alert="TrainmonPCIeFatal",
            expr=rising(c.m(aer.PCIE_AER_ERRORS_TOTAL, 'severity="fatal"'), "15m"),
            severity="critical",
            summary="A PCIe device reported a fatal error.",
            dashboard_url=panel_url(c, links.PCIE_AER_ERRORS),
            description=(
                "PCIe device {{ $labels.device }} (a GPU, HCA or NVMe controller) on {{ $labels.instance }} "
                "reported the fatal AER error {{ $labels.error }} in the last 15 minutes."
            ),
        ),
    ]


def alert_groups(c: RulesConfig) -> list[Group]:
    groups = {
        "trainmon.exporter": (exporter_alerts(c), "30s"),
        "trainmon.gpu": (gpu_alerts(c), "30s"),
        "trainmon.health": (health_alerts(c) + interconnect_alerts(c), "30s"),
        "trainmon.training": (training_alerts(c), "30s"),
        "trainmon.rank_counters": (rank_counter_alerts(c), "30s"),
        "trainmon.loss_scale": (loss_scale_alerts(c), "1m"),
        "trainmon.numerics": (numerics_alerts(c), "30s"),
        "trainmon.collectives": (collective_alerts(c), "30s"),
        "trainmon.hang": (hang.hang_alerts(c), hang.INTERVAL),
        "trainmon.nccl": (nccl_alerts(c), "1m"),
        "trainmon.fabric": (fabric_alerts(c), "30s"),
        "trainmon.storage": (storage_alerts(c), "1m"),
    }
    return [
        Group(name=name, interval=c.group_interval(name, interval),
              rules=[replace(a, runbook_url=c.runbook_url(a.alert), for_=c.for_duration(a.alert, a.for_))
                     for a in alerts])
        for name, (alerts, interval) in groups.items()
    ]
