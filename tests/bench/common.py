"""Shared pieces of the benchmarks: a started node with trainmon and node_exporter, timing, tables."""

from __future__ import annotations

import argparse
import http.client
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.fake_nvml.build import build_fake_nvml
from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.net import wait_until
from tests.helpers.node import RankFeeder, SyntheticNode
from tests.helpers.node_exporter import node_exporter

# What Prometheus 2.42 sends on every scrape.
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
SCRAPE_HEADERS = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}


@dataclass
class Node:
    node: SyntheticNode
    trainmon: Daemon
    feeder: RankFeeder
    node_exporter_url: str | None


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    return f"{platform.node()}: {cpu}, {len(Path('/proc/cpuinfo').read_text().split('processor')) - 1} cpus, " \
           f"Python {platform.python_version()}"


@contextmanager
def started_node(gpus: int = 8, namespaces: int = 16, ports: int = 8, ranks: int = 8, interval: float = 5.0,
                 with_node_exporter: bool = True, wrapper: Sequence[str] = ()) -> Iterator[Node]:
    with tempfile.TemporaryDirectory(prefix="trainmon-bench-") as tmp:
        root = Path(tmp)
        node = SyntheticNode(root, gpus=gpus, nvme_namespaces=namespaces, ib_ports=ports)
        compiler = shutil.which("gcc") or shutil.which("cc")
        if compiler is None:
            raise SystemExit("the benchmarks need gcc for the fake libnvidia-ml.so.1")
        nvml_dir = build_fake_nvml(compiler, root / "nvml")
        socket_path = root / "ingest.sock"
        daemon = start_daemon(root, node.daemon_args(socket_path, interval), env=node.daemon_env(nvml_dir),
                              wrapper=wrapper)
        feeder = RankFeeder(socket_path, ranks)
        try:
            if ranks:
                feeder.send_all(step=10)
                wait_until(lambda: f'rank="{ranks - 1}"' in daemon.metrics_text(), timeout=3 * interval + 5)
            if not with_node_exporter:
                yield Node(node, daemon, feeder, None)
                return
            binary = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
            if binary is None:
                raise SystemExit("the scrape benchmark needs Debian's prometheus-node-exporter")
            with node_exporter(binary, node.proc, node.sys) as url:
                yield Node(node, daemon, feeder, url)
        finally:
            feeder.close()
            daemon.stop()


class Scraper:
    """One keep-alive connection, as Prometheus keeps one per target."""

    def __init__(self, url: str) -> None:
        parsed = httpx.URL(url)
        self._connection = http.client.HTTPConnection(parsed.host, parsed.port, timeout=30)
        self._path = parsed.path

    def scrape(self) -> tuple[float, int]:
        """Seconds to fetch the whole body, and its size."""
        start = time.perf_counter()
        self._connection.request("GET", self._path, headers=SCRAPE_HEADERS)
        response = self._connection.getresponse()
        body = response.read()
        elapsed = time.perf_counter() - start
        if response.status != 200:
            raise RuntimeError(f"scrape answered {response.status}")
        return elapsed, len(body)

    def close(self) -> None:
        self._connection.close()


def series_count(url: str) -> int:
    text = httpx.get(url, headers={"Accept": "text/plain"}, timeout=10).text
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [list(map(str, headers)), *[list(map(str, r)) for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def mean(values: Sequence[float]) -> float:
    return statistics.fmean(values)


def arguments(description: str, **defaults: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    for name, default in defaults.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    return parser.parse_args()
