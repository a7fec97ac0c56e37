"""Recording rules: `level:metric:operations` (prometheus docs, practices/rules.md).

Levels: `rank` keeps (instance, job, job_id, rank), `job_id` keeps (job, job_id), `instance_gpu` keeps one
GPU, `instance_device` one NVMe namespace. Ratios sum numerator and denominator first, then divide.
"""

from __future__ import annotations

from dataclasses import replace

from trainmon.catalog import Family, daemon, fs, gpu, hpc_jobs, infiniband, nvme, pod_resources, training

from .config import RulesConfig
from .efficiency import efficiency_groups
from .hang import hang_group
from .model import Group, Record
from .names import NOT_OTHER, RANK_INFO
from .nccl import nccl_group
from .numerics import loss_scale_group, numerics_group
from .xid_catalog import xid_catalog_group

# Labels of trainmon_train_rank_info that describe a rank rather than identify it.
RANK_ATTRIBUTES = "local_rank, world_size, backend, framework, loss_scaler, pid, pod, namespace"
# GPU series joined to the rank that uses the GPU (through trainmon_train_rank_info{uuid}).
JOINED_GPU_SERIES: tuple[Family | str, ...] = (
    gpu.GPU_SM_UTILIZATION_RATIO,
    gpu.GPU_UTILIZATION_RATIO,
    gpu.GPU_FB_USED_BYTES,
    gpu.GPU_POWER_WATTS,
    "instance_gpu:trainmon_gpu_power_per_limit:ratio",
)
# Per-rank seconds-per-second rules whose shares of step time are recorded.
STEP_SHARES = (
    "rank:trainmon_train_comm_wait_seconds:rate5m",
    "rank:trainmon_train_dataloader_wait_seconds:rate5m",
    "rank:trainmon_nccl_time_seconds:rate5m",
    "rank:trainmon_train_compute_seconds:rate5m",
)
UNCORRECTED = 'error="uncorrected"'
STEP_SECONDS = "rank:trainmon_train_step_duration_seconds_sum:rate5m"
JOB_STEP_SECONDS = "job_id:trainmon_train_step_duration_seconds_sum:rate5m"
NVME_REQUESTS = "instance_device:trainmon_nvme_requests:rate5m"
COMM_OUTSIDE_PHASES = "rank:trainmon_train_comm_wait_outside_phases_seconds:rate5m"
NVME_LATENCY = "instance_device:trainmon_nvme_request_seconds:mean5m"
METADATA_OPS = 'op!~"read|write"'
CHECKPOINT_PHASE = 'phase="checkpoint"'
JOB_NODES = "instance_job_id:trainmon_train_ranks:group"
CHECKPOINT_WINDOW = "job_id:trainmon_train_checkpoint_seconds:increase10m"
CHECKPOINT_DONE = "job_id:trainmon_train_checkpoint_seconds:completed10m"


def joined_name(series: Family | str) -> str:
    """`rank:<gpu series>:join` for a raw family or an `instance_gpu:` recorded series."""
    metric = series.name if isinstance(series, Family) else series.split(":")[1]
    return f"rank:{metric}:join"


def share_name(per_rank: str) -> str:
    """The metric a step-time share is named after: `rank:<metric>_seconds:rate5m` -> `<metric>`."""
    return per_rank.split(":")[1].removesuffix("_seconds")


def gpu_group(c: RulesConfig) -> Group:
    return Group(
        name="trainmon.gpu.rules",
        rules=[
            Record(
                record="instance_gpu:trainmon_gpu_power_per_limit:ratio",
                expr=f"{c.m(gpu.GPU_POWER_WATTS)} / {c.m(gpu.GPU_POWER_LIMIT_WATTS)}",
            ),
            Record(
                record="instance:trainmon_gpu_up:sum",
                expr=f"sum without (gpu, uuid) ({c.m(gpu.GPU_UP)})",
            ),
        ],
    )


def _rank_rates(c: RulesConfig, *counters: Family | str) -> list[Record]:
    """`rank:<counter without _total>:rate5m` of each raw counter (a histogram's `_sum` and `_count` are ones)."""
    return [Record(record=f"rank:{str(counter).removesuffix('_total')}:rate5m", expr=f"rate({c.m(counter)}[5m])")
            for counter in counters]


