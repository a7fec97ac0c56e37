"""N simulated nodes under a real Prometheus 2.42 running the shipped rules: rule-group evaluation time and
the range-query time of every dashboard panel, per N.

    python -m tests.bench.bench_fleet                          # --mode backfill --nodes 100,300,1000 --minutes 30
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

Either way the 24 h range queries cover only the minutes of data there are, so they measure the step
count, not 24 h of chunks.
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
# Range queries as Grafana sends them for a ~1,000 px wide panel.
RANGES = {"1h": (3600, 15), "24h": (86400, 90)}
UUID = re.compile(r'GPU-00000000-0000-0000-0000-0000000000(\d\d)')
RANK = re.compile(r'\brank="(\d+)"')
JOB = "trainmon"
SCRAPE_SECONDS = 15
# promtool's pace turning OpenMetrics into blocks on the shared 2-core build machine (it reads, then appends).
BACKFILL_SAMPLES_PER_SECOND = 90_000
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
    errors, pending row remaps, narrowed PCIe links): all nodes but the first are healthy, as in a fleet."""
    width = {}
    for line in exposition.splitlines():
        if line.startswith("trainmon_gpu_pcie_link_width{") and 'kind="max"' in line:
            series, value = line.rsplit(" ", 1)
            width[series.replace('kind="max"', 'kind="current"')] = value
    lines = []
    for line in exposition.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            name = series.split("{", 1)[0]
            if (FAULT_COUNTER.search(name) and name.endswith("_total")) or name in REMAP_FLAGS:
                value = "0.0"
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
    expr = expr.replace("$__rate_interval", "1m").replace("$__interval", "1m").replace("$__range", "1h")
    expr = re.sub(r'(\w+)\s*=\s*"\$\{?\w+\}?"', r'\1=~".*"', expr)
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


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


def alone_durations(setup: Setup, work: Path, url: str, rounds: int = 3) -> dict[str, float]:
    """Each group's cost on its own: the rules are unloaded (a config reload), then every group's
    expressions run one after another as instant queries at one time, the group's time being the sum
    of the engine's evaluation times (`stats=all`). On two cores the groups' concurrent evaluations
    slow each other down; this is what a group takes where there are cores to spare. Alert template
    expansion and writing the results are not in it. The median of `rounds`."""
    config = yaml.safe_load((work / "prometheus.yml").read_text())
    (work / "prometheus.yml").write_text(yaml.safe_dump({**config, "rule_files": []}))
    httpx.post(url + "/-/reload", timeout=60).raise_for_status()
    at = time.time()
    groups = [(group["name"], [rule["expr"] for rule in group["rules"]])
              for path in setup.rule_files for group in yaml.safe_load(path.read_text())["groups"]]
    seconds: dict[str, list[float]] = {name: [] for name, _ in groups}
    for _ in range(rounds):
        for name, exprs in groups:
            seconds[name].append(sum(_evaluation_seconds(url, f"count(({expr}))", at) for expr in exprs))
    return {name: statistics.median(values) for name, values in seconds.items()}


def _evaluation_seconds(url: str, expr: str, at: float) -> float:
    response = httpx.get(url + "/api/v1/query", params={"query": expr, "time": at, "stats": "all"}, timeout=120)
    return float(response.json()["data"]["stats"]["timings"]["evalTotalTime"])


def rule_durations(evaluations: Evaluations, alone: dict[str, float]) -> list[list[object]]:
    rows: list[list[object]] = []
    for group, durations in evaluations.seconds.items():
        interval, median = evaluations.intervals[group], statistics.median(durations)
        rows.append([group, len(durations), f"{median * 1000:.1f}", f"{max(durations) * 1000:.1f}",
                     f"{median / interval:.2%}", f"{alone[group] * 1000:.1f}", f"{alone[group] / interval:.2%}"])
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


def query_times(prometheus_url: str, now: float, dashboards: list[Path]) -> list[list[object]]:
    rows = []
    for dashboard in dashboards:
        for title, expr in panel_queries(dashboard):
            row: list[object] = [dashboard.stem.removeprefix("trainmon-"), title[:40]]
            for seconds, step in RANGES.values():
                start = time.perf_counter()
                answer = httpx.get(prometheus_url + "/api/v1/query_range", timeout=120, params={
                    "query": expr, "start": now - seconds, "end": now, "step": step}).json()
                if answer["status"] != "success":
                    raise RuntimeError(f"{title}: {expr}: {answer}")
                row.append(f"{(time.perf_counter() - start) * 1000:.0f}")
            row.append(len(answer["data"]["result"]))
            rows.append(row)
    return rows


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


