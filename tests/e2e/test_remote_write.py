"""Remote write for real: Prometheus in agent mode sends a trainmon node to VictoriaMetrics single-node;
vmalert evaluates the shipped recording and alert rules against it and writes the results back; a planted
straggler's alert fires there and the Fleet dashboard's queries are answered by VictoriaMetrics' API.

The rule files are test-time copies with every duration divided by FACTOR (tests/e2e/alerting_stack.py).
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from tests.e2e.alerting_stack import Prometheus, alertmanager, fast_rule_files, served, webhook
from tests.fake_nvml.build import build_fake_nvml
from tests.grafana.dashboards import DASHBOARD_DIR, exprs, load, substitute
from tests.helpers.daemon import start_daemon
from tests.helpers.net import free_port, wait_until
from tests.helpers.node import SyntheticNode, rank_report
from tests.helpers.tools import require_tool
from trainmon.wire import encode

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
FACTOR = 20  # 5m windows become 15 s, the straggler alert's `for: 10m` 30 s
RANKS = 4
STRAGGLER = 3
JOB_ID = "remote-job"
# What this node does not serve: ownership (no kubelet or Slurm mapping), trainmon_gpus_expected (its
# synthetic sysfs has no PCI tree) and XID counts (no XID happened).
NOT_ON_THIS_NODE = re.compile(r"(namespace|job_id):trainmon_gpu_|trainmon_gpus_expected|trainmon_gpu_xid_errors")


@contextmanager
def victoria_metrics(binary: str, work: Path) -> Iterator[Prometheus]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # latencyOffset 0 and no cache: samples written a second ago are answered at once.
    argv = [binary, f"-storageDataPath={work / 'vm-data'}", f"-httpListenAddr=127.0.0.1:{port}",
            "-search.latencyOffset=0s", "-search.disableCache"]
    with served(argv, work / "victoria-metrics.log", url + "/health"):
        yield Prometheus(url)


@contextmanager
def prometheus_agent(binary: str, work: Path, target: str, remote_write_url: str) -> Iterator[None]:
    port = free_port()
    config = {
        "global": {"scrape_interval": "2s", "external_labels": {"cluster": "test-cluster"}},
        "scrape_configs": [{"job_name": "trainmon", "static_configs": [{"targets": [target]}]}],
        "remote_write": [{"url": remote_write_url, "queue_config": {"batch_send_deadline": "1s"}}],
    }
    (work / "agent.yml").write_text(yaml.safe_dump(config))
    argv = [binary, "--enable-feature=agent", f"--config.file={work / 'agent.yml'}",
            f"--storage.agent.path={work / 'agent-data'}", f"--web.listen-address=127.0.0.1:{port}"]
    with served(argv, work / "prometheus-agent.log", f"http://127.0.0.1:{port}/-/ready"):
        yield


@contextmanager
def vmalert(binary: str, work: Path, backend: Prometheus, rule_files: list[Path],
            alertmanager_url: str) -> Iterator[None]:
    port = free_port()
    argv = [binary, *(f"-rule={p}" for p in rule_files), f"-datasource.url={backend.url}",
            f"-remoteWrite.url={backend.url}", f"-notifier.url={alertmanager_url}",
            "-evaluationInterval=5s", "-remoteWrite.flushInterval=1s", f"-httpListenAddr=127.0.0.1:{port}",
            "-external.label=cluster=test-cluster"]
    with served(argv, work / "vmalert.log", f"http://127.0.0.1:{port}/health"):
        yield


@contextmanager
def straggling_job(ingest_socket: Path) -> Iterator[None]:
    """RANKS ranks of one job stepping every 0.5 s; all but STRAGGLER wait half of each step in
    collectives, STRAGGLER computes the whole step (the others wait for it)."""
    stop = threading.Event()

    def feed() -> None:
        seq = 0
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            for step in range(1, 100_000):
                for rank in range(RANKS):
                    seq += 1
                    report = rank_report(JOB_ID, rank, RANKS, step, seq)
                    report = dataclasses.replace(report, comm_wait=step * (0.02 if rank == STRAGGLER else 0.4))
                    sock.sendto(encode(report), os.fspath(ingest_socket))
                if stop.wait(0.5):
                    return

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def test_rules_alerts_and_fleet_queries_work_on_victoria_metrics(tmp_path: Path) -> None:
    vm_binary = require_tool("victoria-metrics")
    vmalert_binary = require_tool("vmalert")
    prometheus_binary = require_tool("prometheus")
    alertmanager_binary = require_tool("prometheus-alertmanager", "alertmanager")
    node = SyntheticNode(tmp_path / "node")
    nvml = build_fake_nvml(require_tool("gcc", "cc"), tmp_path / "nvml")
    rules = fast_rule_files([REPO / "prometheus" / "rules.yml", REPO / "prometheus" / "alerts.yml"],
                            tmp_path, FACTOR, "5s")
    ingest = tmp_path / "ingest.sock"
    daemon = start_daemon(tmp_path, [*node.daemon_args(ingest, 1.0), "--profile", "fleet"],
                          env=node.daemon_env(nvml))
    try:
        with (victoria_metrics(vm_binary, tmp_path) as backend, webhook() as hook,
              alertmanager(alertmanager_binary, tmp_path, hook.url) as am_url,
              prometheus_agent(prometheus_binary, tmp_path, daemon.url.split("//")[1],
                               backend.url + "/api/v1/write"),
              vmalert(vmalert_binary, tmp_path, backend, rules, am_url), straggling_job(ingest)):
            firing = f'ALERTS{{alertname="TrainmonStragglerRank", alertstate="firing", job_id="{JOB_ID}"}}'
            wait_until(lambda: backend.query(firing), timeout=150, interval=2)

            assert [r["metric"]["rank"] for r in backend.query(firing)] == [str(STRAGGLER)]
            assert backend.query(f'rank:trainmon_train_straggler_score:relative{{rank="{STRAGGLER}"}} < 0.75')
            assert backend.query('up{job="trainmon", cluster="test-cluster"}')
            answered = {expr: backend.query(substitute(expr, "1m"))
                        for expr in exprs(load(DASHBOARD_DIR / "trainmon-fleet.json"))}
            empty = [expr for expr, result in answered.items() if not result]
            assert [e for e in empty if not NOT_ON_THIS_NODE.search(e)] == [], empty
            wait_until(lambda: any(a.get("alertname") == "TrainmonStragglerRank" for a in hook.firing()), timeout=30)
    finally:
        daemon.stop()