def step_rates_group(c: RulesConfig) -> Group:
    """Per-rank rates of the step counters, and each job's throughput. The raw per-rank reads are the
    costliest rules (8,000 ranks at 1,000 nodes, each over a 5m range), so they are split over two groups
    that evaluate side by side; `trainmon.training.rules` then combines their recorded series."""
    step_duration = training.TRAIN_STEP_DURATION_SECONDS
    rules = _rank_rates(c, training.TRAIN_STEPS_TOTAL, step_duration.sum, step_duration.count)
    # Throughput is only read per job: no per-rank series of it.
    rules += [
        Record(record=f"job_id:{counter.name.removesuffix('_total')}:rate5m",
               expr=f"sum without (instance, rank) (rate({c.m(counter)}[5m]))")
        for counter in (training.TRAIN_SAMPLES_TOTAL, training.TRAIN_TOKENS_TOTAL)
    ]
    return Group(name="trainmon.step_rates.rules", rules=rules)


def wait_rates_group(c: RulesConfig) -> Group:
    """Per-rank rates of the time a rank waits: exposed communication, data loading, collectives.

    Communication wait outside declared phases too, for the alerts that blame the network or a straggler: ranks
    that wait in a barrier while rank 0 writes a checkpoint inside `mon.phase("checkpoint")` are neither. The hook
    counts that wait as communication, so a rank's phase seconds are taken off it (an upper bound of the wait
    inside them); the slow-rank rules, which compare ranks within 3%, keep the whole wait."""
    rules = _rank_rates(c, training.TRAIN_COMM_WAIT_SECONDS_TOTAL, training.TRAIN_DATALOADER_WAIT_SECONDS_TOTAL)
    phases = f"sum without (phase) (rate({c.m(training.TRAIN_PHASE_SECONDS_TOTAL)}[5m]))"
    rules.append(Record(
        record=COMM_OUTSIDE_PHASES,
        expr=f"\n  clamp_min(rank:trainmon_train_comm_wait_seconds:rate5m - {phases}, 0)\nor\n"
             "  rank:trainmon_train_comm_wait_seconds:rate5m",
    ))
    rules.append(Record(
        record="rank:trainmon_nccl_time_seconds:rate5m",
        expr=f"sum without (op, group) (rate({c.m(training.NCCL_TIME_SECONDS_TOTAL)}[5m]))",
    ))
    return Group(name="trainmon.wait_rates.rules", rules=rules)


def training_group() -> Group:
    """Step-time shares per rank and per job, from the rate groups' output: it reads no raw series."""
    rules = [
        Record(
            record="rank:trainmon_train_step_duration_seconds:mean5m",
            expr=f"{STEP_SECONDS} / rank:trainmon_train_step_duration_seconds_count:rate5m",
        ),
        # Compute = step - exposed communication wait - data wait (SPEC §4), per second of wall time.
        Record(
            record="rank:trainmon_train_compute_seconds:rate5m",
            expr=f"""
clamp_min(
  {STEP_SECONDS}
  - rank:trainmon_train_comm_wait_seconds:rate5m
  - rank:trainmon_train_dataloader_wait_seconds:rate5m,
  0
)""",
        ),
    ]
    rules += [
        Record(record=f"rank:{share_name(per_rank)}_per_step_time:ratio", expr=f"{per_rank} / {STEP_SECONDS}")
        for per_rank in STEP_SHARES
    ]
    rules += [
        # Ranks of a synchronous job step together: the job's step rate is the ranks' average.
        Record(
            record="job_id:trainmon_train_steps:avg_rate5m",
            expr="avg without (instance, rank) (rank:trainmon_train_steps:rate5m)",
        ),
        # The job's step seconds per second, summed once for the mean and the four shares below.
        Record(record=JOB_STEP_SECONDS, expr=f"sum without (instance, rank) ({STEP_SECONDS})"),
        Record(
            record="job_id:trainmon_train_step_duration_seconds:mean5m",
            expr=f"""
  {JOB_STEP_SECONDS}
/
  sum without (instance, rank) (rank:trainmon_train_step_duration_seconds_count:rate5m)""",
        ),
    ]
    rules += [
        Record(
            record=f"job_id:{share_name(per_rank)}_per_step_time:ratio",
            expr=f"""
  sum without (instance, rank) ({per_rank})
/
  {JOB_STEP_SECONDS}""",
        )
        for per_rank in (*STEP_SHARES, COMM_OUTSIDE_PHASES)
    ]
    return Group(name="trainmon.training.rules", rules=rules)


