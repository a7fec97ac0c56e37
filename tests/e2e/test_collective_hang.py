"""End to end: a 3-rank gloo job under `torchrun` whose rank 2 stops issuing collectives, the daemon,
real Prometheus 2.42 with the shipped rules (the hang threshold lowered through the generator's
config, every other duration divided by 60) and Alertmanager: `TrainmonCollectiveHang` reaches the
webhook naming rank 2 with its node and GPU, and the in-flight series show ranks 0 and 1 waiting.
Then four 4-rank jobs hanging four ways at once: `TrainmonJobHung` names each one's class and culprit,
and `trainmon diagnose` prints the culprit's stack.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
import yaml
from prometheus.rulegen.config import RulesConfig
from prometheus.rulegen.render import rule_files

from tests.e2e.alerting_stack import alertmanager, fast_rule_files, prometheus
from tests.e2e.alerting_stack import webhook as webhook_receiver
from tests.e2e.test_alerting import alert_seen
from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.net import free_port, wait_until
from tests.helpers.tools import require_tool
from tests.torch.jobs import start_job

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


SCENARIOS = {  # scenario: (class, culprit rank, what diagnose prints of the culprit's stack)
    "data": ("data", "2", ":batches"),
    "diverge": ("host", "1", "<trainmon wrapper of all_reduce>"),
    "inside": ("collective", "3", "hang_job.py"),
    "killed": ("gone", "0", "class: gone"),
}
HANG_RULE_GROUPS = {"trainmon.rank_gpu.rules", "trainmon.hang.rules", "trainmon.hang"}
FRACTION = re.compile(r"(\.\d{6})\d*")


def hang_rule_files(tmp_path: Path) -> list[Path]:
    """The shipped rule groups TrainmonJobHung needs, evaluated every second (the rest would only cost CPU)."""
    generated = tmp_path / "hang-rules"
    generated.mkdir()
    for name, text in rule_files(RulesConfig()).items():
        document = yaml.safe_load(text)
        document["groups"] = [g for g in document["groups"] if g["name"] in HANG_RULE_GROUPS]
        (generated / name).write_text(yaml.safe_dump(document, sort_keys=False))
    return fast_rule_files(sorted(generated.glob("*.yml")), tmp_path, 1, INTERVAL)


def active_since(prom_url: str, job_id: str, hang_class: str, rank: str) -> float | None:
    """When Prometheus' TrainmonJobHung for the job, with that class and culprit, became active (Unix time)."""
    for alert in httpx.get(prom_url + "/api/v1/alerts", timeout=10).json()["data"]["alerts"]:
        labels = alert["labels"]
        if (labels.get("alertname"), labels.get("job_id"), labels.get("class"), labels.get("rank")) == (
                "TrainmonJobHung", job_id, hang_class, rank) and alert["state"] == "firing":
            return datetime.datetime.fromisoformat(FRACTION.sub(r"\1", alert["activeAt"])).timestamp()
    return None


def test_each_kind_of_hang_is_named_with_its_class_culprit_and_stack(tmp_path: Path, daemons: list[Daemon]) -> None:
    """Four 4-rank gloo jobs hang at once, each its own way, through one daemon and one Prometheus (hang
    threshold floor 2 s): TrainmonJobHung names each one's class and culprit, after the onset each job
    recorded, and `trainmon diagnose --job` prints the culprit's stack (the dead rank's class for `killed`)."""
    prometheus_bin = require_tool("prometheus")
    daemons.append(daemon := start_daemon(tmp_path, ["--collectors", "training", "--interval", "0.5"]))
    instance = f"127.0.0.1:{daemon.port}"
    env = {"TRAINMON_INGEST_SOCKET": str(tmp_path / "ingest.sock"), "TRAINMON_HANG_THRESHOLD_S": "2",
           "HANG_STORE_PORT": str(free_port())}
    with prometheus(prometheus_bin, tmp_path, [instance], hang_rule_files(tmp_path), "http://127.0.0.1:9",
                    INTERVAL) as prom:
        jobs = {name: start_job(name, 5, tmp_path / name, env={**env, "TRAINMON_JOB_ID": f"hang-{name}"}, ranks=4,
                                module="tests.e2e.hang_job") for name in SCENARIOS}
        try:
            onset_file = tmp_path / "killed" / "onset"
            wait_until(onset_file.exists, timeout=120)
            jobs["killed"][0].kill()
            jobs["killed"][0].wait()
            onsets = {"killed": time.time()}
            for name in SCENARIOS.keys() - {"killed"}:
                wait_until((tmp_path / name / "onset").exists, timeout=120)
                onsets[name] = float((tmp_path / name / "onset").read_text())
            for name, (hang_class, culprit, printed) in SCENARIOS.items():
                fired = wait_until(functools.partial(active_since, prom.url, f"hang-{name}", hang_class, culprit),
                                   timeout=120)
                report = subprocess.run(
                    [sys.executable, "-m", "trainmon", "diagnose", "--prometheus", prom.url, "--job", f"hang-{name}",
                     "--since", "5m"], capture_output=True, text=True, timeout=120,
                    env={**os.environ, "PYTHONPATH": str(REPO / "exporter")})

                assert isinstance(fired, float) and fired >= onsets[name] - 1, (name, fired, onsets[name])
                print(f"{name}: TrainmonJobHung class={hang_class} rank={culprit} {fired - onsets[name]:.1f} s after "
                      f"the onset")
                assert f"class: {hang_class}" in report.stdout and printed in report.stdout, report.stdout
                assert f"rank {culprit} on {instance}" in report.stdout, report.stdout
                print(report.stdout)
        finally:
            for procs in jobs.values():
                for proc in procs:
                    proc.kill()
                    proc.wait()
