"""Training numerics and slow-downs: loss and grad-norm spikes, divergence, throughput drift, slow ranks.

The hook counts spikes per rank (SPEC §5), so the rules read counters, never every step's value. A
job's throughput is judged per second of training time (step time plus data wait): checkpoints and
evaluations inside `mon.phase(...)` then cost nothing, and the job is compared with its own best
hour. A slow rank is found by a robust z-score over the job's ranks (Iglewicz-Hoaglin: 0.6745 x the
distance from the median over the median absolute deviation), one `quantile` per job twice: linear in
ranks, no rank-by-rank join.
"""

from __future__ import annotations

from dataclasses import dataclass

from bundle.links import LinkedPanel

from bundle import links
from trainmon.catalog import training

from .config import RulesConfig
from .dashboards import panel_url
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
STRAGGLER_CAUSE = "rank:trainmon_train_straggler_cause:share"  # straggler_causes.py records it
# The sentence a slow-rank alert adds on the rank's cause; none while the record has no cause for it. An annotation,
# not a label: a label that changed as the 5-minute rates settle would restart the alert's `for:`.
STRAGGLER_CAUSE_SENTENCE = (
    f'{{{{ with printf `{STRAGGLER_CAUSE}{{job="%s",job_id="%s",rank="%s"}}` $labels.job $labels.job_id $labels.rank '
    '| query }} Likely cause: {{ . | first | label "straggler_cause" }}.{{ end }}')