def rank_gpu_group(c: RulesConfig) -> Group:
    """Each live rank and the series of its GPU. Apart from the training rates, which do not read them,
    so they evaluate side by side: a group's rules run one after another, groups concurrently."""
    rules = [
        # One series per live rank: instance, job, job_id, rank, uuid.
        Record(
            record=RANK_INFO,
            expr=f"max without ({RANK_ATTRIBUTES}) ({c.m(training.TRAIN_RANK_INFO)})",
        ),
        Record(record="job_id:trainmon_train_ranks:count", expr=f"count without (instance, rank, uuid) ({RANK_INFO})"),
    ]
    rules += [
        Record(
            record=joined_name(series),
            expr=f"""
  {c.m(series) if isinstance(series, Family) else series}
* on (instance, uuid) group_right (gpu)
  {RANK_INFO}""",
        )
        for series in JOINED_GPU_SERIES
    ]
    return Group(name="trainmon.rank_gpu.rules", rules=rules)


def histogram_group(c: RulesConfig) -> Group:
    """The step-time buckets per job, for quantiles: 13 buckets per rank make this the largest input of all
    the rules (a third of a 1,000-node fleet's training series), and a quantile over a 5-minute window
    sampled every 2 minutes loses nothing a step-time panel shows. At 1,000 nodes on 2 cores it took 6-7 s
    beside the other groups, 3 s alone."""
    return Group(
        name="trainmon.histograms.rules",
        interval="2m",
        rules=[
            Record(
                record="job_id_le:trainmon_train_step_duration_seconds_bucket:rate5m",
                expr=f"sum by (job, job_id, le) (rate({c.m(training.TRAIN_STEP_DURATION_SECONDS.bucket)}[5m]))",
            ),
        ],
    )


def collectives_group(c: RulesConfig) -> Group:
    """Ranks of one process group compared across nodes: who has issued fewer collectives, and how
    long the group's oldest collective has been in flight, and how many members report on it. The
    `other` group folds unrelated groups of each rank together, so it is left out (the hang alert
    has its own form for it)."""
    issued = c.m(training.NCCL_ISSUED_TOTAL, NOT_OTHER)
    waiting = c.m(training.NCCL_INFLIGHT_OLDEST_SECONDS, NOT_OTHER)
    return Group(
        name="trainmon.collectives.rules",
        rules=[
            Record(record="job_id_group:trainmon_nccl_issued:max", expr=f"max without (instance, rank) ({issued})"),
            Record(
                record="job_id_group:trainmon_nccl_issued:spread",
                expr=f"job_id_group:trainmon_nccl_issued:max - min without (instance, rank) ({issued})",
            ),
            # How many collectives each rank is behind the most advanced member of its group.
            Record(
                record="rank_group:trainmon_nccl_issued:lag",
                expr=f"""
  job_id_group:trainmon_nccl_issued:max
- on (job, job_id, group) group_right
  {issued}""",
            ),
            Record(
                record="job_id_group:trainmon_nccl_members:count",
                expr=f"count without (instance, rank) ({issued})",
            ),
            # What the members say the group's size is: more than report on it means one is gone.
            Record(
                record="job_id_group:trainmon_nccl_group_size:max",
                expr=f"max without (instance, rank) ({c.m(training.NCCL_GROUP_SIZE, NOT_OTHER)})",
            ),
            Record(
                record="job_id_group:trainmon_nccl_inflight_oldest_seconds:max",
                expr=f"max without (instance, rank, op) ({waiting})",
            ),
            # The shortest timeout a member reports for the group (`other` included): NCCL's watchdog ends
            # the job there, so the hang alerts fire at half of it when that is before their threshold.
            Record(
                record="job_id_group:trainmon_train_pg_timeout_seconds:min",
                expr=f"min without (instance, rank) ({c.m(training.TRAIN_PG_TIMEOUT_SECONDS)})",
            ),
        ],
    )


