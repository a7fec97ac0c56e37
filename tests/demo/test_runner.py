"""`trainmon demo` as a user runs it: every README metric family has a series, and its directory goes away."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.net import wait_until

METRICS_DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
# A healthy demo cannot show these without an alert firing: ranks evicted only when lost (TrainmonRankLost),
# a collective in flight between reports only in `--incident hang` (tests/e2e/test_demo_incidents.py).
ONLY_IN_TROUBLE = frozenset({"trainmon_ingest_evicted_total", "trainmon_nccl_inflight_oldest_seconds",
                             "trainmon_train_stack_info", "trainmon_train_hang_location",
                             "trainmon_nccl_ras_missing_rank_info"})
# Only for collectives whose time CUDA could not give (async NCCL untimed): the demo's job times every one.
ONLY_UNTIMED = frozenset({"trainmon_nccl_untimed_calls_total"})
# From Inspector's JSON dump, one line per operation naming its process: the demo's ranks are one process, so it
# writes the textfile (per GPU) only (tests/e2e/test_nccl_view.py reads a dump).
ONLY_FROM_A_JSON_DUMP = frozenset({
    "trainmon_nccl_inspector_operations_total", "trainmon_nccl_inspector_seconds_total",
    "trainmon_nccl_inspector_bytes_total", "trainmon_nccl_inspector_dropped_total",
})
# Reported by an RL framework's driver process (docs/verl.md), which the demo's job has not.
ONLY_FROM_A_DRIVER = frozenset({
    "trainmon_train_mfu_reported_ratio", "trainmon_rl_actor_grad_norm", "trainmon_rl_reward_mean",
    "trainmon_rl_response_length_mean", "trainmon_rl_response_clip_ratio", "trainmon_rl_aborted_ratio",
})


def metric_families_section() -> str:
    return METRICS_DOC.read_text().split("\n## Metric families", 1)[1].split("\n## ", 1)[0]


def table_families(text: str) -> set[str]:
    """The metric names in the first column of the tables in `text`."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith(("| `trainmon_", "| `trainmon_infiniband_*")):
            names |= set(re.findall(r"`(trainmon_[a-z0-9_]+)`", line.split("|")[1]))
    return names


def readme_families() -> set[str]:
    """The metric names in the first column of docs/metrics.md's tables, hw_counters stems expanded."""
    section = metric_families_section()
    hw_row = next(line for line in section.splitlines() if "from `hw_counters/`" in line)
    stems = re.findall(r"`([a-z0-9_]+)`", hw_row.split("mlx5 `hw_counters`:", 1)[1])
    return table_families(section) | {f"trainmon_infiniband_{stem}_total" for stem in stems}


def not_served_by_the_daemon() -> set[str]:
    """Families documented as recorded by Prometheus's rules (the XID catalog), never on `/metrics`."""
    return {name for line in metric_families_section().splitlines() if "not served by the daemon" in line
            for name in table_families(line)}


def nccl_own_view_families() -> set[str]:
    """NCCL Inspector's and RAS's families (their collectors are off by default; the demo turns them on)."""
    return table_families(metric_families_section().split("\n### NCCL's own view", 1)[1].split("\n### ", 1)[0])


def served_names(text: str) -> set[str]:
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def has_series(family: str, served: set[str]) -> bool:
    """A histogram by its buckets, a summary by its count."""
    return any(name in (family, f"{family}_bucket", f"{family}_count") for name in served)


def test_readme_tables_are_read() -> None:
    families = readme_families()

    assert {"trainmon_gpu_up", "trainmon_nvme_info", "trainmon_infiniband_rx_write_requests_total",
            "trainmon_train_phase", "trainmon_ingest_rejected_total"} <= families
    assert len(families) > 140
    assert {"trainmon_nccl_inspector_operations_total", "trainmon_nccl_ras_up"} <= nccl_own_view_families() < families
    assert {"trainmon_xid_catalog_info"} == not_served_by_the_daemon()


