"""Training job dashboard: throughput, step time and its parts per rank, collectives, precision, data, GPUs.

Built on the recording rules of prometheus/rules.yml (`rank:` and `job_id:` series).
"""

from __future__ import annotations

from grafana_foundation_sdk.models.dashboard import Dashboard as DashboardModel
from grafana_foundation_sdk.models.dashboard import DynamicConfigValue

from bundle import links
from trainmon.catalog import nccl_ras, training

from .config import DashboardConfig
from .node import job_variable
from .panels import Board, Query, Variable, graph, linked, rows_heatmap, single

# After the selector (DashboardConfig.matchers); job-level series carry no instance.
JOB_LEVEL = 'job=~"$job", job_id=~"$job_id"'
RANK_LEVEL = 'job=~"$job", job_id=~"$job_id", instance=~"$instance"'
RANK = "rank {{rank}}"
RATE = "[$__rate_interval]"
ALL_RANKS = "sum without (instance, rank)"

JOB_ID = Variable(
    name="job_id",
    label="Training job",
    query=f'label_values({training.TRAIN_RANK_INFO}{{job=~"$job"}}, job_id)',
    multi=False,
)
INSTANCE = Variable(
    name="instance",
    label="Instance",
    query=f'label_values({training.TRAIN_RANK_INFO}{{job=~"$job", job_id=~"$job_id"}}, instance)',
)


def _algbw(rank_matchers: str, ops: str) -> str:
    """Algorithm bandwidth per (op, group): bytes over time in collectives, summed over ranks first."""
    return (
        f'{ALL_RANKS} (rate({training.NCCL_BYTES_TOTAL}{{{rank_matchers}, op=~"{ops}"}}{RATE}))'
        f' / {ALL_RANKS} (rate({training.NCCL_TIME_SECONDS_TOTAL}{{{rank_matchers}, op=~"{ops}"}}{RATE}))'
    )


def _busbw(rank_matchers: str, ops: str, factor: str) -> str:
    """Bus bandwidth = algorithm bandwidth x factor(n), n = the process group's size (nccl-tests' convention)."""
    n = f"max without (instance, rank) ({training.NCCL_GROUP_SIZE}{{{rank_matchers}}})"
    return f"({_algbw(rank_matchers, ops)})\n* on (job, job_id, group) group_left ()\n({factor.format(n=n)})"


def _throughput(b: Board) -> Board:
    job_matchers = b.config.matchers(JOB_LEVEL)
    return b.row(
        "Throughput",
        single(
            "Ranks",
            "Live ranks of the job.",
            "none",
            Query(f"sum(job_id:trainmon_train_ranks:count{{{job_matchers}}})", "ranks"),
        ),
        single(
            "Mean step time",
            "Step wall time over the last 5 minutes, all ranks.",
            "s",
            Query(f"job_id:trainmon_train_step_duration_seconds:mean5m{{{job_matchers}}}", "step"),
        ),
        single(
            "Communication wait",
            "Share of step time the ranks were blocked on communication (alert above 40%).",
            "percentunit",
            Query(f"job_id:trainmon_train_comm_wait_per_step_time:ratio{{{job_matchers}}}", "comm wait"),
        ),
        single(
            "Data-loader wait",
            "Share of step time the ranks waited for their next batch.",
            "percentunit",
            Query(f"job_id:trainmon_train_dataloader_wait_per_step_time:ratio{{{job_matchers}}}", "data wait"),
        ),
        single(
            "Steps per second",
            "Optimizer steps per second (mean over ranks).",
            "none",
            Query(f"job_id:trainmon_train_steps:avg_rate5m{{{job_matchers}}}", "steps/s"),
        ),
        single(
            "Skipped steps",
            "Steps skipped for inf/NaN gradients over the selected range.",
            "none",
            Query(f"sum(max without (instance) ({training.TRAIN_SKIPPED_STEPS_TOTAL}{{{job_matchers}}}))", "skipped"),
        ),
        linked(links.SAMPLES_PER_SECOND, graph(
            "Samples per second",
            "Samples processed per second by the whole job.",
            "short",
            Query(f"job_id:trainmon_train_samples:rate5m{{{job_matchers}}}", "{{job_id}}"),
            width=8,
        )),
        graph(
            "Tokens per second",
            "Tokens processed per second by the whole job.",
            "short",
            Query(f"job_id:trainmon_train_tokens:rate5m{{{job_matchers}}}", "{{job_id}}"),
            width=8,
        ),
        graph(
            "Steps per second",
            "Optimizer steps per second, mean over ranks; the throughput-regression alert compares it with the "
            "job's previous hour.",
            "short",
            Query(f"job_id:trainmon_train_steps:avg_rate5m{{{job_matchers}}}", "{{job_id}}"),
            width=8,
        ),
    )


