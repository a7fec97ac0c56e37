"""End to end: a real 3-rank gloo job with the hook, a real daemon and real Prometheus (the shipped rules with
every duration divided by 60). Spikes planted in the values the job passes, on every rank, fire TrainmonGradNormSpike
and TrainmonLossSpike once for the job, and `trainmon diagnose` calls them instability; then one rank computing 50%
longer is named by TrainmonSlowRank with its node and GPU, and by `trainmon diagnose` as a slow rank.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.alerting_stack import Prometheus, fast_rule_files, gloo_job, prometheus
from tests.e2e.test_alerting import gpu_node
from tests.fake_nvml import scenario
from tests.fake_nvml.fixtures import fake_nvml_dir  # noqa: F401  (fixture)
from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.net import wait_until
from tests.helpers.tools import require_tool
from tests.prometheus.rulefiles import REPO, RULE_FILES

pytestmark = pytest.mark.slow

FACTOR = 60
INTERVAL = "1s"
RANKS = 3  # a robust z-score needs peers: with two ranks neither is an outlier of the other
NO_ALERTMANAGER = "http://127.0.0.1:9"  # the alerts are read from Prometheus itself


def firing(prom: Prometheus, alertname: str, **labels: str) -> Callable[[], list[dict[str, str]]]:
    return lambda: [a for a in prom.firing() if a["alertname"] == alertname and labels.items() <= a.items()]


def diagnose(url: str, job: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "trainmon", "diagnose", "--prometheus", url, "--job", job,
                           "--since", "20s", "--json"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 1, done.stdout + done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.serial
@pytest.mark.timeout(900)  # three waits of minutes each on a real 3-rank job
def test_planted_spikes_and_a_slow_rank_fire_and_are_diagnosed(
    tmp_path: Path,
    fake_nvml_dir: Path,  # noqa: F811
    daemons: list[Daemon],
) -> None:
    prometheus_bin = require_tool("prometheus")
    node = gpu_node(tmp_path / "node", gpus=RANKS)
    daemons.append(start_daemon(node.root, args=node.daemon_args(node.root / "ingest.sock", interval=1.0),
                                env=node.daemon_env(fake_nvml_dir)))
    rules = fast_rule_files(list(RULE_FILES), tmp_path, FACTOR, INTERVAL)
    env = {"TRAINMON_JOB_ID": "numerics", "TRAINMON_INGEST_SOCKET": str(node.root / "ingest.sock"),
           "TRAINMON_REPORT_INTERVAL": "0.2"}
    uuids = [scenario.gpu(r)["uuid"] for r in range(RANKS)]
    with (
        prometheus(prometheus_bin, tmp_path, [f"127.0.0.1:{daemons[0].port}"], rules, NO_ALERTMANAGER,
                   INTERVAL) as prom,
        gloo_job(tmp_path / "job", env, [{"TRAINMON_GPU_UUID": u} for u in uuids]) as job,
    ):
        wait_until(lambda: len(prom.query("rank:trainmon_train_compute_seconds_per_step:zscore")) == RANKS,
                   timeout=120)
        assert [] == firing(prom, "TrainmonGradNormSpike")() + firing(prom, "TrainmonLossSpike")()

        job.phase("spike")
        # Both fire once for the job (every rank spiked) for the 10 s (10 minutes, shipped) their `increase` window
        # holds the spikes, with no per-rank alert beside it.
        wait_until(lambda: [{"scope": "job"}] * 2 == [
            {"scope": a["scope"]} for name in ("TrainmonGradNormSpike", "TrainmonLossSpike")
            for a in firing(prom, name, job_id="numerics")()], timeout=90)

        def instability() -> list[dict[str, Any]]:
            return [f for f in diagnose(prom.url, "numerics")["findings"] if f["cause"] == "instability"]

        spikes = instability()
        assert [list(range(RANKS))] == [f["ranks"] for f in spikes]
        # The step window comes from the evaluations (every 2 s over the 20 s window) whose last minute saw a
        # spike counter rise: on a loaded machine the alerts can fire after the spike left that minute.
        window = spikes[0].get("step_window", [0, 0])
        assert window[0] <= window[1]

        job.phase("slow")
        slow = firing(prom, "TrainmonSlowRank", job_id="numerics", rank=str(RANKS - 1))
        wait_until(lambda: bool(slow()), timeout=300)  # real CPU ranks: a loaded machine adds noise to the z-score
        assert {"instance": f"127.0.0.1:{daemons[0].port}", "uuid": uuids[-1]}.items() <= slow()[0].items()
        assert len(firing(prom, "TrainmonSlowRank")()) == 1
        named = [f for f in diagnose(prom.url, "numerics")["findings"] if f["cause"] in {"slow_rank", "straggler"}]
        assert [(RANKS - 1, uuids[-1])] == [(f["rank"], f["uuid"]) for f in named]
        assert job.alive(), job.logs()