# (alert, the hook's counter, what spiked, the hook's rule)
SPIKE_ALERTS = (
    ("TrainmonGradNormSpike", training.TRAIN_GRAD_NORM_SPIKES_TOTAL, "gradient norm",
     "over 10x the median of its last 100 steps"),
    ("TrainmonLossSpike", training.TRAIN_LOSS_SPIKES_TOTAL, "loss", "over 2x the mean of its last 100 steps"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RankEvent:
    """A numeric event each rank reports: one alert per job when most of its ranks have it, else one per rank.

    `condition` is the per-rank series (recorded as `record`), `reporting` the series whose ranks could have it.
    """

    alert: str
    record: str
    condition: str
    reporting: str
    what: str  # what the ranks did, after "ranks of job X" ("counted loss spikes")
    when: str  # the rest of the description's sentence ("in the last 10 minutes")
    panel: LinkedPanel
    for_: str = "0s"

    @property
    def ranks(self) -> str:
        """The recorded count of the job's ranks that report the event's series."""
        return f"job_id:{self.record.split(':')[1]}_ranks:count"


def spike_events(c: RulesConfig) -> list[RankEvent]:
    return [RankEvent(
        alert=alert, record=f"rank:{counter.name.removesuffix('_total')}:increase10m",
        condition=f"increase({c.m(counter)}[10m]) > 0", reporting=c.m(counter),
        what=f"counted {what} spikes", when=f"({rule}) in the last 10 minutes", panel=links.LOSS_AND_GRAD_NORM_SPIKES,
    ) for alert, counter, what, rule in SPIKE_ALERTS]


def nonfinite_event(c: RulesConfig) -> RankEvent:
    nonfinite = c.m(training.TRAIN_NONFINITE_LOSS_TOTAL)
    return RankEvent(
        alert="TrainmonLossNonFinite", record="rank:trainmon_train_nonfinite_loss:rising10m",
        condition=rising(nonfinite, "10m"), reporting=nonfinite,
        what="reported a NaN or infinite loss", when="in the last 10 minutes", panel=links.SKIPPED_AND_NON_FINITE_STEPS,
    )


def loss_scale_event(c: RulesConfig) -> RankEvent:
    """The gauge exists only where a loss scaler does (bf16 runs have none)."""
    scale = c.m(training.TRAIN_LOSS_SCALE)
    no_scaler = c.m(training.TRAIN_RANK_INFO, 'loss_scaler="none"')
    return RankEvent(
        alert="TrainmonLossScaleCollapse", record="rank:trainmon_train_loss_scale:collapsed",
        condition=f"""
  {scale}
<=
  clamp_min(max_over_time({scale}[1h]) / 1024, 1)
unless {ON_RANK}
  {no_scaler}""",
        reporting=f"{scale} unless {ON_RANK} {no_scaler}",
        what="had the loss scale collapse",
        when="(to 1/1,024 of the hour's highest, for 5 minutes): gradients keep overflowing and steps are skipped",
        panel=links.LOSS_SCALE, for_="5m",
    )


def rising(series: str, window: str) -> str:
    """A counter that grew within `window`, or that appeared within it already above zero."""
    return f"""(
  increase({series}[{window}]) > 0
or
  ({series} > 0 unless {series} offset {window})
)"""


def rank_event_records(events: list[RankEvent]) -> list[Record]:
    return [record for e in events for record in (
        Record(record=e.record, expr=e.condition),
        Record(record=e.ranks, expr=f"count without ({RANK_LABELS}) ({e.reporting})"),
    )]


def _job_wide(c: RulesConfig, e: RankEvent) -> str:
    return f"count without ({RANK_LABELS}) ({e.record}) > {c.numerics_job_wide_ratio:g} * {e.ranks}"


def _first_ranks(series: str) -> str:
    """Template: the first three ranks (by name) of the alert's job that have `series`."""
    query = f'printf `{series}{{job="%s",job_id="%s"}}` $labels.job $labels.job_id | query | sortByLabel "rank"'
    return (f"{{{{ range $i, $s := {query} }}}}{{{{ if lt $i 3 }}}}{{{{ if $i }}}},{{{{ end }}}} "
            "rank {{ $s.Labels.rank }} ({{ $s.Labels.instance }}){{ end }}{{ end }}")


def rank_event_alerts(c: RulesConfig, e: RankEvent) -> list[Alert]:
    """Job-wide: one alert with the count and the first ranks; on a few ranks only: each rank, a suspect GPU."""
    ranks = (f'{{{{ with printf `{e.ranks}{{job="%s",job_id="%s"}}` $labels.job $labels.job_id | query }}}}'
             "{{ . | first | value }}{{ end }}")
    return [
        Alert(
            alert=e.alert,
            expr=_job_wide(c, e),
            for_=e.for_,
            severity="warning",
            labels=(("scope", "job"),),
            summary=f"Most ranks of a training job {e.what}.",
            dashboard_url=panel_url(c, e.panel),
            description=(
                f"{{{{ $value }}}} of {ranks} ranks of job {{{{ $labels.job_id }}}} {e.what} {e.when}; first:"
                f"{_first_ranks(e.record)}. On most ranks at once it is the run's numerics (data, learning "
                "rate, precision), not one GPU: run `trainmon diagnose`."
            ),
        ),
        Alert(
            alert=e.alert,
            expr=f"\n  {e.record}\nunless {ON_JOB}\n  {_job_wide(c, e)}",
            for_=e.for_,
            severity="warning",
            labels=(("scope", "rank"),),
            summary=f"A few ranks of a training job {e.what}.",
            dashboard_url=panel_url(c, e.panel),
            description=(
                f"Rank {{{{ $labels.rank }}}} of job {{{{ $labels.job_id }}}} on {{{{ $labels.instance }}}} {e.what} "
                f"{e.when}; most of its peers did not. Suspect silent data corruption on its GPU: drain the node "
                "and run `trainmon diagnose` and `dcgmi diag -r 3` on it."
            ),
        ),
    ]


def _in_phase(c: RulesConfig, on: str) -> str:
    return f"unless {on} {c.m(training.TRAIN_PHASE)} == 1"


def numerics_group(c: RulesConfig) -> Group:
    """The job's loss (finite values of ranks outside a phase) and its spikes; throughput per training second."""
    loss = c.m(training.TRAIN_LOSS)
    return Group(name="trainmon.numerics.rules", rules=[
        Record(record=LOSS, expr=f"avg without ({RANK_LABELS}) (({loss} > -Inf < +Inf) {_in_phase(c, ON_RANK)})"),
        Record(record=LOSS_30M, expr=f"avg_over_time({LOSS}[30m])"),
        # The most loss spikes any one rank counted in 30 minutes (a spike of a data-parallel job shows
        # on every rank: summing them would count one spike world-size times).
        Record(record=LOSS_SPIKES,
               expr=f"max without ({RANK_LABELS}) (increase({c.m(training.TRAIN_LOSS_SPIKES_TOTAL)}[30m]))"),
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
        *rank_event_records([*spike_events(c), nonfinite_event(c)]),
    ])


def loss_scale_group(c: RulesConfig) -> Group:
    """Each rank's loss scale against its own hour: 8,000 ranks' hour of samples at 1,000 nodes, the costliest
    read of any rule, for a condition that develops over minutes (the alert waits 5 of them): every minute."""
    return Group(name="trainmon.loss_scale.rules", interval="1m", rules=rank_event_records([loss_scale_event(c)]))


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
    first_step = c.m(training.TRAIN_FIRST_STEP_TIMESTAMP_SECONDS)
    return [
        *(a for e in spike_events(c) for a in rank_event_alerts(c, e)),
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
            dashboard_url=panel_url(c, links.LOSS),
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
            dashboard_url=panel_url(c, links.SAMPLES_PER_SECOND),
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
            # Not suspended in a phase: a rank's compute per step is the same over a 5-minute window that holds an
            # evaluation, and a pending alert restarted by each one would go quiet while the GPU is still slow.
            expr=f"""
(
    {ZSCORE} > {c.slow_rank_zscore:g}
  and {ON_RANK}
    {PER_STEP} / (1 + {c.slow_rank_excess_ratio}) > {ON_JOB} group_left {MEDIAN}
)
* {ON_RANK} group_left (uuid)
  rank:trainmon_train_rank_info:max""",
            for_="15m",
            severity="warning",
            summary="One rank computes slower than its peers.",
            dashboard_url=panel_url(c, links.COMPUTE_TIME_PER_STEP_BY_RANK),
            description=(
                "Rank {{ $labels.rank }} of job {{ $labels.job_id }} on {{ $labels.instance }} (GPU "
                "{{ $labels.uuid }}) takes longer to compute a step than its peers (robust z-score over "
                f"{c.slow_rank_zscore:g} and over {c.slow_rank_excess_ratio:.0%} above the median rank)."
                f"{STRAGGLER_CAUSE_SENTENCE} Run `trainmon diagnose` on the node."
            ),
        ),
    ]
