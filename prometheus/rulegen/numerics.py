"""Training numerics and slow-downs: loss and grad-norm spikes, divergence, throughput drift, slow ranks.

The hook counts spikes per rank (SPEC §5), so the rules read counters, never every step's value. A
job's throughput is judged per second of training time (step time plus data wait): checkpoints and
evaluations inside `mon.phase(...)` then cost nothing, and the job is compared with its own best
hour. A slow rank is found by a robust z-score over the job's ranks (Iglewicz-Hoaglin: 0.6745 x the
distance from the median over the median absolute deviation), one `quantile` per job twice: linear in
ranks, no rank-by-rank join.
"""

from __future__ import annotations

from .config import RulesConfig
from .dashboards import TRAINING_JOB, panel_url
from .model import Alert, Group, Record

ON_JOB = "on (job, job_id)"
ON_RANK = "on (instance, job, job_id, rank)"
RANK_LABELS = "instance, rank"
LOSS = "job_id:trainmon_train_loss:avg"
LOSS_30M = "job_id:trainmon_train_loss:avg30m"
LOSS_SPIKES = "job_id:trainmon_train_loss_spikes:max_increase30m"
THROUGHPUT = "job_id:trainmon_train_steps_per_training_second:rate5m"
THROUGHPUT_1H = "job_id:trainmon_train_steps_per_training_second:avg1h"
THROUGHPUT_BEST = "job_id:trainmon_train_steps_per_training_second:best1h"
PER_STEP = "rank:trainmon_train_compute_seconds_per_step:mean5m"
MEDIAN = "job_id:trainmon_train_compute_seconds_per_step:median"
DEVIATION = "rank:trainmon_train_compute_seconds_per_step:deviation"
MAD = "job_id:trainmon_train_compute_seconds_per_step:mad"
ZSCORE = "rank:trainmon_train_compute_seconds_per_step:zscore"
# (alert, the hook's counter, what spiked, the hook's rule)
SPIKE_ALERTS = (
    ("TrainmonGradNormSpike", "trainmon_train_grad_norm_spikes_total", "gradient norm",
     "over 10x the median of its last 100 steps"),
    ("TrainmonLossSpike", "trainmon_train_loss_spikes_total", "loss", "over 2x the mean of its last 100 steps"),
)


def _in_phase(c: RulesConfig, on: str) -> str:
    return f"unless {on} {c.m('trainmon_train_phase')} == 1"


def numerics_group(c: RulesConfig) -> Group:
    """The job's loss (finite values of ranks outside a phase) and its spikes; throughput per training second."""
    loss = c.m("trainmon_train_loss")
    return Group(name="trainmon.numerics.rules", rules=[
        Record(record=LOSS, expr=f"avg without ({RANK_LABELS}) (({loss} > -Inf < +Inf) {_in_phase(c, ON_RANK)})"),
        Record(record=LOSS_30M, expr=f"avg_over_time({LOSS}[30m])"),
        # The most loss spikes any one rank counted in 30 minutes (a spike of a data-parallel job shows
        # on every rank: summing them would count one spike world-size times).
        Record(record=LOSS_SPIKES,
               expr=f"max without ({RANK_LABELS}) (increase({c.m('trainmon_train_loss_spikes_total')}[30m]))"),
        Record(record=THROUGHPUT, expr=f"""
  sum without ({RANK_LABELS}) (rank:trainmon_train_step_duration_seconds_count:rate5m)
/
  (
      sum without ({RANK_LABELS}) (rank:trainmon_train_step_duration_seconds_sum:rate5m)
    + sum without ({RANK_LABELS}) (rank:trainmon_train_dataloader_wait_seconds:rate5m)
  )"""),
        # Only a job that has run for an hour has an hourly mean: a new job is not its own baseline yet.
        Record(record=THROUGHPUT_1H, expr=f"avg_over_time({THROUGHPUT}[1h]) and {ON_JOB} ({THROUGHPUT} offset 55m)"),
        Record(record=THROUGHPUT_BEST, expr=f"max_over_time({THROUGHPUT_1H}[{c.throughput_drift_lookback}])"),
    ])


