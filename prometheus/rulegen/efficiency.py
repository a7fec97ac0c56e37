"""Efficiency recording rules: MFU, energy per token, where each job's time goes, straggler scores.

Kept apart from `recording.py` (other rule families grow there). Per-rank values are seconds per
second of wall time, so a job's shares are its live ranks' sums over the ranks it should have (a
rank that is gone still has a 5-minute rate for a while: only live ranks count).
"""

from __future__ import annotations

from trainmon.catalog import gpu, training

from .config import RulesConfig
from .model import Group, Record
from .numerics import slow_rank_records
from .straggler_causes import straggler_cause_records

ON_RANK = "on (instance, job, job_id, rank)"
ON_JOB = "on (job, job_id)"
RANK_LABELS = "instance, rank"
COMPUTE = "rank:trainmon_train_compute_seconds:rate5m"
EXPECTED = "job_id:trainmon_train_ranks:expected"
# (category, per-rank seconds-per-second series) of the job's wall-time split; `phase` keeps its label.
CATEGORIES = (
    ("compute", COMPUTE),
    ("communication", "rank:trainmon_train_comm_wait_seconds:rate5m"),
    ("data_loading", "rank:trainmon_train_dataloader_wait_seconds:rate5m"),
    ("phase", "rank:trainmon_train_phase_seconds:rate5m"),
    ("stalled", "rank:trainmon_train_stalled:bool"),
    ("startup", "rank:trainmon_train_startup_seconds:rate5m"),
)
TIME_SHARE = "job_id_category:trainmon_train_time:ratio"


def _mfu(c: RulesConfig) -> list[Record]:
    peak = c.m(gpu.GPU_PEAK_FLOPS, f'dtype="{c.mfu_dtype}"')
    flops = "rank:trainmon_train_model_flops:rate5m"
    joined = "rank:trainmon_gpu_peak_flops:join"
    with_peak = f"sum without ({RANK_LABELS}) ({flops} and {ON_RANK} {joined})"
    return [
        Record(record=flops, expr=f"rate({c.m(training.TRAIN_MODEL_FLOPS_TOTAL)}[5m])"),
        Record(record=joined, expr=f"""
  max without (dtype) ({peak})
* on (instance, uuid) group_right (gpu)
  rank:trainmon_train_rank_info:max"""),
        Record(record="rank:trainmon_train_mfu:ratio", expr=f"{flops} / {ON_RANK} {joined}"),
        Record(record="job_id:trainmon_train_model_flops:rate5m", expr=f"sum without ({RANK_LABELS}) ({flops})"),
        # Ranks whose GPU has no known peak count in neither sum: MFU is never guessed.
        Record(record="job_id:trainmon_train_mfu:ratio", expr=f"""
  {with_peak}
/
  sum without ({RANK_LABELS}, gpu, uuid) ({joined} and {ON_RANK} {flops})"""),
    ]


def _energy(c: RulesConfig) -> list[Record]:
    # The energy of the ranks' GPUs, summed per job straight away: no panel reads it per rank.
    return [
        Record(record="job_id:trainmon_train_joules_per_token:ratio", expr=f"""
  sum without (instance, rank, gpu, uuid) (
      rate({c.m(gpu.GPU_ENERGY_JOULES_TOTAL)}[5m])
    * on (instance, uuid) group_right (gpu)
      rank:trainmon_train_rank_info:max
  )
/
  job_id:trainmon_train_tokens:rate5m"""),
    ]


def _rank_states(c: RulesConfig) -> list[Record]:
    start = c.m(training.TRAIN_PROCESS_START_TIMESTAMP_SECONDS)
    first = c.m(training.TRAIN_FIRST_STEP_TIMESTAMP_SECONDS)
    return [
        Record(record="rank:trainmon_train_phase_seconds:rate5m",
               expr=f"rate({c.m(training.TRAIN_PHASE_SECONDS_TOTAL)}[5m])"),
        # The part of the last 5 minutes between process start and first step (now, before it).
        Record(record="rank:trainmon_train_startup_seconds:rate5m", expr=f"""
clamp(
    clamp_max({first} or {start} * 0 + time(), time())
  - clamp_min({start}, time() - 300),
  0, 300
) / 300"""),
        # Live, started, out of any phase, and no step finished in 5 minutes.
        Record(record="rank:trainmon_train_stalled:bool", expr=f"""
(rank:trainmon_train_steps:rate5m == bool 0)
and {ON_RANK} {first}
unless {ON_RANK} {c.m(training.TRAIN_PHASE)} == 1"""),
    ]