def _step_time(b: Board) -> Board:
    job_matchers = b.config.matchers(JOB_LEVEL)
    rank_matchers = b.config.matchers(RANK_LEVEL)
    return b.row(
        "Step time",
        linked(links.STEP_TIME_PER_RANK, graph(
            "Step time per rank",
            "Mean step wall time per rank over 5 minutes. Synchronous ranks step together: a rank whose compute "
            "share stands out is the straggler the others wait for.",
            "s",
            Query(f"rank:trainmon_train_step_duration_seconds:mean5m{{{rank_matchers}}}", RANK),
        )),
        graph(
            "Step time quantiles",
            "Median and 90th percentile step time of the job, from the step-duration histogram.",
            "s",
            Query(
                "histogram_quantile(0.5, "
                f"job_id_le:trainmon_train_step_duration_seconds_bucket:rate5m{{{job_matchers}}})",
                "p50",
            ),
            Query(
                "histogram_quantile(0.9, "
                f"job_id_le:trainmon_train_step_duration_seconds_bucket:rate5m{{{job_matchers}}})",
                "p90",
            ),
        ),
        graph(
            "Compute share per rank",
            "Step time minus communication wait minus data wait, as a share of step time.",
            "percentunit",
            Query(f"rank:trainmon_train_compute_per_step_time:ratio{{{rank_matchers}}}", RANK),
            Query(f"job_id:trainmon_train_compute_per_step_time:ratio{{{job_matchers}}}", "whole job"),
            max_value=1,
        ),
        linked(links.DATA_LOADER_WAIT_SHARE_PER_RANK, graph(
            "Data-loader wait share per rank",
            "Share of step time each rank waited for its next batch.",
            "percentunit",
            Query(f"rank:trainmon_train_dataloader_wait_per_step_time:ratio{{{rank_matchers}}}", RANK),
            max_value=1,
        )),
    )


