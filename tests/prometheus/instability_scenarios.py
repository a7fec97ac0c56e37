"""Writes prometheus/tests/instability.test.yml: 64-rank training jobs, healthy and with planted faults.

    python -m tests.prometheus.instability_scenarios

Each job is simulated minute by minute as the hook reports it: a synchronous job's step takes its
slowest rank's compute plus the exposed communication, every other rank waits the difference in
collectives (comm wait), data waits add up between steps, and checkpoints and evaluations run inside
`mon.phase(...)`. The healthy case (6 hours, a restart under a new job id, a 1-rank job beside it)
must stay silent; each planted fault must fire its alert in the time docs/runbook.md promises.
tests/prometheus/test_instability.py checks that the committed file is this script's output.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.prometheus.rulefiles import CAUSES_TESTS, INSTABILITY_TESTS, alert_rules, group_names

ALERTS = ("TrainmonGradNormSpike", "TrainmonLossSpike", "TrainmonLossDiverging", "TrainmonThroughputDrift",
          "TrainmonSlowRank", "TrainmonStragglerRank", "TrainmonDataLoaderBound", "TrainmonCommunicationBound",
          "TrainmonCheckpointWriteSlow")
WORLD = 64
GPUS_PER_NODE = 8
COMPUTE = 0.9  # seconds of compute per step on a healthy GPU
COMM = 0.1  # exposed communication per step on the slowest rank
DATA = 0.02  # data wait per step
BASE = {"job": "trainmon"}
RUNBOOK = "https://github.com/trainmon/trainmon/blob/main/docs/runbook.md"


def instance(rank: int) -> str:
    return f"n{rank // GPUS_PER_NODE:02d}:9842"


def uuid(rank: int) -> str:
    return f"GPU-{rank // GPUS_PER_NODE:04d}0000-0000-0000-0000-00000000000{rank % GPUS_PER_NODE}"


@dataclass(frozen=True)
class Job:
    """One job id's life: minutes [start, end) of the scenario, and what happens in each of its minutes."""

    job_id: str
    start: int
    end: int
    ranks: int = WORLD
    # (rank, minute of the scenario) -> compute seconds per step
    compute: Callable[[int, int], float] = lambda rank, minute: COMPUTE
    # minutes since the job started -> the job's mean loss
    loss: Callable[[int], float] = lambda age: 2.1 + 0.3 * math.exp(-age / 120) + 6.0 * math.exp(-age / 3)
    # minute of the scenario -> (phase, seconds of it in that minute)
    phase: Callable[[int], tuple[str, float] | None] = lambda minute: None
    # minute of the scenario -> extra data-wait seconds in that minute (a loader hiccup)
    hiccup: Callable[[int], float] = lambda minute: 0.0
    # (rank, minute of the scenario) -> data-wait seconds per step (the next batch late: a slow drive)
    data: Callable[[int, int], float] = lambda rank, minute: DATA
    # minute of the scenario -> exposed communication per step of the slowest rank (a slow network: more)
    comm: Callable[[int], float] = lambda minute: COMM
    # minute of the scenario -> seconds of its phase that ranks other than 0 wait in a barrier (rank 0 writes)
    barrier: Callable[[int], float] = lambda minute: 0.0
    # (rank, minute of the scenario) -> (grad-norm spikes, loss spikes) the rank counted in that minute
    spikes: Callable[[int, int], tuple[int, int]] = lambda rank, minute: (0, 0)
    # minute of the scenario -> an added loss (a spike's aftermath)
    loss_bump: Callable[[int], float] = lambda minute: 0.0


@dataclass
class Series:
    labels: dict[str, str]
    values: list[float | None] = field(default_factory=list)


def noise(seed: str) -> random.Random:
    return random.Random(seed)


