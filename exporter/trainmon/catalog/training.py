"""The `training` collector: what the hook reports per rank, and the ingest server itself."""

from __future__ import annotations

from trainmon.catalog.family import Family, Kind

TRAIN_RANK_INFO = Family(
    "trainmon_train_rank_info",
    Kind.INFO,
    "A training process reporting through the hook.",
    ("job_id", "rank", "local_rank", "world_size", "uuid", "backend", "framework", "loss_scaler", "pid", "pod",
     "namespace"),
)
TRAIN_RANK_EXITED = Family(
    "trainmon_train_rank_exited",
    Kind.GAUGE,
    "1 while a rank that exited is still served with its final values (--exited-rank-retention); absent "
    "for a running rank.",
    ("job_id", "rank"),
)
TRAIN_STEPS_TOTAL = Family(
    "trainmon_train_steps_total",
    Kind.COUNTER,
    "Optimizer steps finished.",
    ("job_id", "rank"),
)
TRAIN_SAMPLES_TOTAL = Family(
    "trainmon_train_samples_total",
    Kind.COUNTER,
    "Samples processed.",
    ("job_id", "rank"),
)
TRAIN_TOKENS_TOTAL = Family(
    "trainmon_train_tokens_total",
    Kind.COUNTER,
    "Tokens processed (the real tokens the loop reports, padding left out).",
    ("job_id", "rank"),
)
TRAIN_MICROBATCHES_TOTAL = Family(
    "trainmon_train_microbatches_total",
    Kind.COUNTER,
    "Micro-batches (forward and backward passes) of the finished steps; absent where the loop does not "
    "say.",
    ("job_id", "rank"),
)
TRAIN_PIPELINE_STAGE = Family(
    "trainmon_train_pipeline_stage",
    Kind.GAUGE,
    "The rank's pipeline stage (0 first); absent where the job has none known.",
    ("job_id", "rank"),
)
TRAIN_LAST_STEP_TIMESTAMP_SECONDS = Family(
    "trainmon_train_last_step_timestamp_seconds",
    Kind.GAUGE,
    "Unix time the last step finished.",
    ("job_id", "rank"),
    unit="seconds",
)
TRAIN_PROCESS_START_TIMESTAMP_SECONDS = Family(
    "trainmon_train_process_start_timestamp_seconds",
    Kind.GAUGE,
    "Unix time the training process started.",
    ("job_id", "rank"),
    unit="seconds",
)
TRAIN_FIRST_STEP_TIMESTAMP_SECONDS = Family(
    "trainmon_train_first_step_timestamp_seconds",
    Kind.GAUGE,
    "Unix time the first step began.",
    ("job_id", "rank"),
    unit="seconds",
)
TRAIN_MODEL_FLOPS_TOTAL = Family(
    "trainmon_train_model_flops_total",
    Kind.COUNTER,
    "Model FLOPs of the finished steps (from the FLOPs given to the hook).",
    ("job_id", "rank"),
    unit="flops",
)
TRAIN_COMM_WAIT_SECONDS_TOTAL = Family(
    "trainmon_train_comm_wait_seconds_total",
    Kind.COUNTER,
    "Time the training thread was blocked on communication (exposed, not overlapped).",
    ("job_id", "rank"),
    unit="seconds",
)
TRAIN_DATALOADER_WAIT_SECONDS_TOTAL = Family(
    "trainmon_train_dataloader_wait_seconds_total",
    Kind.COUNTER,
    "Time the loop waited for the next batch.",
    ("job_id", "rank"),
    unit="seconds",
)
TRAIN_LOSS_SCALE = Family(
    "trainmon_train_loss_scale",
    Kind.GAUGE,
    "Current mixed-precision loss scale; absent without a scaler.",
    ("job_id", "rank"),
)
TRAIN_SKIPPED_STEPS_TOTAL = Family(
    "trainmon_train_skipped_steps_total",
    Kind.COUNTER,
    "Steps skipped for inf/NaN gradients.",
    ("job_id", "rank"),
)
TRAIN_LOSS = Family(
    "trainmon_train_loss",
    Kind.GAUGE,
    "Last reported loss.",
    ("job_id", "rank"),
)
TRAIN_GRAD_NORM = Family(
    "trainmon_train_grad_norm",
    Kind.GAUGE,
    "Last reported gradient norm.",
    ("job_id", "rank"),
)
TRAIN_LOSS_MAX = Family(
    "trainmon_train_loss_max",
    Kind.GAUGE,
    "Largest finite loss of the steps reported in the last 30 s (the hook's maximum since its previous "
    "report, held by the daemon so that no scrape misses a spike).",
    ("job_id", "rank"),
)
TRAIN_GRAD_NORM_MAX = Family(
    "trainmon_train_grad_norm_max",
    Kind.GAUGE,
    "Largest finite gradient norm of the steps reported in the last 30 s (held like "
    "trainmon_train_loss_max).",
    ("job_id", "rank"),
)
TRAIN_LOSS_SPIKES_TOTAL = Family(
    "trainmon_train_loss_spikes_total",
    Kind.COUNTER,
    "Steps whose loss exceeded the hook's factor (2) x the mean of the previous 100 finite losses.",
    ("job_id", "rank"),
)
TRAIN_GRAD_NORM_SPIKES_TOTAL = Family(
    "trainmon_train_grad_norm_spikes_total",
    Kind.COUNTER,
    "Steps whose gradient norm exceeded the hook's factor (10) x the median of the previous 100 finite "
    "ones.",
    ("job_id", "rank"),
)
TRAIN_NONFINITE_LOSS_TOTAL = Family(
    "trainmon_train_nonfinite_loss_total",
    Kind.COUNTER,
    "Steps whose reported loss was NaN or inf.",
    ("job_id", "rank"),
)
TRAIN_CUDA_ALLOC_RETRIES_TOTAL = Family(
    "trainmon_train_cuda_alloc_retries_total",
    Kind.COUNTER,
    "CUDA caching-allocator retries (torch.cuda.memory_stats).",
    ("job_id", "rank"),
)
TRAIN_CUDA_OOMS_TOTAL = Family(
    "trainmon_train_cuda_ooms_total",
    Kind.COUNTER,
    "CUDA out-of-memory errors (torch.cuda.memory_stats).",
    ("job_id", "rank"),
)
TRAIN_COLLECTIVES_CAPTURED_TOTAL = Family(
    "trainmon_train_collectives_captured_total",
    Kind.COUNTER,
    "CUDA collectives issued while a CUDA graph was being captured: counted once, their replays are "
    "unseen.",
    ("job_id", "rank"),
)
INGEST_MESSAGES_TOTAL = Family(
    "trainmon_ingest_messages_total",
    Kind.COUNTER,
    "Hook datagrams accepted.",
)
INGEST_COALESCED_TOTAL = Family(
    "trainmon_ingest_coalesced_total",
    Kind.COUNTER,
    "Accepted reports not applied because a newer one of the same process came in the same burst.",
)
INGEST_REJECTED_TOTAL = Family(
    "trainmon_ingest_rejected_total",
    Kind.COUNTER,
    "Hook datagrams rejected, by reason.",
    ("reason",),
)
INGEST_RANKS = Family(
    "trainmon_ingest_ranks",
    Kind.GAUGE,
    "Live training ranks (job_id, rank pairs); exited ones still served not counted.",
)
INGEST_EVICTED_TOTAL = Family(
    "trainmon_ingest_evicted_total",
    Kind.COUNTER,
    "Entries dropped from the ingest tables, by reason.",
    ("reason",),
)
TRAIN_RANK_EXITS_TOTAL = Family(
    "trainmon_train_rank_exits_total",
    Kind.COUNTER,
    "Ranks that left: clean (said goodbye), error (ending through an uncaught exception) or lost (silent "
    "for --rank-ttl).",
    ("job_id", "reason"),
)
INGEST_SOCKET_REBINDS_TOTAL = Family(
    "trainmon_ingest_socket_rebinds_total",
    Kind.COUNTER,
    "Times the ingest socket file or its directory vanished and was made again.",
)
TRAIN_HANG_SUSPECTED = Family(
    "trainmon_train_hang_suspected",
    Kind.GAUGE,
    "1 while the rank's oldest collective or its step has not moved for longer than its hang threshold "
    "(the larger of the hook's floor and 5x its median step), outside declared phases, or while its "
    "process is gone; 0 otherwise.",
    ("job_id", "rank"),
)
TRAIN_HANG_LOCATION = Family(
    "trainmon_train_hang_location",
    Kind.GAUGE,
    "1 while the rank is suspected of a hang, `location` where its stack is: collective, data (loading), "
    "other (also while its stack has not arrived) or gone (its process died, or ended through an error).",
    ("job_id", "rank", "location"),
)
TRAIN_STACK_INFO = Family(
    "trainmon_train_stack_info",
    Kind.INFO,
    "1 while the rank is suspected of a hang; `signature` is a short hash of its training thread's stack "
    "(unknown until it arrives), the stack itself on /api/v1/ranks.",
    ("job_id", "rank", "signature"),
)
TRAIN_STEP_DURATION_SECONDS = Family(
    "trainmon_train_step_duration_seconds",
    Kind.HISTOGRAM,
    "Step wall time.",
    ("job_id", "rank"),
    unit="seconds",
)
NCCL_TIME_SECONDS_TOTAL = Family(
    "trainmon_nccl_time_seconds_total",
    Kind.COUNTER,
    "Time in collectives: blocking calls from call to return; async ones from the call until "
    "wait()/is_completed() or the step end saw them done; DDP buckets from the comm hook to its future "
    "(the default hook's division included); on CUDA between events around them. Waiting for peers "
    "included.",
    ("job_id", "rank", "op", "group"),
    unit="seconds",
)
NCCL_CALLS_TOTAL = Family(
    "trainmon_nccl_calls_total",
    Kind.COUNTER,
    "Collective calls.",
    ("job_id", "rank", "op", "group"),
)
NCCL_BYTES_TOTAL = Family(
    "trainmon_nccl_bytes_total",
    Kind.COUNTER,
    "Bytes of the collectives' input tensors.",
    ("job_id", "rank", "op", "group"),
    unit="bytes",
)
NCCL_UNTIMED_CALLS_TOTAL = Family(
    "trainmon_nccl_untimed_calls_total",
    Kind.COUNTER,
    "Collective calls counted without a time of their own (async NCCL without TRAINMON_NCCL_TIMING, spans"
    " CUDA could not read): nccl_time covers the other calls.",
    ("job_id", "rank", "op", "group"),
)
NCCL_GROUP_SIZE = Family(
    "trainmon_nccl_group_size",
    Kind.GAUGE,
    "Ranks in the process group.",
    ("job_id", "rank", "group"),
)
NCCL_ISSUED_TOTAL = Family(
    "trainmon_nccl_issued_total",
    Kind.COUNTER,
    "Collectives this rank has issued on the group (its sequence number).",
    ("job_id", "rank", "group"),
)
NCCL_COMPLETED_TOTAL = Family(
    "trainmon_nccl_completed_total",
    Kind.COUNTER,
    "Collectives this rank has completed on the group.",
    ("job_id", "rank", "group"),
)
NCCL_INFLIGHT_OLDEST_SECONDS = Family(
    "trainmon_nccl_inflight_oldest_seconds",
    Kind.GAUGE,
    "Age of the oldest issued-but-not-completed collective on the group; absent when none.",
    ("job_id", "rank", "group", "op"),
    unit="seconds",
)
TRAIN_PG_TIMEOUT_SECONDS = Family(
    "trainmon_train_pg_timeout_seconds",
    Kind.GAUGE,
    "The process group's timeout (NCCL's watchdog ends the job after it); the hang alerts fire at half of"
    " it when that is earlier.",
    ("job_id", "rank", "group"),
    unit="seconds",
)
TRAIN_MFU_REPORTED_RATIO = Family(
    "trainmon_train_mfu_reported_ratio",
    Kind.GAUGE,
    "Model FLOPs utilisation as the framework itself reports it (verl perf/mfu/actor).",
    ("job_id", "rank"),
    unit="ratio",
)
RL_ACTOR_GRAD_NORM = Family(
    "trainmon_rl_actor_grad_norm",
    Kind.GAUGE,
    "Actor gradient norm of the last RL iteration, as the framework reports it (verl actor/grad_norm, the"
    " mean over its optimizer steps).",
    ("job_id", "rank"),
)
RL_REWARD_MEAN = Family(
    "trainmon_rl_reward_mean",
    Kind.GAUGE,
    "Mean sequence score of the last RL iteration (verl critic/score/mean).",
    ("job_id", "rank"),
)
RL_RESPONSE_LENGTH_MEAN = Family(
    "trainmon_rl_response_length_mean",
    Kind.GAUGE,
    "Mean response length in tokens of the last RL iteration (verl response_length/mean).",
    ("job_id", "rank"),
)
RL_RESPONSE_CLIP_RATIO = Family(
    "trainmon_rl_response_clip_ratio",
    Kind.GAUGE,
    "Share of the last RL iteration's responses cut at the maximum length (verl "
    "response_length/clip_ratio).",
    ("job_id", "rank"),
    unit="ratio",
)
RL_ABORTED_RATIO = Family(
    "trainmon_rl_aborted_ratio",
    Kind.GAUGE,
    "Share of the last RL iteration's rollouts aborted (verl response/aborted_ratio).",
    ("job_id", "rank"),
    unit="ratio",
)
TRAIN_PHASE = Family(
    "trainmon_train_phase",
    Kind.GAUGE,
    "1 while the rank is inside mon.phase(...).",
    ("job_id", "rank", "phase"),
)
TRAIN_NCCL_ENV_INFO = Family(
    "trainmon_train_nccl_env_info",
    Kind.INFO,
    "An NCCL_* or TORCH_NCCL_* variable set in the rank's environment.",
    ("job_id", "rank", "name", "value"),
)
TRAIN_PHASE_SECONDS_TOTAL = Family(
    "trainmon_train_phase_seconds_total",
    Kind.COUNTER,
    "Time spent inside mon.phase(...), per phase.",
    ("job_id", "rank", "phase"),
    unit="seconds",
)
TRAIN_HOOK_ERRORS_TOTAL = Family(
    "trainmon_train_hook_errors_total",
    Kind.COUNTER,
    "Errors the hook swallowed, by kind.",
    ("job_id", "rank", "kind"),
)
TRAIN_PARALLEL_INFO = Family(
    "trainmon_train_parallel_info",
    Kind.INFO,
    "The job's parallel layout; unknown dimensions are empty.",
    ("job_id", "rank", "tp", "pp", "dp", "cp", "ep", "micro_batch", "global_batch"),
)