def _communication(b: Board) -> Board:
    job_matchers = b.config.matchers(JOB_LEVEL)
    rank_matchers = b.config.matchers(RANK_LEVEL)
    return b.row(
        "Communication",
        linked(links.COMMUNICATION_WAIT_SHARE_PER_RANK, graph(
            "Communication wait share per rank",
            "Share of step time the training thread was blocked on communication (not overlapped).",
            "percentunit",
            Query(f"rank:trainmon_train_comm_wait_per_step_time:ratio{{{rank_matchers}}}", RANK),
            max_value=1,
        )),
        graph(
            "NCCL time share per rank",
            "Time inside collectives, launch to completion, as a share of step time; it includes communication "
            "that overlaps compute, so it can exceed the wait share.",
            "percentunit",
            Query(f"rank:trainmon_nccl_time_per_step_time:ratio{{{rank_matchers}}}", RANK),
            Query(f"job_id:trainmon_nccl_time_per_step_time:ratio{{{job_matchers}}}", "whole job"),
        ),
        graph(
            "NCCL time by operation",
            "Seconds per second spent in collectives, by operation and process group, summed over ranks.",
            "s",
            Query(f"{ALL_RANKS} (rate({training.NCCL_TIME_SECONDS_TOTAL}{{{rank_matchers}}}{RATE}))",
                  "{{op}} {{group}}"),
        ),
        graph(
            "Bus bandwidth",
            "Bus bandwidth by operation and group (nccl-tests' convention): bytes over time in the collective x "
            "2(n-1)/n for all_reduce, (n-1)/n for all_gather and reduce_scatter, 1 otherwise.",
            "Bps",
            Query(_busbw(rank_matchers, "all_reduce", "2 * ({n} - 1) / {n}"), "{{op}} {{group}}"),
            Query(_busbw(rank_matchers, "all_gather|reduce_scatter", "({n} - 1) / {n}"), "{{op}} {{group}}"),
            Query(_algbw(rank_matchers, "broadcast|all_to_all|send_recv|barrier|other"), "{{op}} {{group}}"),
        ),
        graph(
            "Collectives in flight",
            "Age of each rank's oldest collective issued but not completed, per process group (absent when none). "
            "Ages that grow together while one rank has none: that rank holds the others (TrainmonCollectiveHang).",
            "s",
            Query(f"{training.NCCL_INFLIGHT_OLDEST_SECONDS}{{{rank_matchers}}}", "rank {{rank}} {{group}} {{op}}"),
        ),
        linked(links.COLLECTIVES_BEHIND_THE_GROUP, graph(
            "Collectives behind the group",
            "How many collectives each rank has issued fewer than the most advanced rank of its process group.",
            "short",
            Query(f"rank_group:trainmon_nccl_issued:lag{{{rank_matchers}}}", "rank {{rank}} {{group}}"),
        )),
        linked(links.NCCL_BUS_BANDWIDTH, graph(
            "Bus bandwidth per communicator member (NCCL Inspector)",
            "NCCL Inspector's GPU-timed bus bandwidth of each rank per communicator, collective and message-size "
            "class over 10 minutes, and the members' median: a member well below its peers is the slow link "
            "(TrainmonNCCLSlowLink). Needs the nccl_inspector collector and Inspector enabled in the job.",
            "Bps",
            Query(f"rank_comm:trainmon_nccl_inspector_bus_bandwidth:mean10m{{{rank_matchers}}}",
                  "rank {{rank}} {{comm_name}} {{collective}} {{size_class}}"),
            Query(f"job_id_comm:trainmon_nccl_inspector_bus_bandwidth:median10m{{{job_matchers}}}",
                  "median {{comm_name}} {{collective}} {{size_class}}"),
            width=16,
        )),
        linked(links.NCCL_RANKS_MISSING, graph(
            "NCCL ranks missing (RAS)",
            "Ranks NCCL RAS reports missing from the job, by kind: unresponsive (~5 s without an answer), dead "
            "(~60 s), absent (not in a communicator's data); and communicators whose ranks disagree on a "
            "collective's count. Needs the nccl_ras collector (TrainmonNCCLRanksMissing).",
            "short",
            Query(f"max without (instance) ({nccl_ras.NCCL_RAS_MISSING_RANKS}{{{job_matchers}}})", "{{kind}}"),
            Query(f"max without (instance) ({nccl_ras.NCCL_RAS_COMMUNICATORS_MISMATCHED}{{{job_matchers}}})",
                  "communicators in op-count mismatch"),
            width=8,
        )),
        linked(links.HUNG_JOB_CLASS_AND_CULPRIT, graph(
            "Hung job: class and culprit",
            "While every rank of the job is past its hang threshold: the hang's class (gone, data, host, collective, "
            "unknown) and the rank that holds the job (TrainmonJobHung), and for each stuck rank how many ranks share "
            "its stack (the outliers share it with few). trainmon diagnose --job prints the stacks.",
            "short",
            Query(f"job_id:trainmon_train_hang:culprit{{{rank_matchers}}}",
                  "{{class}}: rank {{rank}} on {{instance}}{{host}}"),
            Query(f"rank:trainmon_train_stack_peers:count{{{rank_matchers}}}", "rank {{rank}} stack shared by"),
        )),
    )


