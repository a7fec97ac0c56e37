"""End to end: a 3-rank gloo job under `torchrun` whose rank 2 stops issuing collectives, the daemon,
real Prometheus 2.42 with the shipped rules (the hang threshold lowered through the generator's
config, every other duration divided by 60) and Alertmanager: `TrainmonCollectiveHang` reaches the
webhook naming rank 2 with its node and GPU, and the in-flight series show ranks 0 and 1 waiting.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from prometheus.rulegen.config import RulesConfig
from prometheus.rulegen.render import rule_files

from tests.e2e.alerting_stack import alertmanager, fast_rule_files, prometheus
from tests.e2e.alerting_stack import webhook as webhook_receiver
from tests.e2e.test_alerting import alert_seen
from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.net import free_port, wait_until
from tests.helpers.tools import require_tool

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
HANG_SECONDS = 5
INTERVAL = "1s"


def test_the_rank_that_stopped_issuing_collectives_is_named(tmp_path: Path, daemons: list[Daemon]) -> None:
    prometheus_bin = require_tool("prometheus")
    alertmanager_bin = require_tool("prometheus-alertmanager", "alertmanager")
    daemons.append(daemon := start_daemon(tmp_path, ["--collectors", "training", "--interval", "1"]))
    generated = tmp_path / "generated"
    generated.mkdir()
    for name, text in rule_files(RulesConfig(collective_hang_seconds=HANG_SECONDS)).items():
        (generated / name).write_text(text)
    rules = fast_rule_files(sorted(generated.glob("*.yml")), tmp_path, 60, INTERVAL)
    instance = f"127.0.0.1:{daemon.port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINMON_")}
    env.update(TRAINMON_JOB_ID="hang-e2e", TRAINMON_INGEST_SOCKET=str(tmp_path / "ingest.sock"),
               TRAINMON_REPORT_INTERVAL="0.2", OMP_NUM_THREADS="1")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "3", "--master-addr",
                "127.0.0.1", "--master-port", str(free_port()), "-m", "tests.e2e.hang_job"]
    with (
        webhook_receiver() as hook,
        alertmanager(alertmanager_bin, tmp_path, hook.url) as am_url,
        prometheus(prometheus_bin, tmp_path, [instance], rules, am_url, INTERVAL) as prom,
        open(tmp_path / "torchrun.log", "wb") as log,
    ):
        job = subprocess.Popen(torchrun, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
        try:
            wait_until(alert_seen(prom, hook, "TrainmonCollectiveHang", job_id="hang-e2e", rank="2",
                                  cause="lagging_rank", instance=instance, uuid="GPU-e2e-2"), timeout=120)
            waiting = prom.query('trainmon_nccl_inflight_oldest_seconds{job_id="hang-e2e"}')
            lag = prom.query('rank_group:trainmon_nccl_issued:lag{job_id="hang-e2e"} > 0')

            assert job.poll() is None, (tmp_path / "torchrun.log").read_text()
            assert {"0", "1"} == {s["metric"]["rank"] for s in waiting}
            assert all(float(s["value"][1]) > HANG_SECONDS for s in waiting)
            assert [("2", "1")] == [(s["metric"]["rank"], s["value"][1]) for s in lag]
            assert not [a for a in hook.firing() if a.get("cause") in ("network_or_nccl", "member_missing")]
        finally:  # torchrun starts each worker in a session of its own: kill them by name, not by group
            workers = psutil.Process(job.pid).children(recursive=True)
            os.killpg(job.pid, signal.SIGKILL)
            for worker in workers:
                with contextlib.suppress(psutil.NoSuchProcess):
                    worker.kill()
            job.wait()
            psutil.wait_procs(workers, timeout=10)