@pytest.mark.slow
def test_demo_serves_every_readme_family(tmp_path: Path, daemons: list[Daemon]) -> None:
    """Accumulated over its first checkpoint: GPUs, NVMe, InfiniBand, the job, its phase, exits, rejections, NCCL
    Inspector's textfile windows and RAS."""
    daemons.append(daemon := start_daemon(tmp_path, ["--gpu-processes"], command="demo"))
    expected = (readme_families() - ONLY_IN_TROUBLE - ONLY_FROM_A_DRIVER - ONLY_UNTIMED - ONLY_FROM_A_JSON_DUMP
                - not_served_by_the_daemon())
    seen: set[str] = set()
    for _ in range(90):  # the first checkpoint comes after 20 steps of a second
        seen |= served_names(daemon.metrics_text())
        if all(has_series(family, seen) for family in expected):
            break
        time.sleep(1)

    missing = sorted(f for f in expected if not has_series(f, seen))
    assert [] == missing, missing


@pytest.fixture
def temp() -> Iterator[Path]:
    """A short TMPDIR: the demo's kubelet socket lives below it, and a Unix socket path is at most 107 bytes
    (pytest's tmp_path under xdist is longer)."""
    with tempfile.TemporaryDirectory(prefix="tm-") as directory:
        yield Path(directory)


def demo_env(temp: Path) -> dict[str, str]:
    """The demo's runtime directory under `temp`: no XDG_RUNTIME_DIR, TMPDIR there."""
    return {"TMPDIR": str(temp), "XDG_RUNTIME_DIR": ""}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_demo_removes_its_directory_and_processes_on_a_stop_signal(tmp_path: Path, temp: Path, sig: int) -> None:
    daemon = start_daemon(tmp_path, ["--gpu-processes"], command="demo", env=demo_env(temp))
    try:
        [directory] = list(temp.glob("trainmon-demo-*/*"))
        assert (directory / "proc" / "diskstats").is_file()
        named = r'trainmon_gpu_process_info\{name="simulated-rank\d",pid="(\d+)"\}'
        pids: list[str] = wait_until(lambda: re.findall(named, daemon.metrics_text()), timeout=20)  # type: ignore[assignment]
    finally:
        code = daemon.stop(sig)

    assert 0 == code, daemon.log()
    assert [] == list(temp.iterdir())
    assert 8 == len(pids)
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]


def test_compose_passes_an_incident_to_the_demo(tmp_path: Path) -> None:
    compose = yaml.safe_load((METRICS_DOC.parents[1] / "deploy" / "compose" / "compose.yaml").read_text())
    service = compose["services"]["trainmon"]

    assert "demo" == service["command"][0]
    assert "${TRAINMON_INCIDENT:-}" == service["environment"]["TRAINMON_INCIDENT"]
    result = subprocess.run([sys.executable, "-m", "trainmon", "demo"], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "TRAINMON_INCIDENT": "fire"})
    assert 2 == result.returncode
    assert "--incident='fire': unknown incident" in result.stderr


def test_the_tree_of_a_demo_killed_with_sigkill_is_swept_by_the_next_start(tmp_path: Path, temp: Path) -> None:
    """Issue 31: every SIGKILL left its tree (595 entries, a socket) in the temporary directory."""
    killed = start_daemon(tmp_path, [], command="demo", env=demo_env(temp))
    killed.stop(signal.SIGKILL)
    [left] = list(temp.glob("trainmon-demo-*/*"))
    assert (left / "ingest.sock").exists()

    second = start_daemon(tmp_path, [], command="demo", env=demo_env(temp))
    try:
        [running] = list(temp.glob("trainmon-demo-*/*"))
    finally:
        code = second.stop()

    assert running != left
    assert 0 == code
    assert [] == list(temp.iterdir())


def test_the_demo_marks_its_metrics_simulated(demo: Daemon) -> None:
    """An `_info` series says it, besides the driver string, for a query or a dashboard to tell a demo apart."""
    text = demo.get("/metrics").text

    assert 'trainmon_info{simulated="true"} 1.0' in text.splitlines()


def test_the_healthy_demos_ranks_are_alive_and_not_suspected_of_a_hang(demo: Daemon) -> None:
    """The simulated ranks report from the demo's own process, which the demo's procfs tree holds: never `gone`."""
    def suspicions() -> list[str]:
        return [line.rsplit(" ", 1)[1] for line in demo.metrics_text().splitlines()
                if line.startswith("trainmon_train_hang_suspected{")]

    wait_until(lambda: len(suspicions()) >= 8, timeout=30)
    assert {"0.0"} == set(suspicions())
    assert "trainmon_train_hang_location{" not in demo.metrics_text()