def _precision(b: Board) -> Board:
    rank_matchers = b.config.matchers(RANK_LEVEL)
    return b.row(
        "Numerics: loss, gradients and precision",
        linked(links.LOSS, graph(
            "Loss",
            "Last loss each rank reported.",
            "none",
            Query(f"{training.TRAIN_LOSS}{{{rank_matchers}}}", RANK),
            width=8,
        )),
        graph(
            "Loss max per rank",
            "The largest loss of each rank's steps in the last 30 s (the hook keeps the maximum between reports, "
            "so a spike between scrapes still shows).",
            "none",
            Query(f"{training.TRAIN_LOSS_MAX}{{{rank_matchers}}}", RANK),
            width=8,
        ),
        graph(
            "Grad-norm max per rank",
            "The largest gradient norm of each rank's steps in the last 30 s. BLOOM-176B's first spike went "
            "0.24 -> 960 in five steps.",
            "none",
            Query(f"{training.TRAIN_GRAD_NORM_MAX}{{{rank_matchers}}}", RANK),
            width=8,
        ),
        linked(links.LOSS_AND_GRAD_NORM_SPIKES, graph(
            "Loss and grad-norm spikes",
            "Steps the hook counted as spikes, per interval: a grad norm over 10x the median of the rank's last 100 "
            "steps, a loss over 2x their mean. Every rank at once: the run; one rank alone: its GPU.",
            "none",
            Query(f"increase({training.TRAIN_GRAD_NORM_SPIKES_TOTAL}{{{rank_matchers}}}{RATE})", RANK + " grad norm"),
            Query(f"increase({training.TRAIN_LOSS_SPIKES_TOTAL}{{{rank_matchers}}}{RATE})", RANK + " loss"),
            width=8,
        )),
        linked(links.LOSS_SCALE, graph(
            "Loss scale",
            "Mixed-precision loss scale per rank (absent without a scaler, e.g. bf16). A collapse means gradients "
            "keep overflowing.",
            "none",
            Query(f"{training.TRAIN_LOSS_SCALE}{{{rank_matchers}}}", RANK),
            width=8,
        )),
        linked(links.SKIPPED_AND_NON_FINITE_STEPS, graph(
            "Skipped and non-finite steps",
            "Steps skipped for inf/NaN gradients and steps with a NaN/inf loss, per interval.",
            "none",
            Query(f"increase({training.TRAIN_SKIPPED_STEPS_TOTAL}{{{rank_matchers}}}{RATE})", RANK + " skipped"),
            Query(f"increase({training.TRAIN_NONFINITE_LOSS_TOTAL}{{{rank_matchers}}}{RATE})",
                  RANK + " non-finite loss"),
            width=8,
        )),
    )


