"""`trainmon diagnose` against a real Prometheus 2.42 scraping real daemons fed by real gloo jobs.

One Prometheus, two daemons ("nodes") with every family a real GPU node has (several GPUs on the fake
NVML, NVMe, InfiniBand ports with their error counters, the Slurm owner of every GPU: issue 31, where
diagnose failed on every node with IB ports), five jobs running at once, each with one planted cause:
communication-bound (ranks late in turn), data-loader-bound, a straggler rank on the node whose GPU
throttles (an H100, so MFU is known) and whose IB port counts symbol errors, a job in checkpoints, and
a healthy one. No recording rules are loaded: diagnose works from raw series.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pynvml
import pytest

from tests.e2e.alerting_stack import Prometheus, prometheus
from tests.e2e.gpu_nodes import NODE_FAMILIES, growing_ib_errors, ingest_socket, node_daemon
from tests.fake_nvml import scenario as scenarios
from tests.fake_nvml.fixtures import fake_nvml_dir  # noqa: F401  (fixture)
from tests.helpers.daemon import Daemon
from tests.helpers.net import free_port, wait_until
from tests.helpers.node import SyntheticNode
from tests.helpers.tools import require_tool
from tests.torch.jobs import REPO, start_job, stop

pytestmark = pytest.mark.slow

WINDOW = "15s"  # the steady part of each job: start-up is behind it when diagnose runs
GPUS = 4  # per node
# The straggler's GPU also throttles and has a row remap pending (its health verdict: reset the GPU).
THROTTLED = scenarios.changed(scenarios.healthy(GPUS), 0,
                              clocks_event_reasons=pynvml.nvmlClocksEventReasonHwThermalSlowdown)
THROTTLED["gpus"][0]["fields"][str(scenarios.FIELD["remap_pending"])] = 1
GPU_UUID = THROTTLED["gpus"][0]["uuid"]
BAD_PORT = 1  # node b's IB port counting symbol errors; its other port and node a's are clean
# job id: (node, ranks, env of every rank, env of one rank). Causes that need no peer run one rank (CI has 2 cores).
JOBS: dict[str, tuple[str, int, dict[str, str], dict[int, dict[str, str]]]] = {
    # 0.2 s: a loaded CI run measured this 1-rank job's all-reduce hand-offs at 10.2% of a 0.05 s step
    "healthy": ("a", 1, {"JOB_COMPUTE_SECONDS": "0.2"}, {}),
    "comm": ("a", 2, {"JOB_COMPUTE_SECONDS": "0.02", "JOB_ROTATING_SECONDS": "0.1"}, {}),
    "data": ("a", 1, {"JOB_COMPUTE_SECONDS": "0.02", "JOB_BATCH_SECONDS": "0.1"}, {}),
    "ckpt": ("a", 1, {"JOB_COMPUTE_SECONDS": "0.02", "JOB_PHASE": "checkpoint", "JOB_PHASE_SECONDS": "0.5",
                      "JOB_PHASE_EVERY": "3"}, {}),
    # rank 1 computes 0.3 s: at 0.15 s a loaded CI run read its own all-reduce hand-offs as 10% communication
    "straggler": ("b", 2, {"JOB_COMPUTE_SECONDS": "0.02", "TRAINMON_GPU_UUID": GPU_UUID,
                           "JOB_FLOPS_PER_TOKEN": "1e9"}, {1: {"JOB_COMPUTE_SECONDS": "0.3"}}),
}


@dataclass(frozen=True)
class Stack:
    prometheus: Prometheus
    daemons: dict[str, Daemon]


def diagnose(url: str, job: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainmon", "diagnose", "--prometheus", url, "--job", job,
                           "--since", WINDOW, *extra], capture_output=True, text=True, timeout=60, cwd=REPO)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_nvml_dir: Path) -> Iterator[Stack]:  # noqa: F811
    binary = require_tool("prometheus")
    work = tmp_path_factory.mktemp("diagnose")
    with ExitStack() as stack:
        nodes = {name: SyntheticNode(work / name, gpus=GPUS, nvme_namespaces=2, ib_ports=2, nvml=nvml)
                 for name, nvml in (("a", scenarios.healthy(GPUS)), ("b", THROTTLED))}
        daemons = {name: stack.enter_context(node_daemon(node, fake_nvml_dir)) for name, node in nodes.items()}
        stack.enter_context(growing_ib_errors(nodes["b"], BAD_PORT, "symbol_error"))
        targets = [f"127.0.0.1:{d.port}" for d in daemons.values()]
        prom = stack.enter_context(prometheus(binary, work, targets, [], f"http://127.0.0.1:{free_port()}", "1s"))
        procs = []
        for job, (node, ranks, env, rank_env) in JOBS.items():
            out = work / f"job-{job}"
            socket = str(ingest_socket(nodes[node]))
            procs.append((out, start_job("", 0, out, env={"JOB_ID": job, "TRAINMON_INGEST_SOCKET": socket,
                                                          "TRAINMON_GPU_UUID": "GPU-cpu", **env},
                                         ranks=ranks, rank_env=rank_env, module="tests.torch.workload_job")))
        try:
            wait_until(lambda: len(prom.query("count by (job_id) (trainmon_train_steps_total > 10)")) == len(JOBS),
                       timeout=300)  # seven processes importing torch on two shared cores
            time.sleep(int(WINDOW[:-1]) + 3)  # a whole window of steady running
            yield Stack(prom, daemons)
        finally:
            stop(procs)


@pytest.fixture(scope="module")
def results(stack: Stack) -> dict[str, tuple[int, dict[str, Any]]]:
    """Every job diagnosed at once (the jobs are still running)."""
    out = {}
    for job in JOBS:
        done = diagnose(stack.prometheus.url, job, "--json")
        assert done.returncode in {0, 1}, done.stderr
        out[job] = (done.returncode, json.loads(done.stdout))
    return out


def causes(result: dict[str, Any]) -> list[str]:
    return [f["cause"] for f in result["findings"]]


def signals(result: dict[str, Any]) -> set[str]:
    return {h["signal"] for f in result["findings"] for h in f["hardware"]}


def test_every_node_serves_every_family_of_a_gpu_node(stack: Stack) -> None:
    nodes = {f"127.0.0.1:{d.port}" for d in stack.daemons.values()}
    served = {name: {s["metric"]["instance"]: int(s["value"][1])
                     for s in stack.prometheus.query(f"count by (instance) ({name})")} for name in NODE_FAMILIES}

    assert dict.fromkeys(NODE_FAMILIES, nodes) == {name: set(found) for name, found in served.items()}
    assert {GPUS} == set(served["trainmon_gpu_power_watts"].values())
    assert {2} == set(served["trainmon_infiniband_symbol_error_total"].values())  # ports


def test_the_healthy_job_is_clean(results: dict[str, tuple[int, dict[str, Any]]]) -> None:
    code, result = results["healthy"]

    assert (0, []) == (code, result["findings"]), result
    assert {"job_id", "since", "findings", "mfu", "goodput"} == result.keys()
    assert result["mfu"] is None and 0.5 < result["goodput"] <= 1


def test_a_communication_bound_job_is_named_communication_not_data_loading(
        results: dict[str, tuple[int, dict[str, Any]]]) -> None:
    code, result = results["comm"]

    assert (1, "communication") == (code, causes(result)[0]), result
    assert {"data_loading", "straggler"}.isdisjoint(causes(result))
    assert "ib_errors" not in signals(result)  # its node's ports count no errors


def test_a_data_loader_bound_job_is_named_data_loading_not_communication(
        results: dict[str, tuple[int, dict[str, Any]]]) -> None:
    code, result = results["data"]

    assert (1, "data_loading") == (code, causes(result)[0]), result
    assert "communication" not in causes(result)
    assert result["findings"][0]["share"] > 0.5


def test_a_job_in_checkpoints_is_named_by_its_phase(results: dict[str, tuple[int, dict[str, Any]]]) -> None:
    code, result = results["ckpt"]
    first = result["findings"][0]

    assert (1, "phase", "checkpoint") == (code, first["cause"], first.get("phase")), result
    assert "stall" not in causes(result)


def test_the_straggler_rank_is_named_with_its_node_gpu_and_the_throttling(
        stack: Stack, results: dict[str, tuple[int, dict[str, Any]]]) -> None:
    code, result = results["straggler"]
    first = result["findings"][0]
    node_b = f"127.0.0.1:{stack.daemons['b'].port}"

    assert (1, "straggler", 1, node_b, GPU_UUID) == (code, first["cause"], first["rank"], first["instance"],
                                                      first["uuid"]), result
    assert {"signal": "throttle", "instance": node_b, "device": GPU_UUID} in first["hardware"]
    assert {"signal": "health", "instance": node_b, "device": GPU_UUID} in first["hardware"]
    assert [f"mlx5_{BAD_PORT}/1"] == [h["device"] for h in first["hardware"] if h["signal"] == "ib_errors"]
    assert "communication" not in causes(result)  # rank 0's wait is the straggler's cost, not the network's
    assert 0 < result["mfu"] < 0.01  # ~0.8 TFLOP/s per rank against an H100's 989


def test_the_human_report_ranks_causes_with_numbers_and_runbooks(stack: Stack) -> None:
    done = diagnose(stack.prometheus.url, "straggler")

    assert 1 == done.returncode
    assert "1. straggler costs" in done.stdout and "rank 1" in done.stdout and "throttle" in done.stdout
    assert "runbook.md#trainmonstragglerrank" in done.stdout and "MFU " in done.stdout


def test_an_unknown_job_is_an_error_of_one_line(stack: Stack) -> None:
    done = diagnose(stack.prometheus.url, "no-such-job")

    assert (2, "") == (done.returncode, done.stdout)
    assert 1 == len(done.stderr.strip().splitlines()) and "no-such-job" in done.stderr


def test_prometheus_down_exits_2_with_one_line() -> None:
    done = diagnose(f"http://127.0.0.1:{free_port()}", "any")

    assert (2, "") == (done.returncode, done.stdout)
    assert ["cannot reach Prometheus"] == [line[19:42] for line in done.stderr.strip().splitlines()]


def diagnose_in(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`trainmon diagnose ARGS` with this environment, and no `--prometheus` unless given."""
    return subprocess.run([sys.executable, "-m", "trainmon", "diagnose", *args], capture_output=True, text=True,
                          timeout=60, cwd=REPO, env=env)