@dataclass(frozen=True)
class Fleet:
    """A Prometheus holding the fleet's data and evaluating the shipped rules."""

    url: str
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
        with served(argv, work / "prometheus.log", url + "/-/ready"):
            wait_until(lambda: _query(url, "sum(up)") == nodes, timeout=300, interval=2)
            time.sleep(minutes * 60)
            yield Fleet(url, time.time(), f"scraped for {minutes} min, {_query(url, 'sum(up)'):.0f} targets up, "
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
    with served(prometheus_argv(setup, work, {}, prom_port), work / "prometheus.log", url + "/-/ready"):
        time.sleep(SETTLE_SECONDS)
        yield Fleet(url, data_end, f"backfilled {minutes} min: {samples / 1e6:.1f} M samples in {slices} slices, "
                    f"{len(list((work / 'tsdb').glob('01*')))} blocks, in {backfill_seconds:.0f} s; "
                    f"rules evaluated {SETTLE_SECONDS} s from the start, the newest sample "
                    f"{time.time() - data_end:.0f} s old")


def measure(setup: Setup, template: str, nodes: int) -> None:
    bodies = [node_exposition(template if n == 0 else healthy(template), n, p).encode()
              for n, p in enumerate(placements(nodes))]
    series = len(series_lines(bodies[0].decode()))
    with tempfile.TemporaryDirectory(prefix="trainmon-fleet-") as tmp:
        work = Path(tmp)
        fleet = (scraped_fleet(setup, bodies, work) if setup.mode == "scrape"
                 else backfilled_fleet(setup, bodies, work))
        with fleet as prometheus:
            url = prometheus.url
            head = _scalar(url, "prometheus_tsdb_head_series")
            print(f"\n## {nodes} nodes, {setup.mode}: {series} series per node, {nodes * series} fleet series "
                  f"({head:.0f} in the head), {prometheus.note}")
            print(f"load average {' / '.join(f'{v:.2f}' for v in os.getloadavg())} on {os.cpu_count()} cpus, "
                  f"Prometheus used {_scalar(url, 'process_cpu_seconds_total'):.0f} CPU s so far")
            evaluations = sampled_evaluations(url, setup.evaluations)
            print(f"over {evaluations.window:.0f} s of evaluations: Prometheus used "
                  f"{evaluations.prometheus_cpu / evaluations.window:.2f} of {os.cpu_count()} cpus, "
                  f"the hypervisor took {evaluations.steal:.1%} (steal)")
            print(table(["slowest rules", "group", "last eval ms"], slowest_rules(url)))
            print(table(["active alert", "state", "instances"], alert_counts(url)))
            print(table(["dashboard", "panel", *[f"{r} ms" for r in RANGES], "series"],
                        query_times(url, time.time(), setup.dashboards)))
            alone = alone_durations(setup, work, url)
            print("rule groups: evaluated together (Prometheus, every group at once on these cpus), and alone "
                  f"(each group's expressions in turn, nothing beside them); alone, all groups take "
                  f"{sum(alone[g] / evaluations.intervals[g] for g in alone):.2f} cpus")
            print(table(["rule group", "evals", "together median ms", "together max ms", "of interval", "alone ms",
                         "alone of interval"], rule_durations(evaluations, alone)))


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
    parser.add_argument("--slice-samples", type=int, default=10_000_000,
                        help="samples per OpenMetrics file promtool turns into a block (it reads the file whole)")
    parser.add_argument("--rules", type=Path, nargs="+", default=RULE_FILES,
                        help="rule files to evaluate (default: the shipped ones), e.g. an older rules.yml")
    parser.add_argument("--evaluations", type=int, default=EVALUATIONS,
                        help="reads of every rule group's last duration, 30 s apart; the median is printed")
    parser.add_argument("--dashboards", default="",
                        help="comma-separated dashboards whose panels are timed (default all), e.g. fleet")
    args = parser.parse_args()
    chosen = set(filter(None, args.dashboards.split(",")))
    setup = Setup(prometheus=require_tool("prometheus"), mode=args.mode,
                  minutes=args.minutes if args.minutes is not None else (30.0 if args.mode == "backfill" else 2.0),
                  slice_samples=args.slice_samples, rule_files=[path.resolve() for path in args.rules],
                  dashboards=[d for d in DASHBOARDS if not chosen or d.stem.removeprefix("trainmon-") in chosen],
                  evaluations=args.evaluations)
    with started_node(interval=1.0, with_node_exporter=False) as node:
        template = httpx.get(node.trainmon.url + "/metrics", headers={"Accept": "text/plain"}, timeout=10).text
    print(f"machine: {machine()}")
    for nodes in (int(n) for n in args.nodes.split(",")):
        measure(setup, template, nodes)


if __name__ == "__main__":
    main()