def nvme_group(c: RulesConfig) -> Group:
    requests = (
        f"rate({c.m(nvme.NVME_READS_COMPLETED_TOTAL)}[5m])"
        f" + rate({c.m(nvme.NVME_WRITES_COMPLETED_TOTAL)}[5m])"
    )
    busy = (
        f"rate({c.m(nvme.NVME_READ_TIME_SECONDS_TOTAL)}[5m])"
        f" + rate({c.m(nvme.NVME_WRITE_TIME_SECONDS_TOTAL)}[5m])"
    )
    return Group(
        name="trainmon.nvme.rules",
        rules=[
            Record(record=NVME_REQUESTS, expr=requests),
            # A later rule of a group reads an earlier one's output of this evaluation: the request rates
            # are computed once.
            Record(record=NVME_LATENCY, expr=f"({busy}) / {NVME_REQUESTS}"),
            # Each drive's usual latency (its median over a day) and, per node and model, the fastest drive that
            # serves requests: a drive is judged against its own past and its siblings, not a fixed figure.
            Record(record="instance_device:trainmon_nvme_request_seconds:median1d",
                   expr=f"quantile_over_time(0.5, {NVME_LATENCY}[1d])"),
            Record(record="instance_model:trainmon_nvme_request_seconds:min", expr=f"""
min by (job, instance, model) (
    ({NVME_LATENCY} and {NVME_REQUESTS} > 1)
  * on (job, instance, device) group_left (model)
    {c.m(nvme.NVME_INFO)}
)"""),
        ],
    )


def infiniband_group(c: RulesConfig) -> Group:
    """Each active port's rate with its role (link layer, board), and its best rate of the last day."""
    rate = c.m(infiniband.INFINIBAND_RATE_BYTES_PER_SECOND)
    return Group(
        name="trainmon.infiniband.rules",
        rules=[
            Record(record="instance_port:trainmon_infiniband_rate_bytes_per_second:role", expr=f"""
  (
      {rate}
    and on (job, instance, device, port)
      {c.m(infiniband.INFINIBAND_STATE_ID)} == 4
  )
* on (job, instance, device, port) group_left (link_layer)
  max by (job, instance, device, port, link_layer) ({c.m(infiniband.INFINIBAND_PORT_INFO)})
* on (job, instance, device) group_left (board_id)
  max by (job, instance, device, board_id) ({c.m(infiniband.INFINIBAND_INFO)})"""),
            Record(record="instance_port:trainmon_infiniband_rate_bytes_per_second:max1d",
                   expr=f"max_over_time({rate}[1d])"),
        ],
    )


