"""`trainmon diagnose` names why a straggler is slow: three real 4-rank gloo jobs at once, each with one planted
cause, reporting through a real daemon to a real Prometheus 2.42 (no recording rules loaded: diagnose works from
raw series).

- `hardware`: rank 3 computes 2.5x as long a step as its peers on the same tokens;
- `data_imbalance`: rank 3 is given 3x the tokens and computes 3x as long (the same time per token);
- `pipeline_stage`: ranks 0-1 declare stage 0, ranks 2-3 stage 1, and stage 1 computes 2.5x as long.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from tests.e2e.alerting_stack import Prometheus, prometheus
from tests.helpers.daemon import start_daemon
from tests.helpers.net import free_port, wait_until
from tests.helpers.tools import require_tool
from tests.torch.jobs import REPO, start_job, stop

pytestmark = pytest.mark.slow

WINDOW = "20s"  # the steady part of each job: start-up is behind it when diagnose runs
RANKS = 4
COMPUTE, SLOW = "0.1", "0.25"  # seconds of compute per step: long beside a loaded machine's noise
STAGES = {0: "0", 1: "0", 2: "1", 3: "1"}
# job id: (env of every rank, env of each rank that differs)
JOBS: dict[str, tuple[dict[str, str], dict[int, dict[str, str]]]] = {
    "hardware": ({"JOB_TOKENS": "1000"}, {3: {"JOB_COMPUTE_SECONDS": SLOW}}),
    "data_imbalance": ({"JOB_TOKENS": "1000"}, {3: {"JOB_COMPUTE_SECONDS": "0.3", "JOB_TOKENS": "3000"}}),
    "pipeline_stage": ({"JOB_TOKENS": "1000", "JOB_MICROBATCHES": "2"},
                       {r: {"JOB_PIPELINE_STAGE": stage, **({"JOB_COMPUTE_SECONDS": SLOW} if stage == "1" else {})}
                        for r, stage in STAGES.items()}),
}


def diagnose(url: str, job: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainmon", "diagnose", "--prometheus", url, "--job", job,
                           "--since", WINDOW, "--json"], capture_output=True, text=True, timeout=60, cwd=REPO)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    binary = require_tool("prometheus")
    work = tmp_path_factory.mktemp("causes")
    with ExitStack() as stack:
        daemon = start_daemon(work, ["--collectors", "training", "--interval", "0.5"])
        stack.callback(daemon.stop)
        prom = stack.enter_context(prometheus(binary, work, [f"127.0.0.1:{daemon.port}"], [],
                                              f"http://127.0.0.1:{free_port()}", "1s"))
        procs = []
        for job, (env, rank_env) in JOBS.items():
            out = work / f"job-{job}"
            procs.append((out, start_job("", 0, out, ranks=RANKS, rank_env=rank_env, module="tests.torch.workload_job",
                                         env={"JOB_ID": job, "JOB_COMPUTE_SECONDS": COMPUTE,
                                              "TRAINMON_INGEST_SOCKET": str(work / "ingest.sock"), **env})))
        try:
            wait_until(lambda: len(prom.query("count by (job_id) (trainmon_train_steps_total > 10)")) == len(JOBS),
                       timeout=300)  # twelve processes importing torch on two shared cores
            time.sleep(int(WINDOW[:-1]) + 3)  # a whole window of steady running
            yield prom
        finally:
            stop(procs)


@pytest.fixture(scope="module")
def results(stack: Prometheus) -> dict[str, dict[str, Any]]:
    """Every job diagnosed at once (the jobs are still running)."""
    out = {}
    for job in JOBS:
        done = diagnose(stack.url, job)
        assert 1 == done.returncode, done.stderr
        out[job] = json.loads(done.stdout)
    return out


def stragglers(result: dict[str, Any]) -> list[tuple[int, str]]:
    return sorted((f["rank"], f["straggler_cause"]) for f in result["findings"] if "straggler_cause" in f)


def test_a_rank_slower_on_the_same_tokens_is_named_hardware(results: dict[str, dict[str, Any]]) -> None:
    result = results["hardware"]

    assert [(3, "hardware")] == stragglers(result), result
    assert 0.3 < result["findings"][0]["recoverable_share"] < 1, result  # 0.15 s of a ~0.25 s step


def test_a_rank_given_three_times_the_tokens_is_named_data_imbalance(results: dict[str, dict[str, Any]]) -> None:
    assert [(3, "data_imbalance")] == stragglers(results["data_imbalance"]), results["data_imbalance"]


def test_a_slow_pipeline_stage_is_named_on_each_of_its_ranks(results: dict[str, dict[str, Any]]) -> None:
    assert [(2, "pipeline_stage"), (3, "pipeline_stage")] == stragglers(results["pipeline_stage"]), \
        results["pipeline_stage"]


def test_the_daemon_serves_each_ranks_stage_and_microbatches(stack: Prometheus) -> None:
    stages = {s["metric"]["rank"]: s["value"][1]
              for s in stack.query('trainmon_train_pipeline_stage{job_id="pipeline_stage"}')}
    microbatches = stack.query('trainmon_train_microbatches_total{job_id="pipeline_stage"} > 20')

    assert {str(r): stage for r, stage in STAGES.items()} == stages
    assert RANKS == len(microbatches)
    assert [] == stack.query('trainmon_train_pipeline_stage{job_id="hardware"}')  # no stage declared: absent
