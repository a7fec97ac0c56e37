"""The `gpu` collector: NVML per GPU, NVLink, fabric, processes, XIDs and health."""

from __future__ import annotations

from trainmon.catalog.family import Family, Kind

GPU_UP = Family(
    "trainmon_gpu_up",
    Kind.GAUGE,
    "1 if the last NVML read of this GPU succeeded, 0 if it failed.",
    ("gpu", "uuid"),
)
GPUS_EXPECTED = Family(
    "trainmon_gpus_expected",
    Kind.GAUGE,
    "NVIDIA display/3D controllers found on the PCI bus.",
)
GPU_INFO = Family(
    "trainmon_gpu_info",
    Kind.INFO,
    "GPU identity; join on (gpu, uuid).",
    ("gpu", "uuid", "name", "pci_bus_id", "driver_version", "minor_number"),
)
GPU_PEAK_FLOPS = Family(
    "trainmon_gpu_peak_flops",
    Kind.GAUGE,
    "Dense peak FLOP/s of the GPU model, by dtype; absent for a model trainmon does not know.",
    ("gpu", "uuid", "dtype"),
    unit="flops",
)
GPU_UTILIZATION_RATIO = Family(
    "trainmon_gpu_utilization_ratio",
    Kind.GAUGE,
    "NVML utilization.gpu: time any kernel ran (an NCCL wait counts).",
    ("gpu", "uuid"),
    unit="ratio",
)
GPU_SM_UTILIZATION_RATIO = Family(
    "trainmon_gpu_sm_utilization_ratio",
    Kind.GAUGE,
    "SM activity over the last interval, from NVML GPM (Hopper+).",
    ("gpu", "uuid"),
    unit="ratio",
)
GPU_SM_ACTIVE_SECONDS_TOTAL = Family(
    "trainmon_gpu_sm_active_seconds_total",
    Kind.COUNTER,
    "SM activity integrated over time, from NVML GPM.",
    ("gpu", "uuid"),
    unit="seconds",
)
GPU_SM_OCCUPANCY_RATIO = Family(
    "trainmon_gpu_sm_occupancy_ratio",
    Kind.GAUGE,
    "Resident warps against the maximum, from NVML GPM.",
    ("gpu", "uuid"),
    unit="ratio",
)
GPU_TENSOR_ACTIVE_RATIO = Family(
    "trainmon_gpu_tensor_active_ratio",
    Kind.GAUGE,
    "Tensor-core activity, from NVML GPM.",
    ("gpu", "uuid"),
    unit="ratio",
)
GPU_DRAM_ACTIVE_RATIO = Family(
    "trainmon_gpu_dram_active_ratio",
    Kind.GAUGE,
    "DRAM bandwidth used against the maximum, from NVML GPM.",
    ("gpu", "uuid"),
    unit="ratio",
)
GPU_FB_USED_BYTES = Family(
    "trainmon_gpu_fb_used_bytes",
    Kind.GAUGE,
    "Framebuffer allocated (v2: excluding reserved).",
    ("gpu", "uuid"),
    unit="bytes",
)
GPU_FB_FREE_BYTES = Family(
    "trainmon_gpu_fb_free_bytes",
    Kind.GAUGE,
    "Framebuffer free.",
    ("gpu", "uuid"),
    unit="bytes",
)
GPU_FB_TOTAL_BYTES = Family(
    "trainmon_gpu_fb_total_bytes",
    Kind.GAUGE,
    "Framebuffer total.",
    ("gpu", "uuid"),
    unit="bytes",
)
GPU_FB_RESERVED_BYTES = Family(
    "trainmon_gpu_fb_reserved_bytes",
    Kind.GAUGE,
    "Framebuffer reserved by the driver (memory info v2 only).",
    ("gpu", "uuid"),
    unit="bytes",
)
GPU_POWER_WATTS = Family(
    "trainmon_gpu_power_watts",
    Kind.GAUGE,
    "Power draw.",
    ("gpu", "uuid"),
    unit="watts",
)
GPU_POWER_LIMIT_WATTS = Family(
    "trainmon_gpu_power_limit_watts",
    Kind.GAUGE,
    "Enforced power limit.",
    ("gpu", "uuid"),
    unit="watts",
)
GPU_ENERGY_JOULES_TOTAL = Family(
    "trainmon_gpu_energy_joules_total",
    Kind.COUNTER,
    "Energy used since the driver loaded.",
    ("gpu", "uuid"),
    unit="joules",
)
GPU_TEMPERATURE_CELSIUS = Family(
    "trainmon_gpu_temperature_celsius",
    Kind.GAUGE,
    "Temperature by sensor (gpu, memory).",
    ("gpu", "uuid", "sensor"),
    unit="celsius",
)
GPU_CLOCK_HERTZ = Family(
    "trainmon_gpu_clock_hertz",
    Kind.GAUGE,
    "Current clock (sm, memory).",
    ("gpu", "uuid", "clock"),
    unit="hertz",
)
GPU_CLOCKS_EVENT_ACTIVE = Family(
    "trainmon_gpu_clocks_event_active",
    Kind.GAUGE,
    "1 while this clock event (throttle) reason holds the clocks.",
    ("gpu", "uuid", "reason"),
)
GPU_THROTTLE_SECONDS_TOTAL = Family(
    "trainmon_gpu_throttle_seconds_total",
    Kind.COUNTER,
    "Time the clocks were held down, by policy (NVML violation counters).",
    ("gpu", "uuid", "reason"),
    unit="seconds",
)
GPU_ECC_ERRORS_TOTAL = Family(
    "trainmon_gpu_ecc_errors_total",
    Kind.COUNTER,
    "Volatile ECC errors since the driver loaded.",
    ("gpu", "uuid", "error"),
)
GPU_REMAPPED_ROWS_TOTAL = Family(
    "trainmon_gpu_remapped_rows_total",
    Kind.COUNTER,
    "Rows remapped for memory errors (Ampere+).",
    ("gpu", "uuid", "error"),
)
GPU_ROW_REMAP_PENDING = Family(
    "trainmon_gpu_row_remap_pending",
    Kind.GAUGE,
    "1 when a row remap waits for a GPU reset.",
    ("gpu", "uuid"),
)
GPU_ROW_REMAP_FAILURE = Family(
    "trainmon_gpu_row_remap_failure",
    Kind.GAUGE,
    "1 when a row remap failed.",
    ("gpu", "uuid"),
)
GPU_PCIE_LINK_GENERATION = Family(
    "trainmon_gpu_pcie_link_generation",
    Kind.GAUGE,
    "PCIe link generation (current, max).",
    ("gpu", "uuid", "kind"),
)
GPU_PCIE_LINK_WIDTH = Family(
    "trainmon_gpu_pcie_link_width",
    Kind.GAUGE,
    "PCIe link width in lanes (current, max).",
    ("gpu", "uuid", "kind"),
)
GPU_PCIE_REPLAY_ERRORS_TOTAL = Family(
    "trainmon_gpu_pcie_replay_errors_total",
    Kind.COUNTER,
    "PCIe replays.",
    ("gpu", "uuid"),
)
GPU_PCIE_RECEIVED_BYTES_TOTAL = Family(
    "trainmon_gpu_pcie_received_bytes_total",
    Kind.COUNTER,
    "PCIe bytes received (unwrapped field counter).",
    ("gpu", "uuid"),
    unit="bytes",
)
GPU_PCIE_TRANSMITTED_BYTES_TOTAL = Family(
    "trainmon_gpu_pcie_transmitted_bytes_total",
    Kind.COUNTER,
    "PCIe bytes transmitted (unwrapped field counter).",
    ("gpu", "uuid"),
    unit="bytes",
)
GPU_NVLINK_RECEIVED_BYTES_TOTAL = Family(
    "trainmon_gpu_nvlink_received_bytes_total",
    Kind.COUNTER,
    "NVLink data bytes received, all links.",
    ("gpu", "uuid"),
    unit="bytes",
)
GPU_NVLINK_TRANSMITTED_BYTES_TOTAL = Family(
    "trainmon_gpu_nvlink_transmitted_bytes_total",
    Kind.COUNTER,
    "NVLink data bytes transmitted, all links.",
    ("gpu", "uuid"),
    unit="bytes",
)
GPU_NVLINK_LINK_UP = Family(
    "trainmon_gpu_nvlink_link_up",
    Kind.GAUGE,
    "1 while this NVLink is active (NVML R570+).",
    ("gpu", "uuid", "link"),
)
GPU_NVLINK_ERRORS_TOTAL = Family(
    "trainmon_gpu_nvlink_errors_total",
    Kind.COUNTER,
    "NVLink errors on this link: crc_flit, crc_data, replay, recovery (Hopper and older); absent while "
    "zero.",
    ("gpu", "uuid", "link", "error"),
)
GPU_FABRIC_STATE_ID = Family(
    "trainmon_gpu_fabric_state_id",
    Kind.GAUGE,
    "NVSwitch fabric state: 1 not started, 2 in progress, 3 completed (nvmlGpuFabricState_t); absent "
    "without a fabric.",
    ("gpu", "uuid"),
)
GPU_FABRIC_HEALTH_MASK = Family(
    "trainmon_gpu_fabric_health_mask",
    Kind.GAUGE,
    "NVSwitch fabric health bit fields (NVML_GPU_FABRIC_HEALTH_MASK_*: degraded bandwidth, route "
    "recovery, route unhealthy, access timeout recovery).",
    ("gpu", "uuid"),
)
GPU_PROCESSES = Family(
    "trainmon_gpu_processes",
    Kind.GAUGE,
    "Compute processes on the GPU.",
    ("gpu", "uuid"),
)
GPU_PROCESS_FB_USED_BYTES = Family(
    "trainmon_gpu_process_fb_used_bytes",
    Kind.GAUGE,
    "Framebuffer used by one process.",
    ("gpu", "uuid", "pid"),
    unit="bytes",
)
GPU_PROCESS_INFO = Family(
    "trainmon_gpu_process_info",
    Kind.INFO,
    "A process using a GPU; join on pid.",
    ("pid", "name"),
)
GPU_XID_ERRORS_TOTAL = Family(
    "trainmon_gpu_xid_errors_total",
    Kind.COUNTER,
    "XID errors, every code, once per event (kernel log since boot, or NVML events where the kernel log "
    "is unreadable).",
    ("gpu", "uuid", "xid"),
)
GPU_XID_LAST_TIMESTAMP_SECONDS = Family(
    "trainmon_gpu_xid_last_timestamp_seconds",
    Kind.GAUGE,
    "When this XID was last reported (Unix time).",
    ("gpu", "uuid", "xid"),
    unit="seconds",
)
GPU_HEALTH_ACTION = Family(
    "trainmon_gpu_health_action",
    Kind.GAUGE,
    "1 for the strongest action this GPU needs now: none, restart_app, reset_gpu, reboot or drain "
    "(docs/gpu.md).",
    ("gpu", "uuid", "action"),
)
GPU_HEALTH_REASON_INFO = Family(
    "trainmon_gpu_health_reason_info",
    Kind.INFO,
    "Why the GPU needs an action, in runbook words; one series per reason.",
    ("gpu", "uuid", "reason"),
)

