"""NCCL's own view: slow links from NCCL Inspector's bus bandwidth, missing ranks from NCCL RAS.

A communicator's members run the same collectives at the same sizes, so within one (comm_name,
collective, size class) their bus bandwidth should agree; the one well below the others' median holds
the communicator back: its network path (a data-parallel group across nodes) or its NVLink (a
tensor-parallel group inside one node). Comparing within a size class keeps a job whose message sizes
change over time (and with them the bandwidth of every member) from looking slow.
"""

from __future__ import annotations

from bundle import links
from trainmon.catalog import infiniband, nccl_inspector, nccl_ras

from .config import RulesConfig
from .dashboards import panel_url
from .model import Alert, Group, Record

BANDWIDTH = "rank_comm:trainmon_nccl_inspector_bus_bandwidth:mean10m"
MEDIAN = "job_id_comm:trainmon_nccl_inspector_bus_bandwidth:median10m"
MEMBERS = "job_id_comm:trainmon_nccl_inspector_members:count"
RATIO = "rank_comm:trainmon_nccl_inspector_bus_bandwidth:peer_ratio"
ON_COMM = "on (job, job_id, comm_name, collective, size_class)"
SLOW_FRACTION = 0.7
# With two members a slow one cannot be told from a fast one.
MIN_MEMBERS = 3


def nccl_group(c: RulesConfig) -> Group:
    summary = nccl_inspector.NCCL_INSPECTOR_BUS_BANDWIDTH_BYTES_PER_SECOND
    return Group(name="trainmon.nccl.rules", rules=[
        Record(record=BANDWIDTH, expr=f"""
  rate({c.m(summary.sum)}[10m])
/
  rate({c.m(summary.count)}[10m]) > 0"""),
        Record(record=MEDIAN, expr=f"quantile without (instance, rank) (0.5, {BANDWIDTH})"),
        Record(record=MEMBERS, expr=f"count without (instance, rank) ({BANDWIDTH})"),
        Record(record=RATIO, expr=f"{BANDWIDTH}\n/ {ON_COMM} group_left\n  {MEDIAN}"),
    ])


def nccl_alerts(c: RulesConfig) -> list[Alert]:
    missing = c.m(nccl_ras.NCCL_RAS_MISSING_RANKS, 'kind=~"unresponsive|dead"')
    slow = f"""(
      {RATIO} < {SLOW_FRACTION}
    and {ON_COMM}
      {MEMBERS} >= {MIN_MEMBERS}
  )
  * on (instance, job, job_id, rank) group_left (uuid)
    max without (source, version) ({c.m(nccl_inspector.NCCL_INSPECTOR_INFO)})"""
    return [
        Alert(
            alert="TrainmonNCCLSlowLink",
            dashboard_url=panel_url(c, links.NCCL_BUS_BANDWIDTH),
            # The NIC where the infiniband collector knows it; the alert without one where it does not.
            expr=f"""
(
  {slow}
)
* on (instance, job, uuid) group_left (device, port, path)
  {c.m(infiniband.GPU_NIC_AFFINITY_INFO)}
or on (instance, job, job_id, rank, comm_name, collective, size_class)
(
  {slow}
)""",
            for_="10m",
            severity="warning",
            summary="One member of an NCCL communicator is much slower than its peers.",
            description=(
                "Rank {{ $labels.rank }} of job {{ $labels.job_id }} on {{ $labels.instance }} (GPU "
                "{{ $labels.uuid }}) reaches {{ $value | humanizePercentage }} of the median bus bandwidth of "
                "its peers in communicator {{ $labels.comm_name }} ({{ $labels.collective }}, messages "
                "{{ $labels.size_class }}) over 10 minutes, by NCCL Inspector's GPU timings. Across nodes "
                "suspect its network path: {{ if $labels.device }}port {{ $labels.port }} of {{ $labels.device }}, "
                "the InfiniBand card NCCL picks for that GPU ({{ $labels.path }} on the PCIe tree): its errors, rate "
                "or width{{ else }}the node's InfiniBand ports: "
                "errors, degraded rate or width{{ end }}; inside one node, its NVLinks. Every member of the "
                "communicator waits for it."
            ),
        ),
        Alert(
            alert="TrainmonNCCLRanksMissing",
            dashboard_url=panel_url(c, links.NCCL_RANKS_MISSING),
            expr=f"max without (instance) ({missing}) > 0",
            for_="2m",
            severity="critical",
            summary="NCCL RAS reports ranks of a job unresponsive or dead.",
            description=(
                "NCCL RAS reports {{ $value }} rank(s) of job {{ $labels.job_id }} {{ $labels.kind }} "
                "(unresponsive: no answer for ~5 s; dead: ~60 s): their processes or nodes are gone or stuck, "
                "and every collective that needs them will hang. Run ncclras on a node of the job for the "
                "ranks' hosts and pids."
            ),
        ),
    ]


__all__ = ["nccl_alerts", "nccl_group"]