def fs_group(c: RulesConfig) -> Group:
    """Storage tier 3 per mount, per node and per job (a job's nodes are those its ranks run on), and the
    job-side signals TrainmonStorageSlow and TrainmonCheckpointWriteSlow compare them with."""

    def rate(metric: Family, window: str = "5m", *matchers: str) -> str:
        return f"rate({c.m(metric, *matchers)}[{window}])"

    rpc_seconds = fs.FS_RPC_SECONDS_TOTAL
    rules = [
        Record(record="instance_mount:trainmon_fs_read_bytes:rate5m", expr=rate(fs.FS_READ_BYTES_TOTAL)),
        Record(record="instance_mount:trainmon_fs_written_bytes:rate5m", expr=rate(fs.FS_WRITTEN_BYTES_TOTAL)),
        Record(record="instance_mount:trainmon_fs_metadata_operations:rate5m",
               expr=f"sum without (op) ({rate(fs.FS_OPERATIONS_TOTAL, '5m', METADATA_OPS)})"),
        Record(record="instance_mount:trainmon_fs_rpcs:rate5m", expr=rate(fs.FS_RPCS_TOTAL)),
        Record(record="instance_mount:trainmon_fs_rpc_seconds:mean5m",
               expr=f"{rate(rpc_seconds)} / instance_mount:trainmon_fs_rpcs:rate5m"),
        Record(record="instance_mount:trainmon_fs_rpc_timeouts:rate5m", expr=rate(fs.FS_RPC_TIMEOUTS_TOTAL)),
        # Each mount's own baseline: its best 5 minutes of the last hour. Against an average over the hour a
        # slowdown would soon be its own baseline, and a mount seen for minutes only would have none.
        *(Record(record=f"instance_mount:trainmon_fs_{name}_min1h",
                 expr=f"min_over_time(instance_mount:trainmon_fs_{name}[1h])")
          for name in ("rpc_seconds:mean5m", "rpc_timeouts:rate5m")),
        Record(record="instance:trainmon_fs_rpc_seconds:rate5m", expr=f"sum without (mount) ({rate(rpc_seconds)})"),
    ]
    rules += [
        Record(record=f"instance:trainmon_fs_{name}:rate5m",
               expr=f"sum without (mount) (instance_mount:trainmon_fs_{name}:rate5m)")
        for name in ("read_bytes", "written_bytes", "rpcs")
    ]
    rules += [
        Record(record=JOB_NODES, expr=f"group by (job, instance, job_id) ({RANK_INFO})"),
        Record(
            record="instance_job_id:trainmon_train_dataloader_wait_per_step_time:ratio",
            expr=f"""
  sum without (rank) (rank:trainmon_train_dataloader_wait_seconds:rate5m)
/
  sum without (rank) ({STEP_SECONDS})""",
        ),
    ]
    rules += [
        Record(
            record=f"job_id:trainmon_fs_{name}:rate5m",
            expr=f"""
sum by (job, job_id) (
    instance:trainmon_fs_{name}:rate5m
  * on (job, instance) group_right
    {JOB_NODES}
)""",
        )
        for name in ("read_bytes", "written_bytes", "rpcs", "rpc_seconds")
    ]
    rules += [
        Record(record="job_id:trainmon_fs_rpc_seconds:mean5m",
               expr="job_id:trainmon_fs_rpc_seconds:rate5m / job_id:trainmon_fs_rpcs:rate5m"),
        # A checkpoint's length, as the checkpoint seconds of a 10-minute window (the ranks' average).
        Record(
            record=CHECKPOINT_WINDOW,
            expr=f"avg without (instance, rank, phase) "
                 f"(increase({c.m(training.TRAIN_PHASE_SECONDS_TOTAL, CHECKPOINT_PHASE)}[10m]))",
        ),
        # The same once no rank is inside the checkpoint any more: a completed checkpoint's whole length, for the
        # 10 minutes after it. A running one is never its own baseline, nor is a window older than the job's
        # first 10 minutes in Prometheus: a job that checkpoints more often than every 10 minutes sums several per
        # window, and its part-filled first windows (a checkpoint cut by the first scrape among them) would pull
        # the median below a full window's sum and page for a healthy checkpoint.
        Record(
            record=CHECKPOINT_DONE,
            expr=f"""
  (
    {CHECKPOINT_WINDOW} > 0
  and on (job, job_id)
    {JOB_NODES} offset 10m
  )
unless on (job, job_id)
  {c.m(training.TRAIN_PHASE, CHECKPOINT_PHASE)} == 1""",
        ),
        # The job's completed checkpoints of the last day (each one's first minute of the above), and their median.
        Record(
            record="job_id:trainmon_train_checkpoints_completed:count1d",
            expr=f"count_over_time(({CHECKPOINT_DONE} unless {CHECKPOINT_DONE} offset 1m)[1d:1m])",
        ),
        Record(
            record="job_id:trainmon_train_checkpoint_seconds:median1d",
            expr=f"quantile_over_time(0.5, {CHECKPOINT_DONE}[1d])",
        ),
    ]
    return Group(name="trainmon.fs.rules", rules=rules)


# GPU owners (SPEC §4 "GPU ownership"): (level, owner labels, info series). The owner series are
# `_info` series joined here, never labels copied onto every GPU series.
OWNERS = (
    ("namespace", "namespace", pod_resources.GPU_ALLOCATION_INFO),
    ("job_id", "job_id", hpc_jobs.GPU_JOB_INFO),
)


def idle_gpu_expr(c: RulesConfig) -> str:
    """One series per idle GPU, judged as TrainmonGPUIdleDuringTraining does: SM activity, else power."""
    sm = c.m(gpu.GPU_SM_UTILIZATION_RATIO)
    return f"""
group by (job, instance, gpu, uuid) (
    {sm} < {c.idle_sm_ratio}
  or
    (
      instance_gpu:trainmon_gpu_power_per_limit:ratio < {c.idle_power_ratio}
    unless on (instance, uuid)
      {sm}
    )
)"""