FAMILIES: tuple[Family, ...] = (
    TRAIN_RANK_INFO,
    TRAIN_RANK_EXITED,
    TRAIN_STEPS_TOTAL,
    TRAIN_SAMPLES_TOTAL,
    TRAIN_TOKENS_TOTAL,
    TRAIN_MICROBATCHES_TOTAL,
    TRAIN_PIPELINE_STAGE,
    TRAIN_LAST_STEP_TIMESTAMP_SECONDS,
    TRAIN_PROCESS_START_TIMESTAMP_SECONDS,
    TRAIN_FIRST_STEP_TIMESTAMP_SECONDS,
    TRAIN_MODEL_FLOPS_TOTAL,
    TRAIN_COMM_WAIT_SECONDS_TOTAL,
    TRAIN_DATALOADER_WAIT_SECONDS_TOTAL,
    TRAIN_LOSS_SCALE,
    TRAIN_SKIPPED_STEPS_TOTAL,
    TRAIN_LOSS,
    TRAIN_GRAD_NORM,
    TRAIN_LOSS_MAX,
    TRAIN_GRAD_NORM_MAX,
    TRAIN_LOSS_SPIKES_TOTAL,
    TRAIN_GRAD_NORM_SPIKES_TOTAL,
    TRAIN_NONFINITE_LOSS_TOTAL,
    TRAIN_CUDA_ALLOC_RETRIES_TOTAL,
    TRAIN_CUDA_OOMS_TOTAL,
    TRAIN_COLLECTIVES_CAPTURED_TOTAL,
    INGEST_MESSAGES_TOTAL,
    INGEST_COALESCED_TOTAL,
    INGEST_REJECTED_TOTAL,
    INGEST_RANKS,
    INGEST_EVICTED_TOTAL,
    TRAIN_RANK_EXITS_TOTAL,
    INGEST_SOCKET_REBINDS_TOTAL,
    TRAIN_HANG_SUSPECTED,
    TRAIN_HANG_LOCATION,
    TRAIN_STACK_INFO,
    TRAIN_STEP_DURATION_SECONDS,
    NCCL_TIME_SECONDS_TOTAL,
    NCCL_CALLS_TOTAL,
    NCCL_BYTES_TOTAL,
    NCCL_UNTIMED_CALLS_TOTAL,
    NCCL_GROUP_SIZE,
    NCCL_ISSUED_TOTAL,
    NCCL_COMPLETED_TOTAL,
    NCCL_INFLIGHT_OLDEST_SECONDS,
    TRAIN_PG_TIMEOUT_SECONDS,
    TRAIN_MFU_REPORTED_RATIO,
    RL_ACTOR_GRAD_NORM,
    RL_REWARD_MEAN,
    RL_RESPONSE_LENGTH_MEAN,
    RL_RESPONSE_CLIP_RATIO,
    RL_ABORTED_RATIO,
    TRAIN_PHASE,
    TRAIN_NCCL_ENV_INFO,
    TRAIN_PHASE_SECONDS_TOTAL,
    TRAIN_HOOK_ERRORS_TOTAL,
    TRAIN_PARALLEL_INFO,
)