def slow_rank_records(c: RulesConfig) -> list[Record]:
    """The robust z-score of each rank's compute time per step (after `PER_STEP` in the stragglers group)."""
    floor = f"{c.slow_rank_mad_floor_ratio} * {MEDIAN}"
    return [
        Record(record=MEDIAN, expr=f"quantile without ({RANK_LABELS}) (0.5, {PER_STEP})"),
        Record(record=DEVIATION, expr=f"abs({PER_STEP} - {ON_JOB} group_left {MEDIAN})"),
        Record(record=MAD, expr=f"quantile without ({RANK_LABELS}) (0.5, {DEVIATION})"),
        # A job whose ranks are all but identical has a MAD near 0: it is floored, so noise is no outlier.
        Record(record=ZSCORE, expr=f"""
  0.6745 * ({PER_STEP} - {ON_JOB} group_left {MEDIAN})
/ {ON_JOB} group_left ()
  ({MAD} > {floor} or {floor})"""),
    ]


def numerics_alerts(c: RulesConfig) -> list[Alert]:
    first_step = c.m("trainmon_train_first_step_timestamp_seconds")
    return [
        *(Alert(
            alert=alert,
            expr=f"increase({c.m(counter)}[10m]) > 0",
            severity="warning",
            summary=f"A training rank's {what} spiked.",
            dashboard_url=panel_url(c, TRAINING_JOB, "Loss and grad-norm spikes"),
            description=(
                "Rank {{ $labels.rank }} of job {{ $labels.job_id }} on {{ $labels.instance }} counted "
                f"{what} spikes in the last 10 minutes ({rule}). Run `trainmon diagnose` on the node: a "
                "spike on one rank only suggests silent data corruption on its GPU."
            ),
        ) for alert, counter, what, rule in SPIKE_ALERTS),
        Alert(
            alert="TrainmonLossDiverging",
            expr=f"""
(
    {LOSS_30M} > {c.loss_diverging_ratio} * ({LOSS_30M} offset 30m)
  or
    {LOSS_SPIKES} > {c.loss_spike_patience}
)
and {ON_JOB}
  time() - min without ({RANK_LABELS}) ({first_step}) > {c.warmup_seconds}
{_in_phase(c, ON_JOB)}""",
            for_="5m",
            severity="warning",
            summary="A training job's loss is rising.",
            dashboard_url=panel_url(c, TRAINING_JOB, "Loss"),
            description=(
                "Job {{ $labels.job_id }}: its mean loss of the last 30 minutes is "
                f"over {c.loss_diverging_ratio:g}x the 30 minutes before, or one rank counted more than "
                f"{c.loss_spike_patience} loss spikes in 30 minutes."
            ),
        ),
        Alert(
            alert="TrainmonThroughputDrift",
            expr=f"{THROUGHPUT} < (1 - {c.throughput_drift_ratio}) * {THROUGHPUT_BEST}",
            for_="30m",  # alert_for overrides it, as every alert's
            severity="warning",
            summary="A training job runs slower than its own best hour.",
            dashboard_url=panel_url(c, TRAINING_JOB, "Samples per second"),
            description=(
                "Job {{ $labels.job_id }} runs "
                f"at least {c.throughput_drift_ratio:.0%} under its best hourly mean of the last "
                f"{c.throughput_drift_lookback} (steps per second of training time, phases excluded), "
                "for 30 minutes or the alert's configured `for:`. Look for "
                "TrainmonSlowRank and run `trainmon diagnose`."
            ),
        ),
        Alert(
            alert="TrainmonSlowRank",
            expr=f"""
(
    {ZSCORE} > {c.slow_rank_zscore:g}
  and {ON_RANK}
    {PER_STEP} / (1 + {c.slow_rank_excess_ratio}) > {ON_JOB} group_left {MEDIAN}
  {_in_phase(c, ON_RANK)}
)
* {ON_RANK} group_left (uuid)
  rank:trainmon_train_rank_info:max""",
            for_="15m",
            severity="warning",
            summary="One rank computes slower than its peers.",
            dashboard_url=panel_url(c, TRAINING_JOB, "Compute time per step by rank"),
            description=(
                "Rank {{ $labels.rank }} of job {{ $labels.job_id }} on {{ $labels.instance }} (GPU "
                "{{ $labels.uuid }}) takes longer to compute a step than its peers (robust z-score over "
                f"{c.slow_rank_zscore:g} and over {c.slow_rank_excess_ratio:.0%} above the median rank). "
                "Run `trainmon diagnose` on the node."
            ),
        ),
    ]
