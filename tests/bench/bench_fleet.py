"""N simulated nodes under a real Prometheus 2.42 running the shipped rules: rule-group evaluation time and
the range-query time of every dashboard panel, per N.

    python -m tests.bench.bench_fleet --minutes 6              # --mode backfill --nodes 100,300,1000
    python -m tests.bench.bench_fleet --mode scrape --minutes 2

One real node (the daemon on the fake NVML and a synthetic tree, 8 ranks fed through the hook's wire)
gives the exposition; each simulated node is that text with its own GPU UUIDs and its share of a
training job (jobs of 1 to 64 nodes, ranks numbered across the job).

`scrape`: one HTTP server serves every node as /metrics/<node>, scraped as its own target (`instance` =
node name). Values stay those of the one real node (counters do not move). On a small machine the
scrapes' ingestion competes with rule evaluation, so group durations then measure CPU starvation too.

`backfill`: the fleet's samples of the last `--minutes` (every 15 s, counters growing) are written as
OpenMetrics in time slices and turned into TSDB blocks by `promtool tsdb create-blocks-from openmetrics`,
slice after slice until the data reaches the present; then Prometheus starts on those blocks with the
rules and no scrape targets, so rules and panels read the fleet's data without any ingestion load.
Slices do not overlap in time, so Prometheus has no vertical compaction to do while it is measured.

What is measured, load-proof where it can be: the groups' durations as Prometheus reports them (every
group at once, on the cpus there are), then, with the rules unloaded, every rule expression and every panel
query one at a time: the Prometheus process's CPU time around it (nearly independent of other load on the
machine) and the samples the engine read (`stats=all`: the same on any machine). The last tables put the
sizes side by side per node: flat columns are linear growth.

The 24 h range queries cover only the minutes of data there are, so they measure the step count, not 24 h
of chunks; a panel's "24h est." is the CPU of one step that has data times the 960 steps of 24 h. Rules
that read a day of raw samples (`[1d]`) likewise read minutes here: `--families` with `--minutes 1440`
backfills a full day of only the families those windows read, e.g.

    python -m tests.bench.bench_fleet --nodes 50 --minutes 1440 --settle 0 --evaluations 1 --dashboards none \
        --families 'trainmon_collector_success|trainmon_infiniband_state_id|trainmon_gpus_expected'
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import yaml

from tests.bench.common import machine, started_node, table
from tests.e2e.alerting_stack import served
from tests.helpers.metrics import parse_samples
from tests.helpers.net import free_port, wait_until
from tests.helpers.tools import require_tool

REPO = Path(__file__).resolve().parents[2]
RULE_FILES = [REPO / "prometheus" / "rules.yml", REPO / "prometheus" / "alerts.yml"]
DASHBOARDS = sorted((REPO / "grafana" / "dashboards").glob("*.json"))
JOB_SIZES = (1, 2, 4, 8, 16, 64)  # nodes per training job, cycled over the fleet
GPUS_PER_NODE = 8
# What an operator looks at: the Node dashboard for one node, the Training job dashboard for the largest job
# (64 nodes, the sixth job of `placements`) with all its nodes, the Fleet dashboard for the fleet. With
# "All" nodes the Node dashboard would draw every GPU of the fleet: that grows with the fleet by design.
SELECTED = {"instance": "node-0000", "job_id": "job-5"}
# Range queries as Grafana sends them for a ~1,000 px wide panel.
RANGES = {"1h": (3600, 15), "24h": (86400, 90)}
UUID = re.compile(r'GPU-00000000-0000-0000-0000-0000000000(\d\d)')
RANK = re.compile(r'\brank="(\d+)"')
JOB = "trainmon"
SCRAPE_SECONDS = 15
# promtool's pace turning OpenMetrics into blocks on the shared 2-core build machine (it reads, then appends).
BACKFILL_SAMPLES_PER_SECOND = 60_000
# Data this old when the backfill ends is recent enough: 5-minute windows still hold most of their samples,
# and at 1,000 nodes promtool converts barely faster than the fleet produces, so catching up further
# would take many slices.
CATCH_UP_SECONDS = 60
# Two evaluations of every 30 s group after Prometheus starts on backfilled blocks...
SETTLE_SECONDS = 70
# ...then the groups' durations are read --evaluations times, 30 s apart (by default the last read comes
# 160 s after the start, when 5-minute windows still hold samples of every series).
EVALUATIONS = 4
# Series whose values a training node's counters move (histogram parts included)...
GROWING_SUFFIXES = ("_total", "_sum", "_count", "_bucket")
# ...except the fault counters of a healthy fleet, which stay put: otherwise every port and GPU would
# alert, and the benchmark would time the expansion of thousands of alert templates.
FAULT_COUNTER = re.compile(r"error|downed|recovery|drop|discard|nak|retrans|timeout|oom|retries|nonfinite|skipped"
                           r"|remapped|throttle|rebind|overrun|sequence|constraint|coalesced")
REMAP_FLAGS = ("trainmon_gpu_row_remap_pending", "trainmon_gpu_row_remap_failure")
# A healthy GPU's verdict: action "none" and no reason (else every GPU of the fleet alerts "needs a reset").
HEALTH_ACTION, HEALTH_REASON = "trainmon_gpu_health_action", "trainmon_gpu_health_reason_info{"
ACTION = re.compile(r'action="\w+"')
# Gauges that hold the time of the latest step: in backfilled data they follow the sample's time.
CLOCK_SERIES = ("trainmon_train_last_step_timestamp_seconds",)


@dataclass(frozen=True)
class Placement:
    job_id: str
    first_rank: int
    world_size: int


def node_name(node: int) -> str:
    return f"node-{node:04d}"


def placements(nodes: int) -> list[Placement]:
    """Each node's share of a training job: jobs of JOB_SIZES nodes in turn until the fleet is full."""
    result: list[Placement] = []
    job = 0
    while len(result) < nodes:
        size = min(JOB_SIZES[job % len(JOB_SIZES)], nodes - len(result))
        result.extend(Placement(f"job-{job}", i * GPUS_PER_NODE, size * GPUS_PER_NODE) for i in range(size))
        job += 1
    return result