def _time_split(c: RulesConfig) -> list[Record]:
    ranks = "job_id:trainmon_train_ranks:count"
    exits = c.m(training.TRAIN_RANK_EXITS_TOTAL, 'reason="clean"')
    clean_exits = f"sum without (instance, reason) (max_over_time({exits}[1h]))"
    records = [
        # The ranks the job had at its largest in the last hour: a restart under the same job id
        # leaves the gone ranks' time as `absent` rather than shrinking the job.
        Record(record=EXPECTED, expr=f"max_over_time({ranks}[1h])"),
        Record(record="job_id:trainmon_train_ranks_absent:count", expr=f"""
  {EXPECTED} - ({ranks} or {EXPECTED} * 0)
unless {ON_JOB}
  ({clean_exits} >= {ON_JOB} {EXPECTED})"""),
    ]
    shares = [f"""
label_replace(
  sum without ({RANK_LABELS}) ({series} and {ON_RANK} rank:trainmon_train_rank_info:max)
/ {ON_JOB} group_left
  {EXPECTED},
  "category", "{category}", "", ""
)""" for category, series in CATEGORIES]
    shares.append(f"""
label_replace(
  job_id:trainmon_train_ranks_absent:count / {EXPECTED},
  "category", "absent", "", ""
)""")
    records.append(Record(record=TIME_SHARE, expr="\nor".join(shares)))
    records += [
        Record(record="job_id:trainmon_train_goodput:ratio",
               expr=f'max without (category) ({TIME_SHARE}{{category="compute"}})'),
        Record(record="job_id:trainmon_train_badput:ratio",
               expr=f'sum without (category, phase) ({TIME_SHARE}{{category!="compute"}})'),
    ]
    return records


def _straggler_scores(c: RulesConfig) -> list[Record]:
    per_step = "rank:trainmon_train_compute_seconds_per_step:mean5m"
    outside = "rank:trainmon_train_compute_outside_phases_seconds_per_step:mean5m"
    steps = "(rank:trainmon_train_step_duration_seconds_count:rate5m > 0)"
    return [
        # Compute per step, not per second of wall time: a rank that waits for data computes fewer seconds
        # per second without computing any slower, and must not make every other rank look slow.
        Record(record=per_step, expr=f"{COMPUTE} / {steps}"),
        # The same with the communication wait inside phases taken off (a barrier while rank 0 checkpoints).
        Record(record=outside, expr=f"""
clamp_min(
    rank:trainmon_train_step_duration_seconds_sum:rate5m
  - rank:trainmon_train_comm_wait_outside_phases_seconds:rate5m
  - rank:trainmon_train_dataloader_wait_seconds:rate5m,
  0
)
/ {steps}"""),
        # 1 for the job's fastest rank; 0.5 computes twice as long per step (nvidia-resiliency-ext's scores). A
        # rank whose data wait swallows its step time reads no compute at all: it is not the fastest.
        Record(record="rank:trainmon_train_straggler_score:relative", expr=f"""
  min without ({RANK_LABELS}) ({outside} > 0)
/ {ON_JOB} group_right
  {outside}"""),
        # The rank against its own best over the longer window.
        Record(record="rank:trainmon_train_straggler_score:individual",
               expr=f"min_over_time({per_step}[{c.straggler_individual_window}]) / {per_step}"),
    ]


def efficiency_groups(c: RulesConfig) -> list[Group]:
    """Three groups that evaluate side by side: at 1,000 nodes each reads 8,000 ranks' series, and one
    group's rules run one after another."""
    return [
        Group(name="trainmon.mfu.rules", rules=[*_mfu(c), *_energy(c)]),
        Group(name="trainmon.goodput.rules", rules=[*_rank_states(c), *_time_split(c)]),
        Group(name="trainmon.stragglers.rules",
              rules=[*_straggler_scores(c), *slow_rank_records(c), *straggler_cause_records(c)]),
    ]
