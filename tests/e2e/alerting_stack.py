"""Real Prometheus and Alertmanager on loopback for the alerting test, a webhook inside the test, and
test-time copies of the shipped rule files with every duration shortened.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.helpers.net import free_port, wait_until

SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DURATION = re.compile(r"(\d+)([smhd])")
# `time() - <series> > 900`: an age threshold in seconds (stalls, XID recency).
AGE_THRESHOLD = re.compile(r"(time\(\) - [^\n]*?[<>]) (\d+)\b")


def _shorten(duration: str, factor: int) -> str:
    number, unit = DURATION.fullmatch(duration).groups()  # type: ignore[union-attr]
    return f"{max(1, int(number) * SECONDS[unit] // factor)}s"


def shorten_expr(expr: str, factor: int) -> str:
    """Range windows, offsets and age thresholds divided by `factor`: a test-time copy, same logic."""
    expr = re.sub(r"\[(\d+[smhd])\]", lambda m: f"[{_shorten(m[1], factor)}]", expr)
    expr = re.sub(r"offset (\d+[smhd])", lambda m: f"offset {_shorten(m[1], factor)}", expr)
    return AGE_THRESHOLD.sub(lambda m: f"{m[1]} {max(1, int(m[2]) // factor)}", expr)


def fast_rule_files(sources: list[Path], target: Path, factor: int, interval: str) -> list[Path]:
    """Copies of `sources` under `target` evaluated every `interval`, every duration divided by `factor`."""
    written = []
    for source in sources:
        document = yaml.safe_load(source.read_text())
        for group in document["groups"]:
            group["interval"] = interval
            for rule in group["rules"]:
                rule["expr"] = shorten_expr(rule["expr"], factor)
                if "for" in rule:
                    rule["for"] = _shorten(rule["for"], factor)
        path = target / source.name
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        written.append(path)
    return written


@dataclass
class Webhook:
    """An Alertmanager webhook receiver: every alert of every notification, in arrival order."""

    alerts: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0

    def firing(self) -> list[dict[str, str]]:
        with self.lock:
            return [a["labels"] for a in self.alerts if a["status"] == "firing"]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/alerts"


@contextmanager
def webhook() -> Iterator[Webhook]:
    hook = Webhook()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with hook.lock:
                hook.alerts.extend(body["alerts"])
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hook.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def served(argv: list[str], log: Path, ready_url: str) -> Iterator[subprocess.Popen[bytes]]:
    """Run a server process until the block ends; wait until `ready_url` answers 200. Yields the process."""
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: process.poll() is None and httpx.get(ready_url, timeout=2).status_code == 200, timeout=60)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def alertmanager(binary: str, work: Path, receiver_url: str) -> Iterator[str]:
    """Alertmanager routing every alert to `receiver_url` at once; yields its URL."""
    port = free_port()
    config = {
        "route": {
            "receiver": "test",
            "group_by": ["alertname", "job_id", "instance"],
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [{"name": "test", "webhook_configs": [{"url": receiver_url, "send_resolved": True}]}],
    }
    (work / "alertmanager.yml").write_text(yaml.safe_dump(config))
    url = f"http://127.0.0.1:{port}"
    argv = [
        binary,
        f"--config.file={work / 'alertmanager.yml'}",
        f"--storage.path={work / 'am-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    with served(argv, work / "alertmanager.log", url + "/-/ready"):
        yield url


@dataclass(frozen=True)
class Prometheus:
    url: str

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = httpx.get(self.url + "/api/v1/query", params={"query": expr}, timeout=10).json()
        assert "success" == answer["status"], (expr, answer)
        return answer["data"]["result"]  # type: ignore[no-any-return]

    def firing(self) -> list[dict[str, str]]:
        return [r["metric"] for r in self.query('ALERTS{alertstate="firing"}')]


@contextmanager
def prometheus(
    binary: str, work: Path, targets: list[str], rule_files: list[Path], alertmanager_url: str, interval: str
) -> Iterator[Prometheus]:
    """Prometheus scraping `targets` as job "trainmon" every `interval`, alerting to Alertmanager."""
    port = free_port()
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(p) for p in rule_files],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager_url.split("//")[1]]}]}]},
        "scrape_configs": [{"job_name": "trainmon", "static_configs": [{"targets": targets}]}],
    }
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    url = f"http://127.0.0.1:{port}"
    argv = [
        binary,
        f"--config.file={work / 'prometheus.yml'}",
        f"--storage.tsdb.path={work / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with served(argv, work / "prometheus.log", url + "/-/ready"):
        yield Prometheus(url)


@dataclass
class GlooJob:
    """The two ranks of `tests.e2e.alerting_job` on one node; `phase()` switches what they do."""

    out: Path
    processes: list[subprocess.Popen[bytes]]

    def phase(self, name: str) -> None:
        partial = self.out / "phase.partial"
        partial.write_text(name)
        partial.replace(self.out / "phase")

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.processes)

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.out.glob("rank-*.log")))


@contextmanager
def gloo_job(out: Path, env: dict[str, str], rank_env: list[dict[str, str]],
             procfs: Path | None = None) -> Iterator[GlooJob]:
    """Start one process per entry of `rank_env` (its rank's extra variables); kill them at the end. A daemon
    reading the synthetic tree `procfs` sees each rank's process there (a link to its /proc entry): alive while
    it runs, gone once it dies."""
    out.mkdir(parents=True, exist_ok=True)
    port = str(free_port())
    processes = []
    for rank, extra in enumerate(rank_env):
        full = {k: v for k, v in os.environ.items() if not k.startswith("TRAINMON_")}
        full.update(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            RANK=str(rank),
            WORLD_SIZE=str(len(rank_env)),
            LOCAL_RANK=str(rank),
            OMP_NUM_THREADS="1",
            **env,
            **extra,
        )
        with open(out / f"rank-{rank}.log", "wb") as log:
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tests.e2e.alerting_job", str(out)],
                    env=full,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
    if procfs is not None:
        for process in processes:
            (procfs / str(process.pid)).symlink_to(f"/proc/{process.pid}")
    job = GlooJob(out=out, processes=processes)
    try:
        yield job
    finally:
        for process in processes:
            process.kill()
            process.wait()
