"""Fleet dashboard: idle and busy GPUs across nodes, the jobs running, and errors anywhere."""

from __future__ import annotations

from grafana_foundation_sdk.models.dashboard import Dashboard as DashboardModel

from bundle import links
from trainmon.catalog import gpu

from .config import DashboardConfig
from .node import job_variable
from .panels import Board, Query, graph, linked, single

FLEET = 'job=~"$job"'  # after the selector (DashboardConfig.matchers)
# The "by node" panels draw this many nodes, not one line per node: 1,000 lines of 960 points were the slowest
# panels at 1,000 nodes (docs/performance.md, "Fleet scale at 1,000 nodes").
TOP_NODES = 10


def by_node(series: str, legend: str, *, lowest: bool = False) -> Query:
    """One line for each of the TOP_NODES nodes with the highest (`lowest`: the lowest) value anywhere in the
    range shown. The nodes are ranked once, at the range's end (`@ end()`), so every step draws the same nodes;
    `topk` at each step would draw whichever nodes led at that step, hundreds of broken lines on a fleet
    whose values differ little."""
    over_time, rank = ("min", "bottomk") if lowest else ("max", "topk")
    ranking = f"{rank}({TOP_NODES}, {over_time} by (instance) ({over_time}_over_time({series}[$__range] @ end())))"
    return Query(f"sum by (instance) ({series}) and on (instance) {ranking}", legend)


# Owners (SPEC §4 "GPU ownership"), from prometheus/rules.yml's trainmon.ownership.rules:
# (row label, level of the recorded series, owner label).
OWNERS = (("namespace", "namespace", "namespace"), ("Slurm job", "job_id", "job_id"))


def _owners(board: Board, config: DashboardConfig) -> Board:
    """Allocated and idle GPUs by Kubernetes namespace and by Slurm job, and the GPU-hours each held."""
    fleet_matchers = config.matchers(FLEET)
    idle = (f"SM activity under {config.idle_sm_ratio:.0%}, or low power against the limit where SM activity is "
            "not measured (as TrainmonGPUIdleDuringTraining judges it)")
    panels = []
    for label, level, owner in OWNERS:
        panels.append(graph(
            f"GPUs by {label}",
            f"GPUs allocated to each {label}, and how many of them are idle: {idle}.",
            "none",
            Query(f"sum by ({owner}) ({level}:trainmon_gpu_allocated:count{{{fleet_matchers}}})", f"{{{{{owner}}}}}"),
            Query(f"sum by ({owner}) ({level}:trainmon_gpu_idle:count{{{fleet_matchers}}})", f"{{{{{owner}}}}} idle"),
        ))
    for label, level, owner in OWNERS:
        panels.append(graph(
            f"GPU-hours by {label}",
            f"GPU-hours each {label} held over the hour before each point.",
            "none",
            Query(f"sum by ({owner}) ({level}:trainmon_gpu_hours:sum1h{{{fleet_matchers}}})", f"{{{{{owner}}}}}"),
        ))
    return board.row("GPUs by owner", *panels)


