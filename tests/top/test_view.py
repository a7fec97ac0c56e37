"""What `trainmon top` makes of the daemon's series: an exited rank, still served, is neither running nor stalled."""

from __future__ import annotations

from trainmon.top.view import build_view, parse_read


def metrics(collected_at: float, steps: int) -> str:
    """Job `train` rank 0 stepping (`steps` so far); its one-step smoke test exited long ago, still served."""
    return f"""\
# TYPE trainmon_collector_last_success_timestamp_seconds gauge
trainmon_collector_last_success_timestamp_seconds{{collector="training"}} {collected_at}
# TYPE trainmon_train_rank_info gauge
trainmon_train_rank_info{{job_id="train",rank="0",uuid="GPU-0"}} 1
trainmon_train_rank_info{{job_id="train-smoke",rank="0",uuid="GPU-0"}} 1
# TYPE trainmon_train_rank_exited gauge
trainmon_train_rank_exited{{job_id="train-smoke",rank="0"}} 1
# TYPE trainmon_train_steps counter
trainmon_train_steps_total{{job_id="train",rank="0"}} {steps}
trainmon_train_steps_total{{job_id="train-smoke",rank="0"}} 1
# TYPE trainmon_train_last_step_timestamp_seconds gauge
trainmon_train_last_step_timestamp_seconds{{job_id="train",rank="0"}} {collected_at}
trainmon_train_last_step_timestamp_seconds{{job_id="train-smoke",rank="0"}} 1000
# TYPE trainmon_train_loss gauge
trainmon_train_loss{{job_id="train",rank="0"}} 2.5
trainmon_train_loss{{job_id="train-smoke",rank="0"}} 4.0
"""


def test_an_exited_rank_is_listed_as_exited_without_rates_and_is_not_failing() -> None:
    before = parse_read(metrics(5000.0, 100), {}, 5000.0)
    now = parse_read(metrics(5010.0, 110), {}, 5010.0)

    view = build_view(now, before)

    rows = {r.job_id: r for r in view.ranks}
    assert ("-", 1.0, 2.5) == (rows["train"].phase, rows["train"].steps_per_second, rows["train"].loss)
    assert ("exited", None, 4.0) == (rows["train-smoke"].phase, rows["train-smoke"].steps_per_second,
                                     rows["train-smoke"].loss)
    assert () == view.failing  # its last step 4,000 s old is no stall
