"""Why a straggler is slow, and what the job would gain without it (after the straggler scores and slow-rank rules).

ByteDance's what-if analysis of its training fleet (OSDI '25) found many stragglers are not a slow GPU: a last
pipeline stage given too many layers, or ranks given more tokens than their peers (packing, RL rollouts). A rank
the straggler or slow-rank rules flag computes `e` times the job's median rank per step (`EXCESS` = ln e); that
factor is the product of its stage's, its tokens' and its time per token's, so their logarithms split `EXCESS`
into shares that add up. A cause is named only when its share is at least `straggler_cause_share` (most of the
excess, traceml's rule), in this order:

- `pipeline_stage`: the fastest rank of its pipeline stage is that much slower too (a stage of one rank cannot
  tell a slow stage from a slow GPU and is never named);
- `data_imbalance`: it processed more real tokens per step than the median rank;
- `hardware`: the same tokens, more time per token;
- `unknown`: none of them explains most of it (or the hook reports no tokens).
"""

from __future__ import annotations

from trainmon.catalog import training

from .config import RulesConfig
from .model import Record
from .numerics import MEDIAN, ON_JOB, ON_RANK, PER_STEP, RANK_LABELS, STRAGGLER_CAUSE, ZSCORE

TOKENS = "rank:trainmon_train_tokens_per_step:mean5m"
TOKENS_MEDIAN = "job_id:trainmon_train_tokens_per_step:median"
PER_TOKEN = "rank:trainmon_train_compute_seconds_per_token:mean5m"
PER_TOKEN_MEDIAN = "job_id:trainmon_train_compute_seconds_per_token:median"
STAGE = "rank:trainmon_train_pipeline_stage:label"
STAGE_COMPUTE = "job_id_stage:trainmon_train_compute_seconds_per_step:min"
EXCESS = "rank:trainmon_train_compute_seconds_per_step:log_excess"
CAUSE = STRAGGLER_CAUSE
RECOVERABLE = "job_id:trainmon_train_straggler_recoverable:ratio"
STEPS = "(rank:trainmon_train_step_duration_seconds_count:rate5m > 0)"
ON_STAGE = "on (job, job_id, stage)"


def _share(cause: str, log_ratio: str, c: RulesConfig) -> str:
    """The ranks whose `EXCESS` this cause (the log of a ratio against the median) explains enough of, labelled."""
    return f"""label_replace(
    clamp_max(({log_ratio}) / {ON_RANK} group_left {EXCESS}, 1) >= {c.straggler_cause_share:g},
    "straggler_cause", "{cause}", "", ""
  )"""


def straggler_cause_records(c: RulesConfig) -> list[Record]:
    flagged = f"""(
      {ZSCORE} > {c.slow_rank_zscore:g}
    and {ON_RANK}
      {PER_STEP} / (1 + {c.slow_rank_excess_ratio}) > {ON_JOB} group_left {MEDIAN}
  or {ON_RANK}
    rank:trainmon_train_straggler_score:relative < {c.straggler_score_threshold}
  )"""
    staged = f"{PER_STEP} * {ON_RANK} group_left (stage) {STAGE}"
    stage_of_rank = f"{STAGE} * {ON_STAGE} group_left {STAGE_COMPUTE}"
    return [
        Record(record=TOKENS, expr=f"(rate({c.m(training.TRAIN_TOKENS_TOTAL)}[5m]) > 0) / {STEPS}"),
        Record(record=TOKENS_MEDIAN, expr=f"quantile without ({RANK_LABELS}) (0.5, {TOKENS})"),
        Record(record=PER_TOKEN, expr=f"{PER_STEP} / {TOKENS}"),
        Record(record=PER_TOKEN_MEDIAN, expr=f"quantile without ({RANK_LABELS}) (0.5, {PER_TOKEN})"),
        # The stage number as a label (count_values keeps every other label with `without ()`).
        Record(record=STAGE, expr=f'count_values without () ("stage", {c.m(training.TRAIN_PIPELINE_STAGE)})'),
        Record(record=STAGE_COMPUTE, expr=f"""
  min without ({RANK_LABELS}) ({staged})
and {ON_STAGE}
  count without ({RANK_LABELS}) ({staged}) > 1"""),
        # ln of a flagged rank's compute per step over the median rank's: what the causes split between them.
        Record(record=EXCESS, expr=f"""
  ln({PER_STEP} / {ON_JOB} group_left {MEDIAN}) > 0
and {ON_RANK}
  {flagged}"""),
        # The share of the excess its cause explains (at most 1); 0 for `unknown`. One cause per rank: the first.
        Record(record=CAUSE, expr=f"""
  {_share("pipeline_stage", f"ln({stage_of_rank} / {ON_JOB} group_left {MEDIAN})", c)}
or {ON_RANK}
  {_share("data_imbalance", f"ln({TOKENS} / {ON_JOB} group_left {TOKENS_MEDIAN})", c)}
or {ON_RANK}
  {_share("hardware", f"ln({PER_TOKEN} / {ON_JOB} group_left {PER_TOKEN_MEDIAN})", c)}
or {ON_RANK}
  label_replace({EXCESS} * 0, "straggler_cause", "unknown", "", "")"""),
        # The share of the job's step time it would save if its slowest rank computed like its median one (every
        # rank steps at the slowest one's pace): the what-if figure, per step.
        Record(record=RECOVERABLE, expr=f"""
clamp(
    (max without ({RANK_LABELS}) ({PER_STEP}) - {MEDIAN})
  / quantile without ({RANK_LABELS}) (0.5, rank:trainmon_train_step_duration_seconds:mean5m),
  0, 1
)"""),
    ]
