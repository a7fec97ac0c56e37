"""End to end: two trainmon daemons on the fake NVML, a real 2-rank gloo job per node, real Prometheus
(loading copies of the shipped rules with every duration divided by 60) and Alertmanager with a
webhook inside the test. A healthy phase fires nothing and every dashboard panel has data; planted
regressions fire their alerts, which reach the webhook.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.alerting_stack import GlooJob, Prometheus, Webhook, alertmanager, fast_rule_files, gloo_job, prometheus
from tests.e2e.alerting_stack import webhook as webhook_receiver
from tests.fake_nvml import scenario
from tests.fake_nvml.fixtures import fake_nvml_dir  # noqa: F401  (fixture)
from tests.grafana.dashboards import DASHBOARD_FILES, data_panels, load, substitute
from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.kubelet import GPU, FakeKubelet, Pod, kubelet_server
from tests.helpers.net import wait_until
from tests.helpers.node import SyntheticNode
from tests.helpers.slurm import run_script
from tests.helpers.tools import require_tool
from tests.prometheus.rulefiles import RULE_FILES

pytestmark = pytest.mark.slow

FACTOR = 60  # the shipped rules' minutes become seconds
INTERVAL = "1s"  # scrape, rule evaluation and daemon collection
HEALTHY_SECONDS = 35  # longer than every shortened `for`
# NCCL Inspector's and RAS's panels: fed by an NCCL job (plugin loaded, RAS listening) or the demo's simulated one;
# these CPU nodes have neither (tests/e2e/test_nccl_view.py serves them from NCCL's own formats).
NCCL_OWN_VIEW = {"Bus bandwidth per communicator member (NCCL Inspector)", "NCCL ranks missing (RAS)"}
# Panels the fake node cannot feed: CPU ranks have no CUDA caching allocator; its healthy GPUs count no
# NVLink or PCIe AER error, and those series appear only at a first error (the demo has both).
# No source on these CPU nodes: CUDA allocator, NVLink, AER, network file systems (no mounts, no checkpoints).
NO_DATA_ON_CPU = {"Allocator retries and OOMs", "NVLink errors per link", "PCIe AER errors", "File-system throughput",
                  "File-system operations", "File-system RPC latency", "File-system RPC timeouts and in flight",
                  "Checkpoint writes and file-system latency"} | NCCL_OWN_VIEW
APPLICATION_XID = 13  # planted: fills the XID panels, must not page


def gpu_node(root: Path, gpus: int) -> SyntheticNode:
    """A synthetic node whose PCI bus lists its GPUs (for trainmon_gpus_expected) and whose GPUs are healthy."""
    node = SyntheticNode(root, gpus=gpus, nvme_namespaces=1, ib_ports=1, nvml=scenario.healthy(gpus))
    for i in range(gpus):
        device = node.sys / "bus" / "pci" / "devices" / f"0000:{0x18 + 16 * i:02x}:00.0"
        device.mkdir(parents=True)
        (device / "vendor").write_text("0x10de\n")
        (device / "class").write_text("0x030200\n")
    return node


def panels_without_data(prom: Prometheus, among: Collection[str] | None = None) -> set[str]:
    """Titles of dashboard panels none of whose queries returns a series (every variable set to All); of those
    titled in `among` only, where given."""
    empty = set()
    for path in DASHBOARD_FILES:
        for panel in data_panels(load(path)):
            title = f"{path.stem}: {panel['title']}"
            if among is not None and title not in among:
                continue
            if not any(prom.query(substitute(t["expr"], "10s")) for t in panel["targets"]):
                empty.add(title)
    return empty


def alert_seen(prom: Prometheus, hook: Webhook, alertname: str, **labels: str) -> Callable[[], bool]:
    """Firing in Prometheus and delivered to the webhook, with `labels`."""

    def matches(alerts: list[dict[str, str]]) -> bool:
        return any(a["alertname"] == alertname and labels.items() <= a.items() for a in alerts)

    return lambda: matches(prom.firing()) and matches(hook.firing())


def straggler_conditions(prom: Prometheus) -> dict[str, list[str]]:
    """For a straggler alert that does not fire: in how many of the last 60 s each of its conditions held."""
    queries = {
        "score": 'rank:trainmon_train_straggler_score:relative{job_id="job-a"} < 0.75',
        "waits less": 'rank:trainmon_train_comm_wait_per_step_time:ratio{job_id="job-a"}',
        "median waits": 'quantile without (instance, rank) (0.5, '
                        'rank:trainmon_train_comm_wait_per_step_time:ratio{job_id="job-a"}) > 0.15',
        "alert": 'ALERTS{alertname="TrainmonStragglerRank"}',
        "scrapes": "up",
    }
    return {name: [f"{r['metric'].get('rank', '')}:{r['value'][1]}"
                   for r in prom.query(f"count_over_time(({query})[60s:1s])")] for name, query in queries.items()}


def names(alerts: list[dict[str, str]]) -> set[str]:
    return {a["alertname"] for a in alerts}


@pytest.fixture
def kubelet_socket() -> Iterator[Path]:
    """A kubelet that allocated both GPUs of a node to one pod (the GPU-owner panels)."""
    pod = Pod("team-a", "trainer-0", {"main": {GPU: [scenario.gpu(0)["uuid"], scenario.gpu(1)["uuid"]]}})
    with tempfile.TemporaryDirectory(prefix="kubelet-") as directory:
        socket = Path(directory) / "kubelet.sock"
        with kubelet_server(socket, FakeKubelet([pod])):
            yield socket


@pytest.mark.timeout(600)  # 130 s alone on 2 cores; its waits add up to more than 300 s on a loaded machine
def test_planted_regressions_fire_and_reach_the_webhook(
    tmp_path: Path,
    fake_nvml_dir: Path,  # noqa: F811
    daemons: list[Daemon],
    kubelet_socket: Path,
) -> None:
    """Healthy: nothing fires. Comm-bound job, stalled rank (and its job's hang, class and culprit), lost GPU,
    straggler: each fires its alert at the webhook.

    At the end every dashboard panel has data, except those a CPU-only rank cannot feed.
    """
    prometheus_bin = require_tool("prometheus")
    alertmanager_bin = require_tool("prometheus-alertmanager", "alertmanager")
    nodes = [gpu_node(tmp_path / f"n{i}", gpus=2) for i in range(2)]
    # GPU owners: node A's GPUs run Slurm job 4242 (the shipped prolog's mapping), node B's a Kubernetes pod.
    run_script("prolog.sh", tmp_path / "job-mapping", "4242", SLURM_JOB_GPUS="0,1")
    owners = (["--hpc-job-mapping-dir", str(tmp_path / "job-mapping")],
              ["--kubelet-pod-resources-socket", str(kubelet_socket)])
    for node, owner_args in zip(nodes, owners, strict=True):
        daemons.append(
            start_daemon(
                node.root,
                args=[*node.daemon_args(node.root / "ingest.sock", interval=1.0), *owner_args],
                env=node.daemon_env(fake_nvml_dir),
            )
        )
    rules = fast_rule_files(list(RULE_FILES), tmp_path, FACTOR, INTERVAL)
    targets = [f"127.0.0.1:{d.port}" for d in daemons]

    def job(i: int) -> Any:
        env = {
            "TRAINMON_JOB_ID": f"job-{'ab'[i]}",
            "TRAINMON_INGEST_SOCKET": str(nodes[i].root / "ingest.sock"),
            "TRAINMON_REPORT_INTERVAL": "0.2",
        }
        ranks = [{"TRAINMON_GPU_UUID": scenario.gpu(r)["uuid"]} for r in range(2)]
        return gloo_job(tmp_path / f"job-{i}", env, ranks, procfs=nodes[i].proc)

    with (
        webhook_receiver() as hook,
        alertmanager(alertmanager_bin, tmp_path, hook.url) as am_url,
        prometheus(prometheus_bin, tmp_path, targets, rules, am_url, INTERVAL) as prom,
        job(0) as job_a,
        job(1) as job_b,
    ):
        jobs: list[GlooJob] = [job_a, job_b]
        # XID 13 is an application error: it fills the XID panels and must not page.
        for node in nodes:
            planted = scenario.healthy(2) | {"xid_events": [{"id": 1, "gpu": 0, "xid": APPLICATION_XID}]}
            scenario.write(node.scenario_path, planted)
        wait_until(lambda: len(prom.query("rank:trainmon_train_compute_per_step_time:ratio >= 0")) == 4, timeout=120)
        wait_until(lambda: len(prom.query("trainmon_gpu_xid_errors_total")) == 2, timeout=30)

        # Healthy: nothing fires and nothing is delivered.
        time.sleep(HEALTHY_SECONDS)
        assert all(j.alive() for j in jobs), "\n".join(j.logs() for j in jobs)
        assert ([], []) == (prom.firing(), hook.firing())

        # Job A turns communication bound; job B's rank 1 hangs; node B loses GPU 1.
        job_a.phase("comm")
        job_b.phase("stall")
        lost = scenario.healthy(2)
        lost["gpus"][1]["errors"] = {"*": 15}  # NVML_ERROR_GPU_IS_LOST on every call
        scenario.write(nodes[1].scenario_path, lost)
        wait_until(alert_seen(prom, hook, "TrainmonCommunicationBound", job_id="job-a"), timeout=90)
        assert "TrainmonStragglerRank" not in names(prom.firing())
        wait_until(alert_seen(prom, hook, "TrainmonTrainingStalled", job_id="job-b", rank="1"), timeout=90)
        wait_until(alert_seen(prom, hook, "TrainmonGPULost", instance=targets[1], gpu="1"), timeout=60)
        # rank 1 never reached the all-reduce rank 0 waits in: a host-side hang, rank 1 its culprit
        wait_until(alert_seen(prom, hook, "TrainmonJobHung", job_id="job-b", rank="1", **{"class": "host"}),
                   timeout=90)

        # Job A's rank 1 becomes a straggler.
        job_a.phase("straggler")
        # 44 s alone on 2 cores; a CI run beside three other workers missed 90 s
        wait_until(alert_seen(prom, hook, "TrainmonStragglerRank", job_id="job-a", rank="1"), timeout=180,
                   explain=lambda: straggler_conditions(prom))

        assert NO_DATA_ON_CPU == {t.split(": ", 1)[1] for t in panels_without_data(prom)}
        assert "TrainmonGPUXidCritical" not in names(hook.firing())
        print(json.dumps(sorted(names(hook.firing()))))
