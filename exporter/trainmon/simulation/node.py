"""The simulated 8-GPU H100 node behind `trainmon demo`.

No compiler and no driver: `SimulatedNode.library()` is a `ScenarioLibrary` (the Python stand-in
for libnvidia-ml.so.1) whose scenario is recomputed from a clock. Values follow a training job:
steps alternate a compute phase (SMs and tensor cores busy, high power) and a communication
phase (NVLink busy, SMs mostly waiting in NCCL kernels while coarse utilization still reads
100%); every few minutes a checkpoint pauses the GPUs. Power drives temperature through a
thermal lag, energy and traffic counters integrate their rates, and a rank on GPU 5 straggles.
Each GPU runs one simulated process (a pid of its own, named `simulated-rankN`, started by the demo);
`--incident gpu-lost` makes GPU 6 fail every call once the healthy period is over (its verdict: reboot);
`--incident xid-reset` raises XID 119 on GPU 4 (its verdict: reset the GPU).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pynvml

from trainmon.simulation.incidents import LOST_GPU, RESET_XID, RESET_XID_GPU, Plan
from trainmon.simulation.scenario import Scenario, ScenarioLibrary

GPUS = 8
NAME = "NVIDIA H100 80GB HBM3"
DRIVER = "550.54.15 (simulated)"
BUS_IDS = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")  # a DGX H100's GPU buses
MIB = 1 << 20
FB_TOTAL = 81559 * MIB
FB_RESERVED = 520 * MIB
POWER_LIMIT_W = 700.0
IDLE_W, COMM_W, COMPUTE_W = 95.0, 330.0, 680.0
STEP_S = 4.0  # one training step: compute, then gradient all-reduce
COMPUTE_SHARE = 0.68
THERMAL_TAU_S = 25.0
NVLINK_COMM_BPS = 310e9  # during the all-reduce, per direction
PCIE_BPS = 3e9  # input batches at the start of each step
RECOMPUTE_S = 0.2
# XIDs the demo raises so that the XID series and alerts have something to show: (seconds after the daemon
# started watching for XID events, gpu, xid). NVML delivers no event raised before a watcher's event set
# exists, and a busy machine may take seconds to start the daemon: counted from the node's start they were lost.
XIDS = ((2.0, 3, 13), (240.0, 6, 31))


NVLINKS = 18  # NVLink4 links of an H100 SXM
# NVSwitch fabric trained, and every health bit field reading "no" (degraded bandwidth, route recovery, …).
HEALTHY_FABRIC_MASK = sum(
    getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_{name}_FALSE")
    << getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_{name}")
    for name in ("DEGRADED_BW", "ROUTE_RECOVERY", "ROUTE_UNHEALTHY")
)
# A link with a slow trickle of replays (GPU, link): a few a day is normal, under TrainmonNVLinkErrors.
REPLAYING_LINK, REPLAY_EVERY_S = (2, 7), 120.0


def _nvlink_fields(gpu: int, t: float) -> dict[str, int]:
    """Per-link field values (scope = link): every link active, one link slowly counting replays."""
    answered = {str(pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT): NVLINKS}
    for link in range(NVLINKS):
        answered[f"{pynvml.NVML_FI_DEV_NVLINK_GET_STATE}@{link}"] = 1
        replays = int(t / REPLAY_EVERY_S) + 1 if (gpu, link) == REPLAYING_LINK else 0
        answered[f"{pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY}@{link}"] = replays
    return answered


@dataclass(slots=True)
class _Load:
    """What a GPU is doing at one instant (fractions of its maximum)."""

    sm: float
    tensor: float
    dram: float
    occupancy: float
    power_w: float
    nvlink_bps: float
    pcie_bps: float


@dataclass(slots=True)
class _GpuState:
    index: int
    temperature_c: float = 34.0
    energy_mj: float = 4.2e9
    nvlink_rx_kib: float = 0.0
    nvlink_tx_kib: float = 0.0
    pcie_rx: float = 0.0
    pcie_tx: float = 0.0
    power_throttle_ns: float = 0.0
    corrected_ecc: float = 0.0


def _load(index: int, t: float, plan: Plan) -> _Load:
    if plan.checkpointing(t):  # GPUs wait on storage while the job writes its checkpoint
        return _Load(0.02, 0.0, 0.03, 0.02, IDLE_W + 25, 0.0, 0.4e9)
    slow = 1.08 if index == 5 else 1.0  # the straggler: longer compute, less time waiting
    phase = (t / STEP_S) % 1.0
    compute_end = min(0.95, COMPUTE_SHARE * slow)
    wobble = 0.03 * math.sin(2 * math.pi * (t / 37.0 + index / GPUS))
    if phase < compute_end:
        ramp = min(1.0, phase / 0.05)  # kernels fill the SMs over the first few hundred ms
        return _Load(sm=(0.9 + wobble) * ramp, tensor=(0.58 + wobble) * ramp, dram=0.42 + wobble,
                     occupancy=0.34 + wobble, power_w=COMM_W + (COMPUTE_W - COMM_W) * ramp + 15 * wobble,
                     nvlink_bps=0.05 * NVLINK_COMM_BPS, pcie_bps=PCIE_BPS if phase < 0.1 else 0.1e9)
    return _Load(sm=0.18 + wobble, tensor=0.01, dram=0.22, occupancy=0.08, power_w=COMM_W + 10 * wobble,
                 nvlink_bps=NVLINK_COMM_BPS * (1 + wobble), pcie_bps=0.05e9)


def _window_mean(index: int, t: float, plan: Plan, points: int = 16) -> _Load:
    """GPM reports averages over its window: the mean load over the last step."""
    loads = [_load(index, t - STEP_S * k / points, plan) for k in range(points)]
    return _Load(*(sum(getattr(x, f) for x in loads) / points for f in _Load.__slots__))


class SimulatedNode:
    """Eight H100s under a training-like load; `library()` answers pynvml from them."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, pids: Sequence[int] = (),
                 plan: Plan | None = None) -> None:
        """`pids`: the simulated process on each GPU (none where absent)."""
        self._clock = clock
        self._start = clock()
        self._pids = tuple(pids)
        self._plan = plan or Plan(clock=clock)
        self._lock = threading.Lock()
        self._last_t = 0.0
        self._states = [_GpuState(i) for i in range(GPUS)]
        self._libraries: list[ScenarioLibrary] = []
        self._watched_at: float | None = None
        self._scenario: Scenario = self._build(0.0)

    def library(self) -> ScenarioLibrary:
        library = ScenarioLibrary(self.scenario)
        self._libraries.append(library)
        return library

    def pci_gpus(self) -> int:
        return GPUS

    def scenario(self) -> Scenario:
        t = self._clock() - self._start
        with self._lock:
            if t - self._last_t >= RECOMPUTE_S:
                self._advance(t)
            return self._scenario

    def _advance(self, t: float) -> None:
        dt = t - self._last_t
        for state in self._states:
            load = _load(state.index, t, self._plan)
            state.energy_mj += load.power_w * dt * 1e3
            settled = 31.0 + 0.06 * load.power_w
            state.temperature_c += (settled - state.temperature_c) * (1 - math.exp(-dt / THERMAL_TAU_S))
            kib = load.nvlink_bps * dt / 1024
            state.nvlink_rx_kib += kib
            state.nvlink_tx_kib += kib * 0.98
            state.pcie_rx += load.pcie_bps * dt
            state.pcie_tx += load.pcie_bps * dt * 0.04
            if load.power_w > POWER_LIMIT_W * 0.96:
                state.power_throttle_ns += dt * 1e9
            if state.index == 2:
                state.corrected_ecc += dt / 120  # a slowly ageing HBM stack
        self._last_t = t
        self._scenario = self._build(t)

    def _build(self, t: float) -> Scenario:
        return {
            "driver_version": DRIVER,
            "gpus": [self._gpu(state, t) for state in self._states],
            "xid_events": [{"id": n, "gpu": gpu, "xid": xid} for n, (at, gpu, xid) in enumerate(XIDS)
                           if t - self._watched_since(t) >= at]
            + ([{"id": len(XIDS), "gpu": RESET_XID_GPU, "xid": RESET_XID}] if self._plan.active("xid-reset") else []),
        }

    def _watched_since(self, t: float) -> float:
        """When a library first had an XID event set (`t` if none yet: no scheduled XID happens)."""
        if self._watched_at is None and any(library.watched for library in self._libraries):
            self._watched_at = t
        return t if self._watched_at is None else self._watched_at

    def _gpu(self, state: _GpuState, t: float) -> dict[str, Any]:
        i = state.index
        load = _load(i, t, self._plan)
        mean = _window_mean(i, t, self._plan)
        capped = load.power_w > POWER_LIMIT_W * 0.96
        used = int(FB_TOTAL * (0.86 if load.sm > 0.05 else 0.83)) - FB_RESERVED
        reasons = pynvml.nvmlClocksEventReasonSwPowerCap if capped else 0
        if load.sm < 0.05:
            reasons |= pynvml.nvmlClocksEventReasonGpuIdle
        lost = i == LOST_GPU and self._plan.active("gpu-lost")
        return {
            "errors": {"*": pynvml.NVML_ERROR_GPU_IS_LOST} if lost else {},
            "name": NAME,
            "uuid": f"GPU-5e1a7ed0-{i:04x}-4c0d-8e5a-0000d0e0{i:04x}",
            "pci_bus_id": f"00000000:{BUS_IDS[i].upper()}:00.0",
            "minor_number": i,
            "utilization_gpu": 100 if load.sm > 0.05 else 0,
            "utilization_memory": round(load.dram * 100),
            "memory_total": FB_TOTAL, "memory_reserved": FB_RESERVED,
            "memory_used": used, "memory_free": FB_TOTAL - FB_RESERVED - used,
            "temperature_gpu": round(state.temperature_c),
            "power_usage_mw": round(load.power_w * 1000), "power_limit_mw": round(POWER_LIMIT_W * 1000),
            "clock_sm_mhz": 1755 if capped else 1980, "clock_memory_mhz": 2619,
            "clocks_event_reasons": reasons, "supported_clocks_event_reasons": 0x1FF,
            "pcie_link_gen": 5, "pcie_link_gen_max": 5, "pcie_link_width": 16, "pcie_link_width_max": 16,
            "fabric_state": pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, "fabric_health_mask": HEALTHY_FABRIC_MASK,
            "fields": {
                str(pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION): round(state.energy_mj),
                str(pynvml.NVML_FI_DEV_MEMORY_TEMP): round(state.temperature_c + 6),
                str(pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL): int(state.corrected_ecc),
                str(pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL): 0,
                str(pynvml.NVML_FI_DEV_REMAPPED_COR): 0, str(pynvml.NVML_FI_DEV_REMAPPED_UNC): 0,
                str(pynvml.NVML_FI_DEV_REMAPPED_PENDING): 0, str(pynvml.NVML_FI_DEV_REMAPPED_FAILURE): 0,
                str(pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER): 0,
                str(pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES): round(state.pcie_rx),
                str(pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES): round(state.pcie_tx),
                str(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX): round(state.nvlink_rx_kib),
                str(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX): round(state.nvlink_tx_kib),
                str(pynvml.NVML_FI_DEV_PERF_POLICY_POWER): round(state.power_throttle_ns),
                str(pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL): 0,
                str(pynvml.NVML_FI_DEV_PERF_POLICY_SYNC_BOOST): 0,
                str(pynvml.NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT): 0,
                str(pynvml.NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION): 0,
                str(pynvml.NVML_FI_DEV_PERF_POLICY_RELIABILITY): 0,
                **_nvlink_fields(i, t),
            },
            "processes": [{"pid": self._pids[i], "used_memory": used - 512 * MIB}] if i < len(self._pids) else [],
            "gpm_supported": True,
            "gpm": {
                str(pynvml.NVML_GPM_METRIC_SM_UTIL): mean.sm * 100,
                str(pynvml.NVML_GPM_METRIC_SM_OCCUPANCY): mean.occupancy * 100,
                str(pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL): mean.tensor * 100,
                str(pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL): mean.dram * 100,
            },
        }
