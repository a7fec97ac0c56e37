"""Scenarios for both NVML fakes (format: trainmon/simulation/scenario.py) and the values they imply."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pynvml

from tests.helpers.metrics import SampleKey

MIB = 1 << 20
FIELD = {
    "energy_mj": pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
    "memory_temp": pynvml.NVML_FI_DEV_MEMORY_TEMP,
    "ecc_sbe": pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL,
    "ecc_dbe": pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
    "remapped_cor": pynvml.NVML_FI_DEV_REMAPPED_COR,
    "remapped_unc": pynvml.NVML_FI_DEV_REMAPPED_UNC,
    "remap_pending": pynvml.NVML_FI_DEV_REMAPPED_PENDING,
    "remap_failure": pynvml.NVML_FI_DEV_REMAPPED_FAILURE,
    "pcie_replay": pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER,
    "pcie_rx": pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
    "pcie_tx": pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
    "nvlink_rx_kib": pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
    "nvlink_tx_kib": pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
    "violation_power_ns": pynvml.NVML_FI_DEV_PERF_POLICY_POWER,
    "violation_thermal_ns": pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL,
}


def gpu(i: int) -> dict[str, Any]:
    """GPU `i` of a test node: every value differs from every other GPU's."""
    return {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": f"GPU-00000000-0000-0000-0000-{i:012d}",
        "pci_bus_id": f"00000000:{0x18 + 16 * i:02X}:00.0",
        "minor_number": i,
        "utilization_gpu": 10 + i, "utilization_memory": 5 + i,
        "memory_total": 81559 * MIB, "memory_reserved": 520 * MIB,
        "memory_used": (1000 + i) * MIB, "memory_free": (81559 - 520 - 1000 - i) * MIB,
        "temperature_gpu": 40 + i,
        "power_usage_mw": 300_000 + 1_500 * i, "power_limit_mw": 700_000 - 1_000 * i,
        "clock_sm_mhz": 1_900 + i, "clock_memory_mhz": 2_600 + i,
        "clocks_event_reasons": pynvml.nvmlClocksEventReasonSwPowerCap if i % 2 else 0,
        "supported_clocks_event_reasons": 0x1FF,
        "pcie_link_gen": 4 + i % 2, "pcie_link_gen_max": 5, "pcie_link_width": 16 - i, "pcie_link_width_max": 16,
        "fields": {str(FIELD[k]): v for k, v in {
            "energy_mj": 1_000_000 + 1_000 * i, "memory_temp": 50 + i, "ecc_sbe": 2 * i, "ecc_dbe": i,
            "remapped_cor": 3 * i, "remapped_unc": i, "remap_pending": i % 2, "remap_failure": 0,
            "pcie_replay": 7 + i, "pcie_rx": 10_000 + i, "pcie_tx": 20_000 + i,
            "nvlink_rx_kib": 1_000 + i, "nvlink_tx_kib": 2_000 + i,
            "violation_power_ns": 1_000_000_000 * (i + 1), "violation_thermal_ns": 500_000_000 * i,
        }.items()},
        "processes": [{"pid": 4_000 + i, "used_memory": (100 + i) * MIB}],
        "gpm_supported": True,
        "gpm": {str(pynvml.NVML_GPM_METRIC_SM_UTIL): 50.0 + i, str(pynvml.NVML_GPM_METRIC_SM_OCCUPANCY): 20.0 + i,
                str(pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL): 30.0 + i,
                str(pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL): 40.0 + i},
    }


def node(count: int = 8) -> dict[str, Any]:
    return {"driver_version": "550.54.15", "gpus": [gpu(i) for i in range(count)], "xid_events": []}


def healthy(count: int = 8) -> dict[str, Any]:
    """`node(count)` with nothing an alert should see: no ECC errors, no pending remaps, full PCIe width."""
    result = node(count)
    for g in result["gpus"]:
        g["fields"][str(FIELD["ecc_dbe"])] = 0
        g["fields"][str(FIELD["remap_pending"])] = 0
        g["pcie_link_width"] = g["pcie_link_width_max"]
    return result