def simulate(job: Job, minutes: int) -> list[Series]:
    """Every series the hook makes the daemon serve for `job`, one sample a minute over the scenario."""
    out: list[Series] = []
    ranks = range(job.ranks)
    rng = noise(job.job_id)
    jitter = {rank: 1 + rng.uniform(-0.002, 0.002) for rank in ranks}  # GPUs of one model differ a little
    offset = {rank: rng.uniform(-0.02, 0.02) for rank in ranks}
    totals = {rank: dict.fromkeys(("steps", "seconds", "comm", "data", "loss_spikes", "grad_spikes"), 0.0)
              for rank in ranks}
    phase_totals: dict[tuple[int, str], float] = {}
    rows: dict[tuple[str, int, str], Series] = {}

    def put(name: str, rank: int, minute: int, value: float | None, **extra: str) -> None:
        key = (name, rank, ",".join(f"{k}={v}" for k, v in extra.items()))
        series = rows.get(key)
        if series is None:
            labels = {"__name__": name, **BASE, "instance": instance(rank), "job_id": job.job_id,
                      "rank": str(rank), **extra}
            series = rows[key] = Series(labels, [None] * minutes)
            out.append(series)
        series.values[minute] = value

    for minute in range(job.start, job.end):
        computes = {rank: job.compute(rank, minute) * jitter[rank] for rank in ranks}
        data = {rank: job.data(rank, minute) for rank in ranks}
        # A step's collective starts when the last rank has its batch and its compute done.
        cycle = max(computes[rank] + data[rank] for rank in ranks) + job.comm(minute)
        phase = job.phase(minute)
        busy = 60.0 - (phase[1] if phase else 0.0) - job.hiccup(minute)
        first = minute == job.start
        steps = 0.0 if first else busy / cycle  # the first minute is start-up
        age = minute - job.start
        for rank in ranks:
            t = totals[rank]
            step = cycle - data[rank]
            t["steps"] += counter(steps)
            t["seconds"] += counter(steps * step)
            t["comm"] += counter(steps * (step - computes[rank]) + (job.barrier(minute) if rank else 0.0))
            t["data"] += counter(steps * data[rank] + (0.0 if first else job.hiccup(minute)))
            grad_spikes, loss_spikes = job.spikes(rank, minute)
            t["grad_spikes"] += grad_spikes
            t["loss_spikes"] += loss_spikes
            if phase:
                phase_totals[rank, phase[0]] = phase_totals.get((rank, phase[0]), 0.0) + phase[1]
            put("trainmon_train_rank_info", rank, minute, 1, uuid=uuid(rank))
            put("trainmon_train_steps_total", rank, minute, t["steps"])
            put("trainmon_train_step_duration_seconds_count", rank, minute, t["steps"])
            put("trainmon_train_step_duration_seconds_sum", rank, minute, t["seconds"])
            put("trainmon_train_comm_wait_seconds_total", rank, minute, t["comm"])
            put("trainmon_train_dataloader_wait_seconds_total", rank, minute, t["data"])
            put("trainmon_train_grad_norm_spikes_total", rank, minute, t["grad_spikes"])
            put("trainmon_train_loss_spikes_total", rank, minute, t["loss_spikes"])
            put("trainmon_train_first_step_timestamp_seconds", rank, minute, (job.start + 1) * 60)
            # Each rank's data shard sits a little above or below the job's mean; 2 decimals, as a log shows it.
            put("trainmon_train_loss", rank, minute, round(job.loss(age) + job.loss_bump(minute) + offset[rank], 2))
            for (r, name), seconds in phase_totals.items():
                if r == rank:
                    put("trainmon_train_phase_seconds_total", rank, minute, seconds, phase=name)
            if phase and phase[1] >= 60:
                put("trainmon_train_phase", rank, minute, 1, phase=phase[0])
    return out


