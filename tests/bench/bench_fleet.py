"""N simulated nodes scraped by a real Prometheus 2.42 running the shipped rules: rule-group evaluation
time and the range-query time of every dashboard panel, per N.

    python -m tests.bench.bench_fleet                    # --nodes 100,300,1000 --minutes 2

One real node (the daemon on the fake NVML and a synthetic tree, 8 ranks fed through the hook's wire)
gives the exposition; each simulated node is that text with its own GPU UUIDs and its share of a
training job (jobs of 1 to 64 nodes, ranks numbered across the job), served by one HTTP server as
/metrics/<node> and scraped as its own target (`instance` = node name). The values stay those of the
one real node, so the TSDB holds what the fleet serves but counters do not move. The 24 h range
queries cover only the minutes the benchmark ran, so they measure the step count, not 24 h of chunks.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import threading
import time
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


@dataclass(frozen=True)
class Placement:
    job_id: str
    first_rank: int
    world_size: int


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


def rule_durations(prometheus_url: str) -> list[list[object]]:
    samples = parse_samples(httpx.get(prometheus_url + "/metrics", timeout=30).text)
    rows = []
    for (name, labels), value in sorted(samples.items()):
        if name == "prometheus_rule_group_last_duration_seconds":
            group = dict(labels)["rule_group"]
            interval = samples[("prometheus_rule_group_interval_seconds", labels)]
            rows.append([group.split(";", 1)[1], f"{value * 1000:.1f}", f"{value / interval:.2%}"])
    return rows


def query_times(prometheus_url: str, now: float) -> list[list[object]]:
    rows = []
    for dashboard in DASHBOARDS:
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


def measure(binary: str, template: str, nodes: int, minutes: float) -> None:
    bodies = [node_exposition(template, n, p).encode() for n, p in enumerate(placements(nodes))]
    series = sum(1 for line in bodies[0].decode().splitlines() if line and not line.startswith("#"))
    with fleet_server(bodies) as port, tempfile.TemporaryDirectory(prefix="trainmon-fleet-") as tmp:
        work = Path(tmp)
        targets = [{"targets": [f"127.0.0.1:{port}"], "labels": {"instance": f"node-{n:04d}",
                                                                  "__metrics_path__": f"/metrics/{n}"}}
                   for n in range(nodes)]
        config = {"global": {"scrape_interval": "15s", "evaluation_interval": "30s"},
                  "rule_files": [str(p) for p in RULE_FILES],
                  "scrape_configs": [{"job_name": "trainmon", "static_configs": targets}]}
        (work / "prometheus.yml").write_text(yaml.safe_dump(config))
        prom_port = free_port()
        url = f"http://127.0.0.1:{prom_port}"
        argv = [binary, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}"]
        with served(argv, work / "prometheus.log", url + "/-/ready"):
            wait_until(lambda: _query(url, "sum(up)") == nodes, timeout=300, interval=2)
            time.sleep(minutes * 60)
            head = _scalar(url, "prometheus_tsdb_head_series")
            print(f"\n## {nodes} nodes: {series} series per node, {head:.0f} head series, ran {minutes} min, "
                  f"{_query(url, 'sum(up)'):.0f} targets up, mean scrape "
                  f"{_query(url, 'avg(scrape_duration_seconds)') * 1000:.0f} ms")
            print(table(["rule group", "last eval ms", "of interval"], rule_durations(url)))
            print(table(["dashboard", "panel", *[f"{r} ms" for r in RANGES], "series"],
                        query_times(url, time.time())))


def _query(url: str, expr: str) -> float:
    """The value of a one-sample instant query, 0 when it has none."""
    result = httpx.get(url + "/api/v1/query", params={"query": expr}, timeout=30).json()["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


def _scalar(url: str, name: str) -> float:
    return sum(v for (n, _), v in parse_samples(httpx.get(url + "/metrics", timeout=30).text).items() if n == name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="100,300,1000", help="comma-separated fleet sizes")
    parser.add_argument("--minutes", type=float, default=2.0, help="scraping and rule evaluation before measuring")
    args = parser.parse_args()
    binary = require_tool("prometheus")
    with started_node(interval=1.0, with_node_exporter=False) as node:
        template = httpx.get(node.trainmon.url + "/metrics", headers={"Accept": "text/plain"}, timeout=10).text
    print(f"machine: {machine()}")
    for nodes in (int(n) for n in args.nodes.split(",")):
        measure(binary, template, nodes, args.minutes)


if __name__ == "__main__":
    main()