def changed(scenario: dict[str, Any], index: int, **values: Any) -> dict[str, Any]:
    """A copy of `scenario` with GPU `index` given `values` (None removes a key)."""
    result = copy.deepcopy(scenario)
    for key, value in values.items():
        if value is None:
            result["gpus"][index].pop(key, None)
        else:
            result["gpus"][index][key] = value
    return result


def write(path: Path, scenario: dict[str, Any]) -> Path:
    """Replace the scenario file atomically, so a fake never reads half of it."""
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(scenario))
    os.replace(partial, path)
    return path


Sample = SampleKey


def expected(scenario: dict[str, Any]) -> dict[Sample, float]:
    """Every per-GPU sample the scenario implies, in base units (GPM values once a window exists)."""
    samples: dict[Sample, float] = {}
    for index, g in enumerate(scenario["gpus"]):
        ids = {"gpu": str(index), "uuid": g["uuid"]}

        def put(name: str, value: float, ids: dict[str, str] = ids, **labels: str) -> None:
            samples[(f"trainmon_gpu_{name}", frozenset({**ids, **labels}.items()))] = value

        def field(key: str, g: dict[str, Any] = g) -> float:
            return float(g["fields"][str(FIELD[key])])

        put("up", 1)
        put("utilization_ratio", g["utilization_gpu"] / 100)
        put("fb_used_bytes", g["memory_used"])
        put("fb_free_bytes", g["memory_free"])
        put("fb_total_bytes", g["memory_total"])
        put("fb_reserved_bytes", g["memory_reserved"])
        put("power_watts", g["power_usage_mw"] / 1000)
        put("power_limit_watts", g["power_limit_mw"] / 1000)
        put("energy_joules_total", field("energy_mj") / 1000)
        put("temperature_celsius", g["temperature_gpu"], sensor="gpu")
        put("temperature_celsius", field("memory_temp"), sensor="memory")
        put("clock_hertz", g["clock_sm_mhz"] * 1e6, clock="sm")
        put("clock_hertz", g["clock_memory_mhz"] * 1e6, clock="memory")
        put("clocks_event_active", float(bool(g["clocks_event_reasons"] & pynvml.nvmlClocksEventReasonSwPowerCap)),
            reason="sw_power_cap")
        put("throttle_seconds_total", field("violation_power_ns") / 1e9, reason="power")
        put("throttle_seconds_total", field("violation_thermal_ns") / 1e9, reason="thermal")
        put("ecc_errors_total", field("ecc_sbe"), error="corrected")
        put("ecc_errors_total", field("ecc_dbe"), error="uncorrected")
        put("remapped_rows_total", field("remapped_cor"), error="corrected")
        put("remapped_rows_total", field("remapped_unc"), error="uncorrected")
        put("row_remap_pending", field("remap_pending"))
        put("row_remap_failure", field("remap_failure"))
        put("pcie_link_generation", g["pcie_link_gen"], kind="current")
        put("pcie_link_generation", g["pcie_link_gen_max"], kind="max")
        put("pcie_link_width", g["pcie_link_width"], kind="current")
        put("pcie_link_width", g["pcie_link_width_max"], kind="max")
        put("pcie_replay_errors_total", field("pcie_replay"))
        put("pcie_received_bytes_total", field("pcie_rx"))
        put("pcie_transmitted_bytes_total", field("pcie_tx"))
        put("nvlink_received_bytes_total", field("nvlink_rx_kib") * 1024)
        put("nvlink_transmitted_bytes_total", field("nvlink_tx_kib") * 1024)
        put("processes", len(g["processes"]))
        gpm = g["gpm"] if g.get("gpm_supported") else {}
        for metric_id, name in ((pynvml.NVML_GPM_METRIC_SM_UTIL, "sm_utilization_ratio"),
                                (pynvml.NVML_GPM_METRIC_SM_OCCUPANCY, "sm_occupancy_ratio"),
                                (pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL, "tensor_active_ratio"),
                                (pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL, "dram_active_ratio")):
            if str(metric_id) in gpm:
                put(name, gpm[str(metric_id)] / 100)
    return samples