def notation(values: list[float | None], ends: set[int]) -> str:
    """promtool's expanding notation: `a+bxn` runs, `_` for no sample and `stale` where the job ended."""
    parts: list[str] = []
    i = 0
    while i < len(values):
        value = values[i]
        if value is None:
            j = i
            while j < len(values) and values[j] is None:
                j += 1
            for k in range(i, j):  # a staleness marker where a life ended, runs of `_` between
                if k in ends:
                    parts.append("stale")
                elif parts and parts[-1].startswith("_"):
                    count = int(parts[-1][2:]) if parts[-1] != "_" else 1
                    parts[-1] = f"_x{count + 1}"
                else:
                    parts.append("_")
            i = j
            continue
        # A run continues while start + k x step IS the value, exactly as promtool adds it up in floats (a
        # counter read a hair high and then flat would go backwards, which Prometheus reads as a reset).
        j, step = i + 1, None
        while j < len(values) and values[j] is not None:
            if step is None:
                step = values[j] - value  # type: ignore[operator]
            elif value + (j - i) * step != values[j]:
                break
            j += 1
        run = j - i - 1
        if step is None or run == 0:
            parts.append(_number(value))
            i += 1
        else:
            parts.append(f"{_number(value)}{'+' if step >= 0 else '-'}{_number(abs(step))}x{run}")
            i = j
    return " ".join(parts)


def _number(value: float) -> str:
    return repr(float(value)).removesuffix(".0")


def counter(value: float) -> float:
    """A minute's increase rounded to 1/8: binary fractions add up exactly (promtool's runs rebuild the values bit
    for bit), and equal minutes make runs."""
    return round(value * 8) / 8


def input_series(jobs: list[Job], minutes: int) -> list[dict[str, str]]:
    """One input series per label set: a job restarted under the same id continues its predecessor's series
    (promtool would not merge two entries of one label set), with a staleness marker where each life ended."""
    merged: dict[str, tuple[list[float | None], set[int]]] = {}
    for job in jobs:
        for series in simulate(job, minutes):
            labels = dict(series.labels)
            name = labels.pop("__name__")
            key = name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
            values, ends = merged.setdefault(key, ([None] * minutes, set()))
            for minute, value in enumerate(series.values):
                if value is not None:
                    values[minute] = value
            ends.add(job.end)
    return [{"series": key, "values": notation(values, ends)} for key, (values, ends) in merged.items()]


def silent(times: list[int], alerts: tuple[str, ...] = ALERTS) -> list[dict[str, object]]:
    return [{"eval_time": f"{t}m", "alertname": name, "exp_alerts": []} for t in times for name in alerts]


def expected(alert: str, labels: dict[str, str], scope: str | None = None, value: str = "", total: int = 0,
             first: tuple[int, ...] = ()) -> dict[str, object]:
    """The alert with these labels and its annotations rendered: `{{ $labels.x }}`, `{{ $value }}` (as given), and
    a job-wide numerics alert's queries (`total` ranks, the `first` ones by name)."""
    (rule,) = [r for r in alert_rules() if r["alert"] == alert and r["labels"].get("scope") == scope]
    ranks = ", ".join(f"rank {r} ({instance(r)})" for r in first)

    def render(text: str) -> str:
        text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)
        text = re.sub(r"\{\{ (printf \"[^\"]+\" )?\$value( \| [^}]+)? \}\}", value, text)
        text = re.sub(r"\{\{ with printf .*? \| query \}\}\{\{ \. \| first \| value \}\}\{\{ end \}\}",
                      str(total), text)
        # The scenarios' ranks report no tokens and no stage: a slow rank's cause is unknown.
        text = re.sub(r"\{\{ with printf `rank:trainmon_train_straggler_cause:share.*?\{\{ end \}\}",
                      " Likely cause: unknown.", text)
        return re.sub(r"\{\{ range \$i.*?\{\{ end \}\}\{\{ end \}\}", " " + ranks, text)

    annotations = {key: render(text) for key, text in rule["annotations"].items()}
    return {"exp_labels": {"severity": "warning", **BASE, **({"scope": scope} if scope else {}), **labels},
            "exp_annotations": annotations}


def rank_alert(alert: str, job_id: str, rank: int, scope: str | None = None, value: str = "",
               **extra: str) -> dict[str, object]:
    return expected(alert, {"instance": instance(rank), "job_id": job_id, "rank": str(rank), **extra}, scope, value)


def firing(t: int, alert: str, expected: list[dict[str, object]]) -> dict[str, object]:
    return {"eval_time": f"{t}m", "alertname": alert, "exp_alerts": expected}