def _gpus(b: Board) -> Board:
    rank_matchers = b.config.matchers(RANK_LEVEL)
    gpu = RANK + " ({{instance}} gpu {{gpu}})"
    return b.row(
        "The job's GPUs",
        linked(links.SM_ACTIVITY_BY_RANK, graph(
            "SM activity by rank",
            f"SM activity of each rank's GPU, joined through {training.TRAIN_RANK_INFO}{{uuid}}.",
            "percentunit",
            Query(f"rank:trainmon_gpu_sm_utilization_ratio:join{{{rank_matchers}}}", gpu),
            max_value=1,
        )),
        graph(
            "Coarse utilization by rank",
            "NVML utilization of each rank's GPU; 100% with low SM activity means kernels spin (e.g. waiting in NCCL).",
            "percentunit",
            Query(f"rank:trainmon_gpu_utilization_ratio:join{{{rank_matchers}}}", gpu),
            max_value=1,
        ),
        graph(
            "Framebuffer by rank",
            "Framebuffer used on each rank's GPU.",
            "bytes",
            Query(f"rank:trainmon_gpu_fb_used_bytes:join{{{rank_matchers}}}", gpu),
        ),
        graph(
            "Power by rank",
            "Power draw of each rank's GPU.",
            "watt",
            Query(f"rank:trainmon_gpu_power_watts:join{{{rank_matchers}}}", gpu),
        ),
        linked(links.ALLOCATOR_RETRIES_AND_OOMS, graph(
            "Allocator retries and OOMs",
            "CUDA caching-allocator retries and out-of-memory errors per interval: the real memory-pressure signal.",
            "none",
            Query(f"increase({training.TRAIN_CUDA_ALLOC_RETRIES_TOTAL}{{{rank_matchers}}}{RATE})", RANK + " retries"),
            Query(f"increase({training.TRAIN_CUDA_OOMS_TOTAL}{{{rank_matchers}}}{RATE})", RANK + " OOMs"),
            width=24,
        )),
    )


def _efficiency(b: Board) -> Board:
    job_matchers = b.config.matchers(JOB_LEVEL)
    rank_matchers = b.config.matchers(RANK_LEVEL)
    share = f"job_id_category:trainmon_train_time:ratio{{{job_matchers}}}"
    return b.row(
        "Efficiency",
        single(
            "Goodput",
            "Share of the job's rank time spent computing (not waiting on communication, data, phases, stalls, "
            "start-up, or ranks gone between restarts).",
            "percentunit",
            Query(f"job_id:trainmon_train_goodput:ratio{{{job_matchers}}}", "goodput"),
        ),
        single(
            "MFU",
            "Model FLOPs per second over the dense peak of the ranks' GPUs (only where the hook is given FLOPs and "
            "the GPU model's peak is known).",
            "percentunit",
            Query(f"job_id:trainmon_train_mfu:ratio{{{job_matchers}}}", "MFU"),
        ),
        single(
            "Model FLOP/s",
            "Model FLOPs per second of the whole job.",
            "flops",
            Query(f"job_id:trainmon_train_model_flops:rate5m{{{job_matchers}}}", "FLOP/s"),
        ),
        single(
            "Energy per token",
            "GPU energy of the job's ranks per token processed.",
            "joule",
            Query(f"job_id:trainmon_train_joules_per_token:ratio{{{job_matchers}}}", "J/token"),
        ),
        linked(links.ABSENT_RANKS, single(
            "Absent ranks",
            "Ranks the job had in the last hour that are not reporting now (a restart under the same job id).",
            "none",
            Query(f"job_id:trainmon_train_ranks_absent:count{{{job_matchers}}}", "absent"),
        )),
        single(
            "Badput",
            "Share of the job's rank time not spent computing.",
            "percentunit",
            Query(f"job_id:trainmon_train_badput:ratio{{{job_matchers}}}", "badput"),
        ),
        graph(
            "Where the time goes",
            "The job's rank time split into compute, exposed communication wait, data-loader wait, each phase, "
            "stalled (live, out of a phase, no steps), start-up (process start to first step) and absent ranks.",
            "percentunit",
            Query(share, "{{category}} {{phase}}"),
            width=16,
            max_value=1,
            stacked=True,
        ),
        graph(
            "MFU per rank",
            "Model FLOPs per second of each rank over its GPU's dense peak.",
            "percentunit",
            Query(f"rank:trainmon_train_mfu:ratio{{{rank_matchers}}}", RANK),
            width=8,
            max_value=1,
        ),
        linked(links.STRAGGLER_SCORE_BY_RANK, rows_heatmap(
            "Straggler score by rank",
            "The job's fastest compute time over each rank's (1 = fastest, 0.5 = twice as slow); the straggler "
            "alert fires below 0.75 while the other ranks wait.",
            "none",
            Query(f"rank:trainmon_train_straggler_score:relative{{{rank_matchers}}}", RANK),
        )),
        linked(links.COMPUTE_TIME_PER_STEP_BY_RANK, rows_heatmap(
            "Compute time per step by rank",
            "Step time less exposed communication and data wait, per rank (5-minute mean). In a synchronous job "
            "every rank steps at the slowest one's pace: a slow GPU is the one row that stands out "
            "(TrainmonSlowRank: a robust z-score over 3.5 and 3% above the median rank).",
            "s",
            Query(f"rank:trainmon_train_compute_seconds_per_step:mean5m{{{rank_matchers}}}", RANK),
        )),
        graph(
            "Individual straggler score",
            "Each rank's best compute time per step over the last hour over its recent one: a rank that slowed "
            "down against itself (thermal throttling, a noisy neighbour) reads below 1.",
            "none",
            Query(f"rank:trainmon_train_straggler_score:individual{{{rank_matchers}}}", RANK),
        ),
        graph(
            "Straggler cause and recoverable time",
            "For each flagged rank, the share of its extra compute time per step that its cause explains "
            "(pipeline_stage: its whole stage is slow; data_imbalance: it processed more tokens; hardware: the same "
            "tokens, more time per token; unknown: none explains 80%). Recoverable: the share of the job's step "
            "time it would save if its slowest rank computed like its median one.",
            "percentunit",
            Query(f"rank:trainmon_train_straggler_cause:share{{{rank_matchers}}}",
                  "rank {{rank}}: {{straggler_cause}}"),
            Query(f"job_id:trainmon_train_straggler_recoverable:ratio{{{job_matchers}}}", "recoverable"),
            max_value=1,
        ),
    )