def node_exposition(template: str, node: int, placement: Placement) -> str:
    """The real node's text exposition as node `node` serves it: its own GPUs, its job, its ranks."""
    text = UUID.sub(lambda m: f"GPU-{node:08x}-0000-0000-0000-0000000000{m[1]}", template)
    text = text.replace('job_id="bench-job"', f'job_id="{placement.job_id}"')
    text = text.replace(f'world_size="{GPUS_PER_NODE}"', f'world_size="{placement.world_size}"')
    return RANK.sub(lambda m: f'rank="{placement.first_rank + int(m[1])}"', text)


def healthy(exposition: str) -> str:
    """The test node's exposition without the faults its synthetic tree and fake NVML plant (ECC and fabric
    errors, pending row remaps, narrowed PCIe links, the health verdicts these give): all nodes but the first
    are healthy, as in a fleet."""
    width = {}
    for line in exposition.splitlines():
        if line.startswith("trainmon_gpu_pcie_link_width{") and 'kind="max"' in line:
            series, value = line.rsplit(" ", 1)
            width[series.replace('kind="max"', 'kind="current"')] = value
    lines = []
    for line in exposition.splitlines():
        if line.startswith(HEALTH_REASON):
            continue
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            name = series.split("{", 1)[0]
            if (FAULT_COUNTER.search(name) and name.endswith("_total")) or name in REMAP_FLAGS:
                value = "0.0"
            if name == HEALTH_ACTION:
                series = ACTION.sub('action="none"', series)
            line = f"{series} {width.get(series, value)}"
        lines.append(line)
    return "\n".join(lines) + "\n"


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """A scrape Prometheus gave up on (its timeout) resets the connection: counted by `up`, not logged."""


@contextmanager
def fleet_server(bodies: list[bytes]) -> Iterator[int]:
    """One HTTP server answering /metrics/<node> with that node's exposition; yields its port."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            index = int(self.path.rsplit("/", 1)[1])
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(bodies[index])))
            self.end_headers()
            self.wfile.write(bodies[index])

        def log_message(self, *args: object) -> None:
            pass

    server = QuietServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def panel_queries(dashboard: Path) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target, Grafana variables filled in as "all"."""
    document = json.loads(dashboard.read_text())

    def walk(panels: list[dict[str, object]]) -> Iterator[dict[str, object]]:
        for panel in panels:
            yield panel
            yield from walk(panel.get("panels", []))  # type: ignore[arg-type]

    return [(str(panel["title"]), fill_variables(target["expr"]))
            for panel in walk(document["panels"]) for target in panel.get("targets", [])  # type: ignore[attr-defined]
            if target.get("expr")]