def case(name: str, jobs: list[Job], minutes: int, checks: list[dict[str, object]]) -> dict[str, object]:
    return {"name": name, "interval": "1m", "input_series": input_series(jobs, minutes),
            "alert_rule_test": checks}


def every(step: int, until: int, start: int = 0) -> list[int]:
    return list(range(start, until + 1, step))


def healthy() -> dict[str, object]:
    """6 hours: warm-up, a checkpoint every 30 min (40 s, in a phase), an evaluation every hour (2 min, in a
    phase), three 30-s data-loader hiccups, 1-2% diurnal swing, a planned restart under a new job id at 3 h,
    a 1-rank job beside it, and a clean finish at 6 h."""

    def compute(rank: int, minute: int) -> float:  # Llama 3's diurnal noise: 2% from best to worst, in 30-min steps
        return COMPUTE * (1 - 0.01 * math.cos(2 * math.pi * (minute // 30 * 30) / 720))

    phase = checkpoints_and_evals

    def hiccup(minute: int) -> float:
        return 30.0 if minute in (75, 200, 290) else 0.0

    def resumed_loss(age: int) -> float:  # from the checkpoint: a small bump, no warm-up
        return 2.2 + 0.05 * math.exp(-age / 5) - 0.1 * age / 180

    before = Job("llm-a", 0, 180, compute=compute, phase=phase, hiccup=hiccup)
    after = Job("llm-b", 185, 360, compute=compute, phase=phase, hiccup=hiccup, loss=resumed_loss)
    solo = Job("solo", 0, 360, ranks=1, compute=compute, phase=phase)
    return case("healthy 64-rank job for 6 hours with a restart under a new job id, and a 1-rank job: nothing fires",
                [before, after, solo], 390, silent(every(10, 390)))


def slow_gpu() -> dict[str, object]:
    """BLOOM-176B: one GPU 5% slow (149 -> 140 TFLOP/s) from minute 90 of a job that had a good first hour."""
    slow, onset = 37, 90

    def compute(rank: int, minute: int) -> float:
        return COMPUTE * (1.05 if rank == slow and minute >= onset else 1.0)

    job = Job("bloom", 0, 180, compute=compute)
    return case("BLOOM slow GPU: 5% on one of 64 ranks is named, and the job's drift pages", [job], 180, [
        *silent([onset, onset + 10]),
        firing(onset + 30, "TrainmonSlowRank", [rank_alert("TrainmonSlowRank", "bloom", slow, uuid=uuid(slow))]),
        firing(onset + 45, "TrainmonThroughputDrift",
               [expected("TrainmonThroughputDrift", {"job_id": "bloom"})]),
    ])


def slow_rank() -> dict[str, object]:
    """One rank 15% slow from the start: named within 30 minutes; no drift (the job never ran faster)."""
    slow = 5
    job = Job("opt", 0, 60, compute=lambda rank, minute: COMPUTE * (1.15 if rank == slow else 1.0))
    return case("one rank 15% slow is named with its node and GPU", [job], 60, [
        *silent([10]),
        firing(30, "TrainmonSlowRank", [rank_alert("TrainmonSlowRank", "opt", slow, uuid=uuid(slow))]),
        *silent([30, 60], ("TrainmonThroughputDrift", "TrainmonLossSpike", "TrainmonGradNormSpike")),
    ])


def bloom_spike() -> dict[str, object]:
    """BLOOM's first spike: grad norm 0.24 -> 0.95 -> 2.4 -> 16 -> 145 -> 960 over five steps, loss 2.2 -> 5.1 at
    the fifth; the hook counts 3 grad-norm spikes and 1 loss spike on every rank (tests/torch/test_numerics.py)."""
    at = 40
    job = Job("bloom-spike", 0, 90, spikes=lambda rank, minute: (3, 1) if minute == at else (0, 0),
              loss_bump=lambda minute: 0.4 * math.exp(-(minute - at) / 5) if minute >= at else 0.0)

    return case("BLOOM grad-norm and loss spike on every rank: one alert per job, not 64", [job], 90, [
        *silent([at - 1], ("TrainmonGradNormSpike", "TrainmonLossSpike")),
        *(firing(at, alert, [expected(alert, {"job_id": "bloom-spike"}, "job", str(WORLD), WORLD, (0, 1, 10))])
          for alert in ("TrainmonGradNormSpike", "TrainmonLossSpike")),
        *silent([at + 11], ("TrainmonGradNormSpike", "TrainmonLossSpike")),
    ])


def one_rank_spike() -> dict[str, object]:
    """A loss spike on one rank only of 64 (its GPU computes wrong: silent data corruption): that rank is named."""
    at, bad = 40, 13
    job = Job("sdc", 0, 60, spikes=lambda rank, minute: (0, 1) if minute == at and rank == bad else (0, 0))
    return case("a loss spike on one rank of 64 names that rank (silent data corruption)", [job], 60, [
        *silent([at - 1], ("TrainmonLossSpike",)),
        firing(at, "TrainmonLossSpike", [rank_alert("TrainmonLossSpike", "sdc", bad, scope="rank")]),
        *silent([at], ("TrainmonGradNormSpike",)),
    ])


def increase5m(series: list[Series], metric: str, minute: int, ranks: range) -> float:
    """The ranks' summed increase of `metric` over the 5 minutes to `minute`: a ratio of two such sums is what the
    ratio of their rate5m() sums comes to, the series being sampled alike."""
    return sum((s.values[minute] or 0.0) - (s.values[minute - 5] or 0.0) for s in series
               if s.labels["__name__"] == metric and int(s.labels["rank"]) in ranks)


def percentage(ratio: float) -> str:
    """Prometheus' humanizePercentage."""
    return f"{100 * ratio:.4g}%"


def checkpoints_and_evals(minute: int) -> tuple[str, float] | None:
    """The healthy job's phases: a 40-s checkpoint every 30 minutes, a 2-minute evaluation every hour."""
    if minute % 60 in (45, 46):
        return "eval", 60.0
    if minute % 30 == 29:
        return "checkpoint", 40.0
    return None


def nvme_collapse() -> dict[str, object]:
    """One node's NVMe collapses at 30 minutes (reads 100x slower): its 8 ranks wait 1.2 s per step for their next
    batch, and the other 56 wait for them in every all-reduce. The node is named as data-bound; no waiting rank
    is a straggler, and the job is not called communication bound."""
    node, onset, at = 3, 30, 50
    bound = range(node * GPUS_PER_NODE, (node + 1) * GPUS_PER_NODE)
    job = Job("nvme", 0, 90, data=lambda rank, minute: 1.2 if rank in bound and minute >= onset else DATA)
    series = simulate(job, 90)
    share = (increase5m(series, "trainmon_train_dataloader_wait_seconds_total", at, bound)
             / increase5m(series, "trainmon_train_step_duration_seconds_sum", at, bound))
    causes = ("TrainmonStragglerRank", "TrainmonCommunicationBound", "TrainmonSlowRank")
    named = expected("TrainmonDataLoaderBound", {"instance": instance(bound[0]), "job_id": "nvme"}, "node",
                     percentage(share))
    return case("one node's NVMe collapses: its ranks are named data-bound, none of the 56 waiting ranks a straggler",
                [job], 90, [
                    *silent([onset, onset + 10], ("TrainmonDataLoaderBound",)),
                    firing(at, "TrainmonDataLoaderBound", [named]),
                    *silent(every(5, 90, onset), causes),
                ])


def long_slowdown() -> dict[str, object]:
    """One GPU 5% slow for an hour (60-120 min) of a 3-hour job with its checkpoints and evaluations: named for
    the whole hour, quiet again within 5 minutes of its recovery."""
    slow, onset, end = 21, 60, 120

    def compute(rank: int, minute: int) -> float:
        return COMPUTE * (1.05 if rank == slow and onset <= minute < end else 1.0)

    job = Job("hour", 0, 180, compute=compute, phase=checkpoints_and_evals)
    named = [rank_alert("TrainmonSlowRank", "hour", slow, uuid=uuid(slow))]
    return case("a 5% slow GPU for an hour is named all hour and resolves within 5 minutes of recovery", [job], 180, [
        *silent([onset], ("TrainmonSlowRank",)),
        *(firing(t, "TrainmonSlowRank", named) for t in every(1, end, onset + 20)),
        *silent(every(1, 180, end + 4), ("TrainmonSlowRank",)),
    ])


def final_checkpoint() -> dict[str, object]:
    """A 90-minute job writes its one checkpoint at the end (3 minutes, in the phase) and says goodbye: no
    earlier checkpoint to compare it with, so nothing fires."""
    job = Job("finish", 0, 94, phase=lambda minute: ("checkpoint", 60.0) if minute >= 90 else None)
    return case("a clean finish with one final 3-minute checkpoint stays silent", [job], 110,
                silent(every(1, 110, 85), ("TrainmonCheckpointWriteSlow",)))


def barrier_checkpoint() -> dict[str, object]:
    """A small 4-rank job (0.3 s of compute per step) whose ranks all enter a 90-s checkpoint phase every 4 minutes,
    ranks 1-3 waiting in a barrier inside it while rank 0 writes: the wait is the phase's, not communication, and
    rank 0 is no straggler."""

    def phase(minute: int) -> tuple[str, float] | None:
        return {2: ("checkpoint", 60.0), 3: ("checkpoint", 30.0)}.get(minute % 4)

    def barrier(minute: int) -> float:
        return {2: 58.0, 3: 29.0}.get(minute % 4, 0.0)

    job = Job("gloo4", 0, 70, ranks=4, compute=lambda rank, minute: 0.3, phase=phase, barrier=barrier)
    return case("a 4-rank job whose ranks wait in a barrier inside a 90-s checkpoint phase stays silent", [job], 70,
                silent(every(1, 70, 15), ("TrainmonCommunicationBound", "TrainmonStragglerRank",
                                          "TrainmonCheckpointWriteSlow")))


def slow_checkpoint() -> dict[str, object]:
    """Five 40-s checkpoints, then one that takes 4 minutes (the file system slowed): named against the five."""
    at = 110

    def phase(minute: int) -> tuple[str, float] | None:
        if at <= minute < at + 4:
            return "checkpoint", 60.0
        return ("checkpoint", 40.0) if minute % 20 == 19 and minute < at else None

    job = Job("ckpt", 0, 130, phase=phase)
    slow = expected("TrainmonCheckpointWriteSlow", {"job_id": "ckpt"}, value="4m 0s")
    slow["exp_annotations"]["description"] = re.sub(  # type: ignore[index]
        r"\{\{ with printf .*\{\{ end \}\}", "nothing measured", slow["exp_annotations"]["description"])  # type: ignore[index]
    return case("a 4-minute checkpoint after five of 40 s is slow", [job], 130, [
        *silent(every(1, at), ("TrainmonCheckpointWriteSlow",)),
        firing(at + 5, "TrainmonCheckpointWriteSlow", [slow]),
    ])


def slow_network() -> dict[str, object]:
    """Every rank waits 0.8 s per step in collectives from 20 minutes (a congested fabric): communication bound."""
    onset, at = 20, 45
    job = Job("congested", 0, 60, comm=lambda minute: 0.8 if minute >= onset else COMM)
    series = simulate(job, 60)
    everyone = range(WORLD)
    share = (increase5m(series, "trainmon_train_comm_wait_seconds_total", at, everyone)
             / increase5m(series, "trainmon_train_step_duration_seconds_sum", at, everyone))
    return case("a congested fabric makes the job communication bound, with no straggler", [job], 60, [
        *silent([onset + 5], ("TrainmonCommunicationBound",)),
        firing(at, "TrainmonCommunicationBound",
               [expected("TrainmonCommunicationBound", {"job_id": "congested"}, value=percentage(share))]),
        *silent(every(5, 60), ("TrainmonStragglerRank", "TrainmonDataLoaderBound")),
    ])


def straggler() -> dict[str, object]:
    """The seed's 40% rule: one rank computes 1.5x as long per step from 10 minutes; the others wait for it."""
    slow, onset, at = 42, 10, 40
    job = Job("seed", 0, 50, compute=lambda rank, minute: COMPUTE * (1.5 if rank == slow and minute >= onset else 1))
    series = simulate(job, 50)

    def per_step(rank: int) -> float:
        ranks = range(rank, rank + 1)
        return (increase5m(series, "trainmon_train_step_duration_seconds_sum", at, ranks)
                - increase5m(series, "trainmon_train_comm_wait_seconds_total", at, ranks)
                - increase5m(series, "trainmon_train_dataloader_wait_seconds_total", at, ranks))

    score = min(per_step(r) for r in range(WORLD)) / per_step(slow)
    return case("a rank 50% slower is the straggler, and only it", [job], 50, [
        *silent([onset], ("TrainmonStragglerRank",)),
        firing(at, "TrainmonStragglerRank", [rank_alert("TrainmonStragglerRank", "seed", slow, value=f"{score:.2f}")]),
    ])


def rising_loss() -> dict[str, object]:
    """After two good hours the loss rises 20% over an hour."""
    onset = 120

    def loss(age: int) -> float:
        base = 2.2 + 0.3 * math.exp(-age / 120) + 6.0 * math.exp(-age / 3)
        return base * (1 + 0.2 * min(max(age - onset, 0), 60) / 60)

    job = Job("diverge", 0, 200, loss=loss)
    return case("a loss rising 20% over an hour", [job], 200, [
        *silent(every(10, onset + 10), ("TrainmonLossDiverging",)),
        firing(onset + 45, "TrainmonLossDiverging",
               [expected("TrainmonLossDiverging", {"job_id": "diverge"})]),
    ])


def slower_after_restart() -> dict[str, object]:
    """The job restarts under the same id at 90 minutes (Slurm requeue) and runs 20% slower."""
    restart = 90
    before = Job("requeued", 0, restart)
    resumed = restart + 3  # from the last checkpoint: the loss goes on where it was, no second warm-up
    after = Job("requeued", resumed, 200, compute=lambda rank, minute: COMPUTE * 1.25,
                loss=lambda age: 2.1 + 0.3 * math.exp(-(age + resumed) / 120))
    return case("a 20% throughput drop after a restart under the same job id", [before, after], 200, [
        *silent([restart + 20], ("TrainmonThroughputDrift",)),
        firing(restart + 45, "TrainmonThroughputDrift",
               [expected("TrainmonThroughputDrift", {"job_id": "requeued"})]),
        *silent(every(5, 200, restart), ("TrainmonSlowRank", "TrainmonLossDiverging")),
    ])


# Two files of about the same promtool time, so that each runs on a worker of its own: the first holds the
# healthy run and the slowdowns, the second mostly the incidents whose alert must name the cause, not its victims.
SCENARIOS: dict[Path, tuple[Callable[[], dict[str, object]], ...]] = {
    INSTABILITY_TESTS: (healthy, slow_gpu, slow_rank, bloom_spike, slower_after_restart, slow_network, straggler),
    CAUSES_TESTS: (long_slowdown, one_rank_spike, rising_loss, nvme_collapse, final_checkpoint, slow_checkpoint,
                   barrier_checkpoint),
}
OUTPUTS = tuple(SCENARIOS)


def document(output: Path) -> dict[str, object]:
    return {
        "rule_files": ["../rules.yml", "../alerts.yml"],
        "evaluation_interval": "1m",
        "group_eval_order": group_names(),
        "tests": [scenario() for scenario in SCENARIOS[output]],
    }


def render(output: Path) -> str:
    header = ("# Generated by `python -m tests.prometheus.instability_scenarios`: do not edit. 64-rank jobs, healthy\n"
              "# and with planted faults (see the script's docstrings).\n")
    return header + yaml.safe_dump(document(output), sort_keys=False, width=200)


def main() -> None:
    for output in OUTPUTS:
        output.write_text(render(output))


if __name__ == "__main__":
    main()