def right_axis(unit: str) -> list[DynamicConfigValue]:
    """A second series on its own unit and on the right-hand axis."""
    return [DynamicConfigValue(id_val="unit", value=unit),
            DynamicConfigValue(id_val="custom.axisPlacement", value="right")]


def _data_path(b: Board) -> Board:
    """Where the job's batches and checkpoints go: its wait beside its nodes' network file systems."""
    job_matchers = b.config.matchers(JOB_LEVEL)
    return b.row(
        "Data path",
        graph(
            "Data-loader wait and file-system reads",
            "The job's data-loader wait share (left) beside what its nodes read from network and parallel file "
            "systems (right): wait up while reads drop is the storage tier (TrainmonStorageSlow); wait up with "
            "reads steady is the input pipeline itself.",
            "percentunit",
            Query(f"job_id:trainmon_train_dataloader_wait_per_step_time:ratio{{{job_matchers}}}", "data wait"),
            Query(f"job_id:trainmon_fs_read_bytes:rate5m{{{job_matchers}}}", "file-system read B/s"),
            width=12,
        ).override_by_name("file-system read B/s", right_axis("binBps")),
        linked(links.CHECKPOINT_WRITES, graph(
            "Checkpoint writes and file-system latency",
            "What the job's nodes write to their network file systems (checkpoints) and their mean RPC time.",
            "binBps",
            Query(f"job_id:trainmon_fs_written_bytes:rate5m{{{job_matchers}}}", "written"),
            Query(f"job_id:trainmon_fs_rpc_seconds:mean5m{{{job_matchers}}}", "RPC latency"),
            width=12,
        ).override_by_name("RPC latency", right_axis("s"))),
    )


def build(config: DashboardConfig) -> DashboardModel:
    board = Board(
        config=config,
        identity=links.TRAINING_JOB,
        title="Training job",
        description="One training job across its nodes: throughput, step time per rank, collectives and its GPUs.",
        variables=(job_variable(config), JOB_ID, INSTANCE),
    )
    return _gpus(_data_path(_precision(_communication(_efficiency(_step_time(_throughput(board))))))).build()
