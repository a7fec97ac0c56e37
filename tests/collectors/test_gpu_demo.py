"""`trainmon demo`: the simulated 8-GPU H100 node serves every GPU metric of SPEC §4."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.daemon import Daemon
from tests.helpers.net import wait_until
from trainmon.collectors.base import NodeResources
from trainmon.collectors.gpu import GpuCollector
from trainmon.settings import Settings
from trainmon.simulation.incidents import Plan
from trainmon.simulation.node import SimulatedNode

# Sample names as exposed (counters with _total, info with _info).
SPEC_GPU_METRICS = frozenset({
    "trainmon_gpu_info", "trainmon_gpu_up", "trainmon_gpus_expected", "trainmon_gpu_utilization_ratio",
    "trainmon_gpu_sm_utilization_ratio", "trainmon_gpu_sm_active_seconds_total", "trainmon_gpu_sm_occupancy_ratio",
    "trainmon_gpu_tensor_active_ratio", "trainmon_gpu_dram_active_ratio", "trainmon_gpu_fb_used_bytes",
    "trainmon_gpu_fb_free_bytes", "trainmon_gpu_fb_total_bytes", "trainmon_gpu_fb_reserved_bytes",
    "trainmon_gpu_power_watts", "trainmon_gpu_power_limit_watts", "trainmon_gpu_energy_joules_total",
    "trainmon_gpu_temperature_celsius", "trainmon_gpu_clock_hertz", "trainmon_gpu_clocks_event_active",
    "trainmon_gpu_throttle_seconds_total", "trainmon_gpu_ecc_errors_total", "trainmon_gpu_remapped_rows_total",
    "trainmon_gpu_row_remap_pending", "trainmon_gpu_row_remap_failure", "trainmon_gpu_xid_errors_total",
    "trainmon_gpu_xid_last_timestamp_seconds", "trainmon_gpu_pcie_link_generation", "trainmon_gpu_pcie_link_width",
    "trainmon_gpu_pcie_replay_errors_total", "trainmon_gpu_pcie_received_bytes_total",
    "trainmon_gpu_pcie_transmitted_bytes_total", "trainmon_gpu_nvlink_received_bytes_total",
    "trainmon_gpu_nvlink_transmitted_bytes_total", "trainmon_gpu_processes", "trainmon_gpu_process_fb_used_bytes",
    "trainmon_gpu_process_info",
})


def test_demo_serves_every_spec_gpu_metric_for_eight_gpus(demo: Daemon) -> None:
    """Within seconds of start every SPEC GPU metric is there, for 8 GPUs, all up; no compiler, no driver."""
    daemon = demo

    def complete() -> dict[str, set[str]] | None:
        gpus: dict[str, set[str]] = {}
        for family in text_string_to_metric_families(daemon.metrics_text()):
            for sample in family.samples:
                gpus.setdefault(sample.name, set()).add(sample.labels.get("gpu", ""))
        return gpus if SPEC_GPU_METRICS <= gpus.keys() else None

    gpus = wait_until(complete, timeout=20)
    assert {str(i) for i in range(8)} == gpus["trainmon_gpu_sm_utilization_ratio"]  # type: ignore[index]
    assert 'trainmon_gpu_up{gpu="7",uuid=' in daemon.metrics_text()
    assert "simulated" in daemon.get("/").text.lower()
    assert "simulated" in daemon.get("/api/v1/status").text


def test_demo_gpu_processes_are_simulated_processes_not_the_daemon(demo: Daemon) -> None:
    daemon = demo

    def processes() -> dict[str, str] | None:
        names = {s.labels["pid"]: s.labels["name"] for f in text_string_to_metric_families(daemon.metrics_text())
                 for s in f.samples if s.name == "trainmon_gpu_process_info"}
        return names if len(names) == 8 else None

    names = wait_until(processes, timeout=20)
    assert {f"simulated-rank{i}" for i in range(8)} == set(names.values())  # type: ignore[union-attr,attr-defined]
    assert str(daemon.process.pid) not in names  # type: ignore[operator]


@pytest.mark.parametrize(("incident", "gpu", "action"), [("xid-reset", "4", "reset_gpu"), ("gpu-lost", "6", "reboot")])
def test_demo_incidents_show_the_verdict(incident: str, gpu: str, action: str, tmp_path: Path) -> None:
    node = SimulatedNode(plan=Plan(incident, after=2.0))  # the XID comes after registration
    collector = GpuCollector(Settings(interval=1.0), NodeResources(nvml=node))
    try:
        def verdict() -> str | None:
            return next((s.labels["action"] for f in collector.collect().families for s in f.samples
                         if s.name == "trainmon_gpu_health_action" and s.labels["gpu"] == gpu), None)

        wait_until(lambda: verdict() == action, timeout=30)
    finally:
        collector.close()
