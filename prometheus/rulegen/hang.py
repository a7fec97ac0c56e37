"""A hung job in one series: what kind of hang, and which rank holds it (`TrainmonJobHung`).

The hook says when each rank has not moved past its own threshold (`trainmon_train_hang_suspected`:
the larger of 30 s and 5x its median step, outside declared phases), where its stack is stuck
(`trainmon_train_hang_location`) and a signature of that stack (`trainmon_train_stack_info`); the
daemon marks a rank whose process died as `gone`. These rules join the ranks of a job across nodes.

Every rank that could hold the job is a candidate for one class, scored so that the strongest
evidence wins and, within a class, the rank whose stack the fewest ranks share (the outlier, as
ByteRobust groups stacks) is named:

- `gone`: the rank's process died (or ended through an error) while the others wait; or NCCL RAS considers
  it dead (`trainmon_nccl_ras_missing_rank_info{kind="dead"}`, from any node: every node's RAS answer is the
  job's), which names it even when its node's daemon no longer reports (a whole node lost: its ranks' series
  vanish and the survivors, all in a collective, would otherwise read as `collective`). Such a candidate has
  RAS's `host` and no `instance`; where the hook itself reports the rank gone, the hook's candidate names it.
  An unresponsive rank (~5 s without an answer) is not a candidate: it is slow, maybe stuck, not dead;
- `data`: the rank is stuck in data loading;
- `host`: the rank has issued fewer collectives on some group than its peers (it never reached the
  one they wait in: it computes, or waits in another collective, its code path diverged);
- `collective`: the rank is inside a collective every member issued (the NCCL, network or GPU side);
- `unknown`: anything else.

The job is hung when every rank reporting for it is suspected and at least one of them still lives.
The alert evaluates the whole expression from the scraped series, not from the recording rule, so
no evaluation interval is added on the way: with 15 s scrapes and 10 s evaluations it fires within
about 60 s of the onset for jobs whose steps take under 6 s (the 30 s floor), and within the
threshold plus about 30 s for slower ones.
"""

from __future__ import annotations

from bundle import links
from trainmon.catalog import nccl_ras, training

from .config import RulesConfig
from .dashboards import panel_url
from .model import Alert, Group, Record
from .names import NOT_OTHER, RANK_INFO

CULPRIT = "job_id:trainmon_train_hang:culprit"
PEERS = "rank:trainmon_train_stack_peers:count"
ON_RANK = "on (instance, job, job_id, rank)"
INTERVAL = "10s"
LIVE_ELSEWHERE = 'location!~"gone|data"'
# Class weights: the strongest evidence wins; within a class a score falls by one per rank sharing the stack.
CLASSES = (("gone", 4000), ("data", 3000), ("host", 2000), ("collective", 1000), ("unknown", 0))


def stack_peers(c: RulesConfig) -> str:
    """Per suspected rank: how many ranks of its job share its stack signature."""
    stacks = c.m(training.TRAIN_STACK_INFO)
    return f"""max without (signature) (
    {stacks}
  * on (job, job_id, signature) group_left ()
    count without (instance, rank) ({stacks})
)"""


def where(c: RulesConfig, location: str) -> str:
    return f"max without (location) ({c.m(training.TRAIN_HANG_LOCATION, location)})"


def ras_dead(c: RulesConfig, without: str = "instance, kind") -> str:
    """Per rank NCCL RAS considers dead: the nodes reporting the same view aggregated away (labels job, job_id,
    rank, host with the default `without`)."""
    dead = c.m(nccl_ras.NCCL_RAS_MISSING_RANK_INFO, 'kind="dead"')
    return f"max without ({without}) ({dead})"


def gone(c: RulesConfig) -> str:
    """The hook's gone ranks, and RAS's dead ones that the hook does not report gone."""
    return f"""{where(c, 'location="gone"')}
or
(
    {ras_dead(c)}
  unless on (job, job_id, rank)
    {c.m(training.TRAIN_HANG_LOCATION, 'location="gone"')}
)"""


def candidates(c: RulesConfig) -> str:
    """Per rank and class: the rank's score as the job's culprit (labels instance, job, job_id, rank, class; a rank
    only RAS names has host instead of instance). Equal scores (two dead ranks of a lost node, which have no stack)
    leave the pick to topk: any one of them, not necessarily the lowest."""

    issued = c.m(training.NCCL_ISSUED_TOTAL, NOT_OTHER)
    behind = f"""(
    max without (group) (
        max without (instance, rank) ({issued})
      - on (job, job_id, group) group_right ()
        {issued}
    ) > 0
)"""
    selectors = {
        "gone": gone(c),
        "data": where(c, 'location="data"'),
        "host": f"{where(c, LIVE_ELSEWHERE)}\n  and {ON_RANK}\n    {indent(behind, 4)}",
        "collective": where(c, 'location="collective"'),
        "unknown": where(c, 'location="other"'),
    }
    peers = indent(stack_peers(c), 4)
    parts = []
    for name, weight in CLASSES:
        ranks = indent(selectors[name], 4)
        parts.append(f"""label_replace(
  (
      {weight} + ({ranks})
    - {ON_RANK}
      {peers}
  )
  or
    {weight} + ({ranks}),
  "class", "{name}", "", ""
)""")
    return "\nor\n".join(parts)


def culprit(c: RulesConfig) -> str:
    """One series per hung job: its class and culprit rank (with its instance), when every rank is suspected."""
    suspected = c.m(training.TRAIN_HANG_SUSPECTED)
    alive = c.m(training.TRAIN_HANG_LOCATION, 'location!="gone"')
    return f"""topk by (job, job_id) (1,
  {indent(candidates(c), 2)}
)
and on (job, job_id)
  min without (instance, rank) ({suspected}) == 1
and on (job, job_id)
  count without (instance, rank, location) ({alive}) > 0"""


def indent(text: str, spaces: int) -> str:
    return text.replace("\n", "\n" + " " * spaces)


def hang_group(c: RulesConfig) -> Group:
    return Group(name="trainmon.hang.rules", interval=INTERVAL, rules=[
        Record(record=PEERS, expr=stack_peers(c)),
        Record(record=CULPRIT, expr=culprit(c)),
    ])


def hang_alerts(c: RulesConfig) -> list[Alert]:

    hung = indent(culprit(c), 2)
    # A culprit from RAS alone has no instance and no rank info: it joins a series of its own, with no uuid.
    ranks = f"{RANK_INFO}\n  or\n    {ras_dead(c, 'instance, kind, host')}"
    return [
        Alert(
            alert="TrainmonJobHung",
            dashboard_url=panel_url(c, links.HUNG_JOB_CLASS_AND_CULPRIT),
            expr=f"""
(
  {hung}
)
* {ON_RANK} group_left (uuid)
  (
    {ranks}
  )""",
            severity="critical",
            summary="Every rank of a training job has stopped moving: the job is hung.",
            description=(
                "Every rank of job {{ $labels.job_id }} has not moved past its hang threshold (the larger of "
                "30 s and 5x its median step, outside checkpoints and evals). Class {{ $labels.class }}: rank "
                "{{ $labels.rank }} {{ if $labels.instance }}on {{ $labels.instance }} (GPU {{ $labels.uuid }})"
                "{{ else }}on host {{ $labels.host }}, which NCCL RAS considers dead,{{ end }} holds it. Run "
                "`trainmon diagnose --job {{ $labels.job_id }}` for its stack, its parallel group and the NCCL "
                "timeout left before the watchdog ends the job."
            ),
        ),
    ]


__all__ = ["hang_alerts", "hang_group"]
