"""`trainmon diagnose --list`: the training jobs Prometheus knows, from `trainmon_train_rank_info`."""

from __future__ import annotations

import time
from dataclasses import dataclass

from trainmon.catalog import training
from trainmon.diagnose.prometheus import PrometheusClient

# How many times "last seen" looks inside the window. At each look a series whose target's last scrape failed is
# stale (a loaded node whose scrape timed out); with one look per window, a job there read as never seen.
LAST_SEEN_LOOKS = 15


@dataclass(frozen=True, slots=True)
class JobSeen:
    job_id: str
    ranks: int
    nodes: int
    last_seen: float  # Unix time of the job's newest rank_info sample

    def as_dict(self) -> dict[str, object]:
        return {"job_id": self.job_id, "ranks": self.ranks, "nodes": self.nodes, "last_seen": self.last_seen}


def list_jobs(client: PrometheusClient, now: float, window: int) -> list[JobSeen]:
    """Every job with a rank reporting within `window` seconds before `now`, the one seen last first.

    Raises:
        PrometheusUnreadable: Prometheus cannot be reached or refuses a query.
    """
    ranks, nodes, seen = (_by_job(client, query, now) for query in job_queries(window))
    return sorted((JobSeen(job, int(n), int(nodes.get(job, 0)), seen.get(job, 0.0)) for job, n in ranks.items()),
                  key=lambda j: (-j.last_seen, j.job_id))


def job_queries(window: int) -> tuple[str, str, str]:
    """The ranks, the nodes and the newest `trainmon_train_rank_info` sample's time of each job seen within `window`
    seconds."""
    info = f"last_over_time({training.TRAIN_RANK_INFO}[{window}s])"
    step = max(1, window // LAST_SEEN_LOOKS)
    return (f"count by (job_id) (count by (job_id, rank) ({info}))",
            f"count by (job_id) (count by (job_id, instance) ({info}))",
            f"max by (job_id) (max_over_time(timestamp({training.TRAIN_RANK_INFO})[{window}s:{step}s]))")


def _by_job(client: PrometheusClient, query: str, now: float) -> dict[str, float]:
    return {s.labels.get("job_id", ""): s.value for s in client.vector(query, now)}


def render_jobs(jobs: list[JobSeen], now: float, since: str) -> str:
    if not jobs:
        return f"no training job has reported in the last {since}"
    width = max(len("JOB_ID"), *(len(j.job_id) for j in jobs))
    lines = [f"{'JOB_ID':<{width}}  RANKS  NODES  LAST SEEN"]
    for j in jobs:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(j.last_seen))
        ago = max(now - j.last_seen, 0.0)
        lines.append(f"{j.job_id:<{width}}  {j.ranks:>5}  {j.nodes:>5}  {stamp} ({ago:.0f} s ago)")
    return "\n".join(lines)