def fill_variables(expr: str) -> str:
    """The query as Grafana sends it for the selection an operator makes (SELECTED), other variables "All"."""
    expr = expr.replace("$__rate_interval", "1m").replace("$__interval", "1m").replace("$__range", "1h")
    expr = re.sub(r'(\w+)\s*=\s*"(\$\{?\w+\}?)"', r'\1=~"\2"', expr)
    return re.sub(r"\$\{?(\w+)\}?", lambda m: SELECTED.get(m[1], ".+"), expr)


@dataclass(frozen=True)
class Evaluations:
    """Each rule group's distinct evaluations seen while sampling, and what the machine did meanwhile."""

    seconds: dict[str, list[float]]  # group -> its evaluations' durations
    intervals: dict[str, float]
    window: float
    prometheus_cpu: float  # CPU seconds Prometheus used in the window
    steal: float  # the share of the machine's CPU time the hypervisor took in the window


def _cpu_ticks() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs (/proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return fields[7], sum(fields[:8])


def sampled_evaluations(prometheus_url: str, rounds: int) -> Evaluations:
    """Every group's last duration, read once per 30 s interval for `rounds` intervals: one evaluation
    is noise on a shared machine (cold chunks, a neighbour's burst), the median of several is not."""
    seconds: dict[str, dict[float, float]] = {}
    intervals: dict[str, float] = {}
    began, (steal0, total0) = time.time(), _cpu_ticks()
    cpu0 = _scalar(prometheus_url, "process_cpu_seconds_total")
    for i in range(rounds):
        if i:
            time.sleep(30)
        samples = parse_samples(httpx.get(prometheus_url + "/metrics", timeout=30).text)
        for (name, labels), value in samples.items():
            if name == "prometheus_rule_group_last_duration_seconds":
                group = dict(labels)["rule_group"].split(";", 1)[1]
                evaluated = samples[("prometheus_rule_group_last_evaluation_timestamp_seconds", labels)]
                seconds.setdefault(group, {})[evaluated] = value
                intervals[group] = samples[("prometheus_rule_group_interval_seconds", labels)]
    steal1, total1 = _cpu_ticks()
    return Evaluations(
        seconds={group: list(by_time.values()) for group, by_time in sorted(seconds.items())},
        intervals=intervals,
        window=time.time() - began,
        prometheus_cpu=_scalar(prometheus_url, "process_cpu_seconds_total") - cpu0,
        steal=(steal1 - steal0) / max(1, total1 - total0),
    )


@dataclass(frozen=True)
class Cost:
    """What one query cost Prometheus. `cpu` is the process's CPU time around the query (queries run one at
    a time, so other load on the machine barely moves it); `samples` and `peak` are the engine's own counts
    (`stats=all`), the same on any machine; `engine` is its evaluation wall time, `wall` the client's wait
    for the answer."""

    cpu: float
    engine: float
    wall: float
    samples: int
    peak: int

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.cpu + other.cpu, self.engine + other.engine, self.wall + other.wall,
                    self.samples + other.samples, max(self.peak, other.peak))

    def per(self, count: int) -> Cost:
        """The share of one of `count` equal parts (e.g. of one step of a range query)."""
        return Cost(self.cpu / count, self.engine / count, self.wall / count, self.samples // count, self.peak)


NO_COST = Cost(0.0, 0.0, 0.0, 0, 0)
Query = dict[str, str | float]  # the parameters of a query API call


def process_cpu_seconds(pid: int) -> float:
    """The CPU time of a process: the sum over its threads of the nanoseconds they ran (the first field of
    /proc/<pid>/task/*/schedstat; utime+stime counted at nanoseconds instead of 10 ms ticks)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
    return total / 1e9


@dataclass(frozen=True)
class Engine:
    """The Prometheus under measurement: its API and its process."""

    url: str
    pid: int
    client: httpx.Client  # one keep-alive connection: a new client per query costs more than many queries

    def cost(self, params: Query, rounds: int = 1) -> Cost:
        """The cost of one query (`/api/v1/query` with `time`, else `/api/v1/query_range`), run `rounds` times
        in a row: CPU and wall seconds per run, the median engine time. Raises on a query error."""
        path = "/api/v1/query" if "time" in params else "/api/v1/query_range"
        before, started, engine, answer = process_cpu_seconds(self.pid), time.perf_counter(), [], {}
        for _ in range(rounds):
            answer = self.client.get(self.url + path, params={**params, "stats": "all"}).json()
            if answer["status"] != "success":
                raise RuntimeError(f"{params['query']}: {answer}")
            engine.append(float(answer["data"]["stats"]["timings"]["evalTotalTime"]))
        samples = answer["data"]["stats"]["samples"]
        return Cost(cpu=(process_cpu_seconds(self.pid) - before) / rounds, engine=statistics.median(engine),
                    wall=(time.perf_counter() - started) / rounds, samples=int(samples["totalQueryableSamples"]),
                    peak=int(samples["peakSamples"]))

    def series(self, params: Query) -> int:
        """How many series the query answers."""
        path = "/api/v1/query" if "time" in params else "/api/v1/query_range"
        return len(self.client.get(self.url + path, params=params).json()["data"]["result"])


def unload_rules(work: Path, engine: Engine) -> float:
    """Stop the rule evaluations (a config reload without rule files), so that what Prometheus does from
    now on is only the queries measured; returns the time, the end of the recorded series."""
    config = yaml.safe_load((work / "prometheus.yml").read_text())
    (work / "prometheus.yml").write_text(yaml.safe_dump({**config, "rule_files": []}))
    httpx.post(engine.url + "/-/reload", timeout=60).raise_for_status()
    return time.time()


# A recorded series (level:metric:operations) or the alerts' own series: what rules write.
WRITTEN_BY_RULES = re.compile(r"\bALERTS\b|\b[a-z_]+:\w+:\w+\b")


@dataclass(frozen=True)
class DataEnds:
    """Where each kind of data ends: raw samples at the newest backfilled (or scraped) one, the rules'
    results when the rules were unloaded. With backfilled data the rules only started after the raw data
    ended, so no time has both full: an expression is measured at the end of what it reads (a raw `[5m]`
    window read minutes after the data ended would hold a fraction of its samples)."""

    raw: float
    recorded: float

    def of(self, expr: str) -> float:
        return self.recorded if WRITTEN_BY_RULES.search(expr) else self.raw


def alone_costs(setup: Setup, engine: Engine, ends: DataEnds) -> dict[str, Cost]:
    """Each group's cost on its own, the rules unloaded: every group's expressions run one after another
    as instant queries at the end of their data, the group's cost being the sum of its expressions'
    (`Engine.cost`). On two cores the groups' concurrent evaluations slow each other down; this is what a
    group takes where there are cores to spare. Alert template expansion and writing the results are not
    in it."""
    costs: dict[str, Cost] = {}
    for path in setup.rule_files:
        for group in yaml.safe_load(path.read_text())["groups"]:
            costs[group["name"]] = sum(
                (engine.cost({"query": f"count(({rule['expr']}))", "time": ends.of(rule["expr"])}, setup.rounds)
                 for rule in group["rules"]), NO_COST)
    return costs


def rule_durations(evaluations: Evaluations, alone: dict[str, Cost], nodes: int) -> list[list[object]]:
    rows: list[list[object]] = []
    for group, durations in evaluations.seconds.items():
        interval, median, cost = evaluations.intervals[group], statistics.median(durations), alone[group]
        rows.append([group, len(durations), f"{median * 1000:.1f}", f"{max(durations) * 1000:.1f}",
                     f"{median / interval:.2%}", f"{cost.cpu * 1000:.0f}", f"{cost.engine * 1000:.1f}",
                     f"{cost.cpu / interval:.2%}", cost.samples, f"{cost.samples / nodes:.0f}", cost.peak])
    return rows


def slowest_rules(prometheus_url: str, count: int = 12) -> list[list[object]]:
    """The rules whose last evaluation took longest (the rules API times each rule)."""
    groups = httpx.get(prometheus_url + "/api/v1/rules", timeout=30).json()["data"]["groups"]
    rules = sorted(((rule["evaluationTime"], group["name"], rule["name"]) for group in groups
                    for rule in group["rules"]), reverse=True)
    return [[name, group, f"{seconds * 1000:.1f}"] for seconds, group, name in rules[:count]]


def alert_counts(prometheus_url: str) -> list[list[object]]:
    """Active alert instances by name and state: each costs a template expansion per evaluation."""
    alerts = httpx.get(prometheus_url + "/api/v1/alerts", timeout=30).json()["data"]["alerts"]
    counts = Counter((alert["labels"]["alertname"], alert["state"]) for alert in alerts)
    return [[name, state, count] for (name, state), count in sorted(counts.items())]


@dataclass(frozen=True)
class PanelCost:
    dashboard: str
    title: str
    ranges: dict[str, Cost]  # RANGES name -> the range query's cost, as Grafana sends it
    full_step: Cost  # one step of a query over the last FULL_WINDOW seconds, where every series has data
    series: int

    @property
    def estimate_24h(self) -> float:
        """CPU seconds of the 24 h range query over 24 h of data: its step count times the cost of a step
        that has data (the backfill holds minutes, so the measured 24 h query mostly evaluates empty steps)."""
        seconds, step = RANGES["24h"]
        return self.full_step.cpu * seconds / step


# Where recorded series and raw data both exist when the panels are timed (the rules have run for this long).
FULL_WINDOW = 120


def panel_costs(engine: Engine, ends: DataEnds, dashboards: list[Path]) -> list[PanelCost]:
    panels = []
    for dashboard in dashboards:
        for title, expr in panel_queries(dashboard):
            now = ends.of(expr)
            ranges = {name: engine.cost({"query": expr, "start": now - seconds, "end": now, "step": step})
                      for name, (seconds, step) in RANGES.items()}
            # Steps 1 s apart: the query's fixed cost (parsing, the index, the answer's envelope) is spread
            # over 121 steps instead of counted in each of them.
            full: Query = {"query": expr, "start": now - FULL_WINDOW, "end": now, "step": 1}
            panels.append(PanelCost(dashboard.stem.removeprefix("trainmon-"), title[:40], ranges,
                                    engine.cost(full).per(FULL_WINDOW + 1), engine.series(full)))
    return panels


def panel_rows(panels: list[PanelCost], nodes: int) -> list[list[object]]:
    """Slowest first by the 24 h estimate."""
    return [[p.dashboard, p.title, *[f"{p.ranges[r].wall * 1000:.0f}" for r in RANGES],
             f"{p.ranges['24h'].cpu * 1000:.0f}", p.ranges["24h"].samples, f"{p.full_step.samples / nodes:.0f}",
             f"{p.full_step.wall * 1000:.1f}", f"{p.estimate_24h:.2f}", p.series]
            for p in sorted(panels, key=lambda p: -p.estimate_24h)]


@dataclass(frozen=True)
class Setup:
    """What one benchmark run measures, and how."""

    prometheus: str  # the binary
    mode: str  # "backfill" or "scrape"
    minutes: float
    slice_samples: int
    rule_files: list[Path]
    dashboards: list[Path]
    evaluations: int  # reads of the groups' durations, 30 s apart
    settle: float  # seconds Prometheus evaluates the backfilled data before it is measured
    rounds: int  # runs of each rule expression measured alone (their CPU time is averaged)
    families: re.Pattern[str]  # the metric families each node serves (empty: all)


@dataclass(frozen=True)
class Fleet:
    """A Prometheus holding the fleet's data and evaluating the shipped rules."""

    engine: Engine
    data_end: float  # the newest sample's time
    note: str


def prometheus_argv(setup: Setup, work: Path, config: dict[str, object], port: int) -> list[str]:
    config = {"global": {"scrape_interval": f"{SCRAPE_SECONDS}s", "evaluation_interval": "30s"},
              "rule_files": [str(p) for p in setup.rule_files], **config}
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    return [setup.prometheus, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle"]


@contextmanager
def scraped_fleet(setup: Setup, bodies: list[bytes], work: Path) -> Iterator[Fleet]:
    minutes = setup.minutes
    nodes = len(bodies)
    with fleet_server(bodies) as port:
        targets = [{"targets": [f"127.0.0.1:{port}"], "labels": {"instance": node_name(n),
                                                                  "__metrics_path__": f"/metrics/{n}"}}
                   for n in range(nodes)]
        prom_port = free_port()
        url = f"http://127.0.0.1:{prom_port}"
        argv = prometheus_argv(setup, work, {"scrape_configs": [{"job_name": JOB, "static_configs": targets}]},
                               prom_port)
        with served(argv, work / "prometheus.log", url + "/-/ready") as process, httpx.Client(timeout=300) as client:
            wait_until(lambda: _query(url, "sum(up)") == nodes, timeout=300, interval=2)
            time.sleep(minutes * 60)
            yield Fleet(Engine(url, process.pid, client), time.time(),
                        f"scraped for {minutes} min, {_query(url, 'sum(up)'):.0f} targets up, "
                        f"mean scrape {_query(url, 'avg(scrape_duration_seconds)') * 1000:.0f} ms")


@dataclass(frozen=True)
class SeriesLine:
    """One sample line of the template exposition: its series and value."""

    series: str
    value: float

    @property
    def grows(self) -> bool:
        name = self.series.split("{", 1)[0]
        return name.endswith(GROWING_SUFFIXES) and not FAULT_COUNTER.search(name)


def series_lines(exposition: str) -> list[SeriesLine]:
    """The samples of a text exposition (no timestamps), comments dropped."""
    lines = []
    for line in exposition.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            lines.append(SeriesLine(series, float(value)))
    return lines


def with_target_labels(series: str, node: int) -> str:
    """The series as Prometheus stores it from a scrape of node `node`: with `job` and `instance`."""
    target = f'job="{JOB}",instance="{node_name(node)}"'
    name, brace, labels = series.partition("{")
    return f"{name}{{{target},{labels}" if brace else f"{name}{{{target}}}"


@dataclass(frozen=True)
class NodeSamples:
    """One node's series split by whether the value moves, each with its label set already written."""

    steady: list[str]  # "series value"
    growing: list[str]  # "series "
    clock: list[str]  # "series "


def node_samples(exposition: str, node: int) -> NodeSamples:
    lines = [*series_lines(exposition), SeriesLine("up", 1.0)]
    clock = [line for line in lines if line.series.split("{", 1)[0] in CLOCK_SERIES]
    lines = [line for line in lines if line not in clock]
    return NodeSamples(steady=[f"{with_target_labels(s.series, node)} {s.value!r}" for s in lines if not s.grows],
                       growing=[f"{with_target_labels(s.series, node)} " for s in lines if s.grows],
                       clock=[f"{with_target_labels(s.series, node)} " for s in clock])


def write_openmetrics(path: Path, fleet: list[NodeSamples], growing_values: list[float], times: list[int],
                      since: int) -> int:
    """The fleet's samples at `times` in OpenMetrics, time by time (the order promtool appends them in).
    Counters grow by their template value every hour from `since`, so their rates are the same on every
    node and at every time. Returns the number of samples written."""
    written = 0
    with open(path, "w", buffering=1 << 24) as out:
        for at in times:
            suffix = f" {at}\n"
            scale = 1 + (at - since) / 3600
            tails = [f"{value * scale!r}{suffix}" for value in growing_values]
            for node in fleet:
                out.write(suffix.join(node.steady))
                out.write(suffix)
                out.write("".join(map(str.__add__, node.growing, tails)))
                out.write("".join(f"{series}{at}{suffix}" for series in node.clock))
                written += len(node.steady) + len(node.growing) + len(node.clock)
        out.write("# EOF\n")
    return written


@contextmanager
def backfilled_fleet(setup: Setup, bodies: list[bytes], work: Path) -> Iterator[Fleet]:
    minutes = setup.minutes
    promtool = require_tool("promtool")
    fleet = [node_samples(body.decode(), n) for n, body in enumerate(bodies)]
    growing_values = [s.value for s in series_lines(bodies[0].decode()) if s.grows]
    per_time = len(fleet[0].steady) + len(fleet[0].growing) + len(fleet[0].clock)
    steps_per_slice = max(1, setup.slice_samples // (per_time * len(fleet)))
    began = time.time()
    # The data ends when the backfill is expected to be done; slices past that catch up with the present.
    planned_end = int(began + per_time * len(fleet) * minutes * 60 / SCRAPE_SECONDS / BACKFILL_SAMPLES_PER_SECOND)
    since = int(planned_end - minutes * 60)
    cursor, samples, slices = since, 0, 0
    while cursor <= planned_end or time.time() - cursor >= CATCH_UP_SECONDS:
        newest = min(cursor + (steps_per_slice - 1) * SCRAPE_SECONDS, max(planned_end, int(time.time())))
        times = list(range(cursor, newest + 1, SCRAPE_SECONDS))
        samples += write_openmetrics(work / "slice.om", fleet, growing_values, times, since)
        subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(work / "slice.om"),
                        str(work / "tsdb")], check=True, capture_output=True)
        cursor, slices = times[-1] + SCRAPE_SECONDS, slices + 1
    (work / "slice.om").unlink()
    data_end = cursor - SCRAPE_SECONDS
    backfill_seconds = time.time() - began
    # Prometheus appends rule results only after its newest block: no sample may lie in the future.
    time.sleep(max(0.0, data_end + 1 - time.time()))
    prom_port = free_port()
    url = f"http://127.0.0.1:{prom_port}"
    argv = prometheus_argv(setup, work, {}, prom_port)
    with served(argv, work / "prometheus.log", url + "/-/ready") as process, httpx.Client(timeout=300) as client:
        time.sleep(setup.settle)
        yield Fleet(Engine(url, process.pid, client), data_end,
                    f"backfilled {minutes} min: {samples / 1e6:.1f} M samples in {slices} slices, "
                    f"{len(list((work / 'tsdb').glob('01*')))} blocks, in {backfill_seconds:.0f} s; "
                    f"rules evaluated {setup.settle} s from the start, the newest sample "
                    f"{time.time() - data_end:.0f} s old")


@dataclass(frozen=True)
class Measured:
    """One fleet size's figures, for the comparison across sizes."""

    nodes: int
    groups: dict[str, Cost]
    intervals: dict[str, float]
    panels: list[PanelCost]


def only_families(exposition: str, families: re.Pattern[str]) -> str:
    """The exposition's sample lines of the families whose names match (all of it when the pattern is empty)."""
    return "".join(line + "\n" for line in exposition.splitlines()
                   if line and not line.startswith("#") and families.fullmatch(line.split("{", 1)[0].split(" ")[0]))


def measure(setup: Setup, template: str, nodes: int) -> Measured:
    if setup.families.pattern:
        template = only_families(template, setup.families)
    bodies = [node_exposition(template if n == 0 else healthy(template), n, p).encode()
              for n, p in enumerate(placements(nodes))]
    series = len(series_lines(bodies[0].decode()))
    with tempfile.TemporaryDirectory(prefix="trainmon-fleet-") as tmp:
        work = Path(tmp)
        fleet = (scraped_fleet(setup, bodies, work) if setup.mode == "scrape"
                 else backfilled_fleet(setup, bodies, work))
        with fleet as prometheus:
            engine = prometheus.engine
            url = engine.url
            head = _scalar(url, "prometheus_tsdb_head_series")
            print(f"\n## {nodes} nodes, {setup.mode}: {series} series per node, {nodes * series} fleet series "
                  f"({head:.0f} in the head), {prometheus.note}")
            print(f"load average {' / '.join(f'{v:.2f}' for v in os.getloadavg())} on {os.cpu_count()} cpus, "
                  f"Prometheus used {_scalar(url, 'process_cpu_seconds_total'):.0f} CPU s so far, "
                  f"{_scalar(url, 'process_resident_memory_bytes') / 2**30:.1f} GiB resident")
            evaluations = sampled_evaluations(url, setup.evaluations)
            print(f"over {evaluations.window:.0f} s of evaluations: Prometheus used "
                  f"{evaluations.prometheus_cpu / evaluations.window:.2f} of {os.cpu_count()} cpus, "
                  f"the hypervisor took {evaluations.steal:.1%} (steal)")
            print(table(["slowest rules", "group", "last eval ms"], slowest_rules(url)))
            print(table(["active alert", "state", "instances"], alert_counts(url)))
            ends = DataEnds(raw=prometheus.data_end, recorded=unload_rules(work, engine))
            alone = alone_costs(setup, engine, ends)
            panels = panel_costs(engine, ends, setup.dashboards)
            print("panels, slowest first: wall ms as Grafana waits; the 24 h query's CPU ms and samples (the data "
                  "holds minutes, so most of its steps are empty); samples per node and wall ms of one step that "
                  "has data, and the CPU s of 24 h of such steps (estimate)")
            print(table(["dashboard", "panel", *[f"{r} ms" for r in RANGES], "24h cpu ms", "24h samples",
                         "step samples/node", "step ms", "24h est. cpu s", "series"], panel_rows(panels, nodes)))
            print("rule groups: evaluated together (Prometheus, every group at once on these cpus), and alone "
                  f"(each group's expressions in turn, nothing beside them; CPU ms of the Prometheus process, "
                  f"the engine's ms, samples read); alone, all groups take "
                  f"{sum(alone[g].cpu / evaluations.intervals[g] for g in alone):.2f} cpus")
            print(table(["rule group", "evals", "together median ms", "together max ms", "of interval",
                         "alone cpu ms", "alone engine ms", "alone of interval", "samples", "samples/node",
                         "peak samples"], rule_durations(evaluations, alone, nodes)))
            return Measured(nodes, alone, evaluations.intervals, panels)


def growth(runs: list[Measured]) -> None:
    """Each group's and the slowest panels' cost per node across the fleet sizes: flat columns mean linear
    growth; the last column is the largest run's CPU share of the group's interval."""
    if len(runs) < 2:
        return
    sizes = [str(run.nodes) for run in runs]
    rows: list[list[object]] = [
        [group, *[f"{run.groups[group].samples / run.nodes:.0f}" for run in runs],
         *[f"{run.groups[group].cpu * 1000 / run.nodes:.2f}" for run in runs],
         f"{runs[-1].groups[group].cpu / runs[-1].intervals[group]:.2%}"]
        for group in runs[-1].groups if group in runs[-1].intervals]
    print("\n## growth: rule groups alone, per node")
    print(table(["rule group", *[f"samples/node @{n}" for n in sizes], *[f"cpu ms/node @{n}" for n in sizes],
                 f"of interval @{sizes[-1]}"], rows))
    last = runs[-1].panels  # every run times the same targets in the same order
    slowest = sorted(range(len(last)), key=lambda i: -last[i].estimate_24h)[:10]
    print("\n## growth: the 10 slowest panels at the largest size, one step with data (Fleet panels grow with the "
          "fleet; Node and Training job panels show one node and one 64-node job, whatever the fleet)")
    print(table(["dashboard", "panel", *[f"samples @{n}" for n in sizes], *[f"cpu ms @{n}" for n in sizes],
                 f"24h est. cpu s @{sizes[-1]}"],
                [[last[i].dashboard, last[i].title, *[run.panels[i].full_step.samples for run in runs],
                  *[f"{run.panels[i].full_step.cpu * 1000:.2f}" for run in runs], f"{last[i].estimate_24h:.2f}"]
                 for i in slowest]))


def _query(url: str, expr: str) -> float:
    """The value of a one-sample instant query, 0 when it has none."""
    result = httpx.get(url + "/api/v1/query", params={"query": expr}, timeout=30).json()["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


def _scalar(url: str, name: str) -> float:
    return sum(v for (n, _), v in parse_samples(httpx.get(url + "/metrics", timeout=30).text).items() if n == name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="100,300,1000", help="comma-separated fleet sizes")
    parser.add_argument("--mode", choices=("backfill", "scrape"), default="backfill")
    parser.add_argument("--minutes", type=float, default=None,
                        help="minutes of data: backfilled (default 30) or scraped before measuring (default 2)")
    parser.add_argument("--slice-samples", type=int, default=50_000_000,
                        help="samples per OpenMetrics file promtool turns into a block: each slice is a block, "
                             "and a query reads every block its window overlaps, so fewer is closer to a live "
                             "Prometheus, whose recent data is one head block")
    parser.add_argument("--rules", type=Path, nargs="+", default=RULE_FILES,
                        help="rule files to evaluate (default: the shipped ones), e.g. an older rules.yml")
    parser.add_argument("--evaluations", type=int, default=EVALUATIONS,
                        help="reads of every rule group's last duration, 30 s apart; the median is printed")
    parser.add_argument("--settle", type=float, default=SETTLE_SECONDS,
                        help="seconds the rules run on backfilled data before anything is measured")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each rule expression timed alone")
    parser.add_argument("--families", default="",
                        help="regular expression: only these families on every node, e.g. those that rules read "
                             "over a day, with --minutes 1440 to time those windows over a full day of data")
    parser.add_argument("--dashboards", default="",
                        help="comma-separated dashboards whose panels are timed (default all), e.g. fleet")
    args = parser.parse_args()
    chosen = set(filter(None, args.dashboards.split(",")))
    setup = Setup(prometheus=require_tool("prometheus"), mode=args.mode,
                  minutes=args.minutes if args.minutes is not None else (30.0 if args.mode == "backfill" else 2.0),
                  slice_samples=args.slice_samples, rule_files=[path.resolve() for path in args.rules],
                  dashboards=[d for d in DASHBOARDS if not chosen or d.stem.removeprefix("trainmon-") in chosen],
                  evaluations=args.evaluations, settle=args.settle, rounds=args.rounds,
                  families=re.compile(args.families))
    with started_node(interval=1.0, with_node_exporter=False) as node:
        template = httpx.get(node.trainmon.url + "/metrics", headers={"Accept": "text/plain"}, timeout=10).text
    print(f"machine: {machine()}")
    growth([measure(setup, template, int(nodes)) for nodes in args.nodes.split(",")])


if __name__ == "__main__":
    main()