def ownership_group(c: RulesConfig) -> Group:
    """Allocated and idle GPUs per owner, and the GPU-hours each owner held over the last hour."""
    rules = [Record(record="instance_gpu:trainmon_gpu_idle:group", expr=idle_gpu_expr(c))]
    for level, owner, series in OWNERS:
        # One per (node, GPU, owner): a GPU listed twice for one owner (two containers) counts once.
        held = f"group by (job, instance, uuid, {owner}) ({c.m(series)})"
        rules += [
            Record(record=f"{level}:trainmon_gpu_allocated:count", expr=f"count by (job, {owner}) ({held})"),
            Record(
                record=f"{level}:trainmon_gpu_idle:count",
                expr=f"""
count by (job, {owner}) (
    {held}
  and on (instance, uuid)
    instance_gpu:trainmon_gpu_idle:group
)""",
            ),
            # 60 one-minute steps (59m59s: Prometheus 2 counts both ends of a subquery range, 3 only the
            # last): an owner that held GPUs for part of the hour accrues only that part.
            Record(
                record=f"{level}:trainmon_gpu_hours:sum1h",
                expr=f"sum_over_time({level}:trainmon_gpu_allocated:count[59m59s:1m]) / 60",
            ),
        ]
    return Group(name="trainmon.ownership.rules", rules=rules)


# The GPU health verdicts an operator acts on (restart_app is the job owner's).
NEEDS_OPERATOR = 'action=~"reset_gpu|reboot|drain"'


def fleet_group(c: RulesConfig) -> Group:
    """Per-node aggregates the Fleet dashboard reads, so it never touches per-GPU or per-port series:
    at 1,000 nodes a panel then reads one series per node, not 8 to 40."""
    sm = c.m(gpu.GPU_SM_UTILIZATION_RATIO)
    return Group(
        name="trainmon.fleet.rules",
        rules=[
            Record(record="instance:trainmon_gpus_expected:sum",
                   expr=f"sum by (job, instance) ({c.m(gpu.GPUS_EXPECTED)})"),
            Record(record="instance:trainmon_gpu_sm_utilization_ratio:avg", expr=f"avg without (gpu, uuid) ({sm})"),
            Record(record="instance:trainmon_gpu_idle:count",
                   expr=f"sum without (gpu, uuid) ({sm} < bool {c.idle_sm_ratio})"),
            Record(record="instance:trainmon_gpu_busy:count",
                   expr=f"sum without (gpu, uuid) ({sm} >= bool {c.idle_sm_ratio})"),
            Record(record="instance:trainmon_gpu_power_watts:sum",
                   expr=f"sum without (gpu, uuid) ({c.m(gpu.GPU_POWER_WATTS)})"),
            Record(record="instance:trainmon_gpu_xid_errors:increase5m",
                   expr=f"sum by (job, instance) (increase({c.m(gpu.GPU_XID_ERRORS_TOTAL)}[5m]))"),
            Record(record="instance:trainmon_gpu_ecc_uncorrected_errors:sum",
                   expr=f"sum by (job, instance) ({c.m(gpu.GPU_ECC_ERRORS_TOTAL, UNCORRECTED)})"),
            Record(record="instance:trainmon_infiniband_errors:rate5m",
                   expr=f"sum by (job, instance) (rate({c.m(infiniband.INFINIBAND_SYMBOL_ERROR_TOTAL)}[5m]))\n+ "
                        f"sum by (job, instance) (rate({c.m(infiniband.INFINIBAND_PORT_ERRORS_RECEIVED_TOTAL)}[5m]))"),
            # GPUs whose verdict needs an operator, per node and action.
            Record(record="instance_action:trainmon_gpu_health_action:count",
                   expr=f"count by (job, instance, action) ({c.m(gpu.GPU_HEALTH_ACTION, NEEDS_OPERATOR)} == 1)"),
            Record(record="instance:trainmon_collector_failures:count",
                   expr=f"sum by (job, instance) (1 - {c.m(daemon.COLLECTOR_SUCCESS)})"),
            Record(record="instance:trainmon_ingest_ranks:sum",
                   expr=f"sum by (job, instance) ({c.m(training.INGEST_RANKS)})"),
        ],
    )


def recording_groups(c: RulesConfig) -> list[Group]:
    """In dependency order (promtool tests evaluate them in this order, `group_eval_order`)."""
    groups = [
        gpu_group(c), step_rates_group(c), wait_rates_group(c), training_group(), rank_gpu_group(c),
        histogram_group(c), collectives_group(c), hang_group(c), nccl_group(c), nvme_group(c), infiniband_group(c),
        fs_group(c),
        ownership_group(c), *efficiency_groups(c), numerics_group(c), loss_scale_group(c), fleet_group(c),
        xid_catalog_group(),
    ]
    return [replace(g, interval=c.group_interval(g.name, g.interval)) for g in groups]