def test_prometheus_comes_from_the_environment_and_the_list_names_every_job(stack: Stack) -> None:
    """`TRAINMON_PROMETHEUS` stands for `--prometheus` (the runbook's `trainmon diagnose --job <id>`), and
    `--list` names each running job with its ranks, nodes and when Prometheus last saw it."""
    env = {**os.environ, "TRAINMON_PROMETHEUS": stack.prometheus.url}
    listed = diagnose_in(env, "--list", "--since", WINDOW, "--json")
    table = diagnose_in(env, "--list")
    job = diagnose_in(env, "--job", "straggler", "--since", WINDOW)

    assert 0 == listed.returncode, listed.stderr
    jobs = {j["job_id"]: j for j in json.loads(listed.stdout)}
    assert {job: (ranks, 1) for job, (_, ranks, _, _) in JOBS.items()} == \
        {job: (j["ranks"], j["nodes"]) for job, j in jobs.items()}
    assert all(time.time() - 30 < j["last_seen"] <= time.time() for j in jobs.values()), jobs
    assert 0 == table.returncode and table.stdout.startswith("JOB_ID"), table
    assert {line.split()[0] for line in table.stdout.splitlines()[1:]} == set(JOBS)
    assert (1, "1. straggler costs") == (job.returncode, job.stdout.splitlines()[1][:18]), job


def test_without_prometheus_anywhere_it_says_what_to_set() -> None:
    done = diagnose_in({k: v for k, v in os.environ.items() if k != "TRAINMON_PROMETHEUS"}, "--list")

    assert 2 == done.returncode and "--prometheus URL (or TRAINMON_PROMETHEUS) is required" in done.stderr