def build(config: DashboardConfig) -> DashboardModel:
    fleet_matchers = config.matchers(FLEET)
    idle = f"instance:trainmon_gpu_idle:count{{{fleet_matchers}}}"
    busy = f"instance:trainmon_gpu_busy:count{{{fleet_matchers}}}"
    sm_activity = f"instance:trainmon_gpu_sm_utilization_ratio:avg{{{fleet_matchers}}}"
    power = f"instance:trainmon_gpu_power_watts:sum{{{fleet_matchers}}}"
    xids = f"instance:trainmon_gpu_xid_errors:increase5m{{{fleet_matchers}}}"
    ecc = f"instance:trainmon_gpu_ecc_uncorrected_errors:sum{{{fleet_matchers}}}"
    infiniband = f"instance:trainmon_infiniband_errors:rate5m{{{fleet_matchers}}}"
    failures = f"instance:trainmon_collector_failures:count{{{fleet_matchers}}}"
    board = Board(
        config=config,
        identity=links.FLEET,
        title="Fleet",
        description="Every trainmon node: GPU usage, training jobs and errors. Every panel reads per-node or "
                    "per-job recording rules (trainmon.fleet.rules), so it stays fast at 1,000 nodes.",
        variables=(job_variable(config),),
    )
    board.row(
        "Overview",
        linked(links.NODES, single("Nodes", "trainmon daemons Prometheus scrapes successfully.", "none",
               Query(f"sum(up{{{fleet_matchers}}})", "nodes"))),
        single("GPUs up", "GPUs whose last NVML read succeeded.", "none",
               Query(f"sum(instance:trainmon_gpu_up:sum{{{fleet_matchers}}})", "up")),
        linked(links.GPUS_LOST, single(
            "GPUs lost",
            "GPUs on the PCI bus minus GPUs up, over all nodes.",
            "none",
            Query(f"sum(instance:trainmon_gpus_expected:sum{{{fleet_matchers}}})"
                  f" - sum(instance:trainmon_gpu_up:sum{{{fleet_matchers}}})", "lost"),
        )),
        single(
            "Idle GPUs",
            f"GPUs with SM activity under {config.idle_sm_ratio:.0%}.",
            "none",
            Query(f"sum({idle}) or vector(0)", "idle"),
        ),
        single(
            "Training jobs",
            "Distinct training jobs with live ranks.",
            "none",
            Query(f"count(job_id:trainmon_train_ranks:count{{{fleet_matchers}}}) or vector(0)", "jobs"),
        ),
        single(
            "Live ranks",
            "Training ranks reporting to the daemons.",
            "none",
            Query(f"sum(instance:trainmon_ingest_ranks:sum{{{fleet_matchers}}})", "ranks"),
        ),
    )
    board.row(
        "GPUs",
        graph(
            "Idle and busy GPUs",
            f"GPUs by SM activity (idle under {config.idle_sm_ratio:.0%}), over all nodes.",
            "none",
            Query(f"sum({idle}) or vector(0)", "idle"),
            Query(f"sum({busy}) or vector(0)", "busy"),
        ),
        graph(
            "Least active nodes",
            f"Mean SM activity of each node's GPUs: the {TOP_NODES} nodes lowest at any point of the range shown, "
            "and the fleet's mean.",
            "percentunit",
            by_node(sm_activity, "{{instance}}", lowest=True),
            Query(f"avg({sm_activity})", "fleet mean"),
            max_value=1,
        ),
        graph(
            "Nodes with the most idle GPUs",
            f"GPUs with SM activity under {config.idle_sm_ratio:.0%}: the {TOP_NODES} nodes with the most at any "
            "point of the range shown, and all nodes together.",
            "none",
            by_node(idle, "{{instance}}"),
            Query(f"sum({idle}) or vector(0)", "all nodes"),
        ),
        graph(
            "Nodes drawing the most power",
            f"Total GPU power draw per node: the {TOP_NODES} nodes highest at any point of the range shown, and "
            "the fleet's mean per node.",
            "watt",
            by_node(power, "{{instance}}"),
            Query(f"avg({power})", "fleet mean"),
        ),
    )
    _owners(board, config)
    board.row(
        "Jobs",
        graph(
            "Samples per second by job",
            "Throughput of each training job.",
            "short",
            Query(f"job_id:trainmon_train_samples:rate5m{{{fleet_matchers}}}", "{{job_id}}"),
        ),
        graph(
            "Communication wait share by job",
            "Share of step time each job's ranks were blocked on communication (alert above 40%).",
            "percentunit",
            Query(f"job_id:trainmon_train_comm_wait_per_step_time:ratio{{{fleet_matchers}}}", "{{job_id}}"),
        ),
    )
    board.row(
        "Errors",
        graph(
            "Firing alerts",
            "trainmon alerts firing, by name.",
            "none",
            Query(
                f'count by (alertname) (ALERTS{{{fleet_matchers}, alertname=~"Trainmon.+", alertstate="firing"}})',
                "{{alertname}}",
            ),
        ),
        graph(
            "Nodes with the most GPU errors",
            f"XID events in the last 5 minutes and uncorrectable ECC error counts: the {TOP_NODES} nodes with the "
            "most at any point of the range shown, and all nodes together.",
            "none",
            by_node(xids, "{{instance}} XID"),
            by_node(ecc, "{{instance}} uncorrectable ECC"),
            Query(f"sum({xids})", "XID, all nodes"),
            Query(f"sum({ecc})", "uncorrectable ECC, all nodes"),
        ),
        graph(
            "GPUs needing action",
            "GPUs whose health verdict asks an operator for a GPU reset, a reboot or service (drain), per node "
            f"and action ({gpu.GPU_HEALTH_ACTION}; the Node dashboard's Health row says why).",
            "none",
            Query(f"sum by (instance, action) (instance_action:trainmon_gpu_health_action:count{{{fleet_matchers}}})",
                  "{{instance}} {{action}}"),
        ),
        graph(
            "Nodes with the most InfiniBand errors",
            f"Symbol and receive errors per second over 5 minutes: the {TOP_NODES} nodes with the most at any point "
            "of the range shown, and all nodes together.",
            "cps",
            by_node(infiniband, "{{instance}}"),
            Query(f"sum({infiniband})", "all nodes"),
        ),
        linked(links.FAILING_COLLECTORS, graph(
            "Failing collectors",
            f"Collectors whose last run failed: the {TOP_NODES} nodes with the most at any point of the range "
            "shown, and all nodes together.",
            "none",
            by_node(failures, "{{instance}}"),
            Query(f"sum({failures})", "all nodes"),
        )),
    )
    return board.build()