FAMILIES: tuple[Family, ...] = (
    GPU_UP,
    GPUS_EXPECTED,
    GPU_INFO,
    GPU_PEAK_FLOPS,
    GPU_UTILIZATION_RATIO,
    GPU_SM_UTILIZATION_RATIO,
    GPU_SM_ACTIVE_SECONDS_TOTAL,
    GPU_SM_OCCUPANCY_RATIO,
    GPU_TENSOR_ACTIVE_RATIO,
    GPU_DRAM_ACTIVE_RATIO,
    GPU_FB_USED_BYTES,
    GPU_FB_FREE_BYTES,
    GPU_FB_TOTAL_BYTES,
    GPU_FB_RESERVED_BYTES,
    GPU_POWER_WATTS,
    GPU_POWER_LIMIT_WATTS,
    GPU_ENERGY_JOULES_TOTAL,
    GPU_TEMPERATURE_CELSIUS,
    GPU_CLOCK_HERTZ,
    GPU_CLOCKS_EVENT_ACTIVE,
    GPU_THROTTLE_SECONDS_TOTAL,
    GPU_ECC_ERRORS_TOTAL,
    GPU_REMAPPED_ROWS_TOTAL,
    GPU_ROW_REMAP_PENDING,
    GPU_ROW_REMAP_FAILURE,
    GPU_PCIE_LINK_GENERATION,
    GPU_PCIE_LINK_WIDTH,
    GPU_PCIE_REPLAY_ERRORS_TOTAL,
    GPU_PCIE_RECEIVED_BYTES_TOTAL,
    GPU_PCIE_TRANSMITTED_BYTES_TOTAL,
    GPU_NVLINK_RECEIVED_BYTES_TOTAL,
    GPU_NVLINK_TRANSMITTED_BYTES_TOTAL,
    GPU_NVLINK_LINK_UP,
    GPU_NVLINK_ERRORS_TOTAL,
    GPU_FABRIC_STATE_ID,
    GPU_FABRIC_HEALTH_MASK,
    GPU_PROCESSES,
    GPU_PROCESS_FB_USED_BYTES,
    GPU_PROCESS_INFO,
    GPU_XID_ERRORS_TOTAL,
    GPU_XID_LAST_TIMESTAMP_SECONDS,
    GPU_HEALTH_ACTION,
    GPU_HEALTH_REASON_INFO,
)
