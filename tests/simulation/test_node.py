"""The demo's simulated node moves like a training job, not like noise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pynvml

from tests.helpers.clock import Clock
from tests.helpers.metrics import registry_of
from tests.helpers.net import wait_until
from trainmon.collectors.base import NodeResources
from trainmon.collectors.gpu import GpuCollector
from trainmon.settings import Settings
from trainmon.simulation import node as simulated
from trainmon.simulation.incidents import Plan
from trainmon.simulation.node import SimulatedNode


def at(node: SimulatedNode, clock: Clock, t: float) -> list[dict[str, Any]]:
    clock.now = t
    return list(node.scenario()["gpus"])


def field(gpu: dict[str, Any], field_id: int) -> float:
    return float(gpu["fields"][str(field_id)])


def test_compute_and_communication_phases_differ_but_coarse_utilization_does_not() -> None:
    """Compute: high power, little NVLink. All-reduce: NVLink busy, low power. Coarse utilization 100% in both."""
    clock = Clock()
    node = SimulatedNode(clock)
    step = simulated.STEP_S
    compute = at(node, clock, 10 * step + 0.4 * step)[0]
    comm_start = field(compute, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
    comm = at(node, clock, 10 * step + 0.9 * step)[0]

    assert compute["power_usage_mw"] > 1.5 * comm["power_usage_mw"]
    assert 100 == compute["utilization_gpu"] == comm["utilization_gpu"]
    assert field(comm, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX) > comm_start


def test_temperature_follows_power_and_counters_only_grow() -> None:
    """From a cool start the GPUs warm up under load; energy and traffic counters never go back."""
    clock = Clock()
    node = SimulatedNode(clock)
    first = at(node, clock, 0.0)[0]
    samples = [at(node, clock, t * 0.5)[0] for t in range(1, 240)]
    energy = [field(g, pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION) for g in samples]

    assert samples[-1]["temperature_gpu"] > first["temperature_gpu"] + 15
    assert energy == sorted(energy) and energy[-1] > energy[0]


def test_the_straggler_gpu_computes_longer() -> None:
    """GPU 5 is still computing when the others have moved to the all-reduce."""
    clock = Clock()
    node = SimulatedNode(clock)
    gpus = at(node, clock, 20 * simulated.STEP_S + 0.70 * simulated.STEP_S)

    assert gpus[5]["power_usage_mw"] > 1.5 * gpus[0]["power_usage_mw"]


def test_the_xid_reset_incident_raises_xid_119_on_gpu_4_once_it_starts() -> None:
    clock = Clock(0.0)
    node = SimulatedNode(clock=clock, plan=Plan("xid-reset", 60.0, clock))

    clock.now = 30.0
    assert 119 not in [e["xid"] for e in node.scenario()["xid_events"]]
    clock.now = 61.0
    assert {"id": len(simulated.XIDS), "gpu": 4, "xid": 119} in node.scenario()["xid_events"]


def test_the_scheduled_xids_reach_a_daemon_that_started_watching_after_their_time(tmp_path: Path) -> None:
    """A busy machine starts the daemon's XID watcher after the node's first seconds: XID 13 on GPU 3 (due 2 s
    in) still comes, once, counted from when the watcher exists (NVML never delivers an earlier event)."""
    clock = Clock(0.0)
    node = SimulatedNode(clock)
    clock.now = 30.0
    collector = GpuCollector(Settings(interval=1.0, sysfs=tmp_path), NodeResources(nvml=node), clock=clock)
    labels = {"gpu": "3", "uuid": node.scenario()["gpus"][3]["uuid"], "xid": "13"}

    def xid_13() -> float | None:
        clock.now += 1.0
        return registry_of(collector.collect().families).get_sample_value("trainmon_gpu_xid_errors_total", labels)

    try:
        assert 1.0 == wait_until(xid_13, timeout=30, interval=0.1)
        assert 1.0 == xid_13()
    finally:
        collector.close()
