"""Exposition profiles: `full` serves every family; `fleet` only what the shipped alerts, recording rules
and Fleet dashboard read, plus identity and collector health, for Prometheus tiers that hold many nodes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # settings imports PROFILES and must stay light (no prometheus_client)
    from trainmon.families import Metric

PROFILES = ("full", "fleet")

# Families by their exposed name (counters with `_total`, info metrics with `_info`, histograms by base).
FLEET_FAMILIES = frozenset({
    "trainmon_build_info",
    "trainmon_collector_success",
    "trainmon_fs_rpc_seconds_total",
    "trainmon_fs_rpc_timeouts_total",
    "trainmon_fs_rpcs_total",
    "trainmon_gpu_allocation_info",
    "trainmon_gpu_ecc_errors_total",
    "trainmon_gpu_energy_joules_total",
    "trainmon_gpu_fb_used_bytes",
    "trainmon_gpu_health_action",
    "trainmon_gpu_health_reason_info",  # the health alerts' descriptions query it when they are sent
    "trainmon_gpu_info",
    "trainmon_gpu_job_info",
    "trainmon_gpu_nic_affinity_info",  # TrainmonNCCLSlowLink names the slow rank's NIC by it
    "trainmon_gpu_nvlink_errors_total",
    "trainmon_gpu_pcie_link_width",
    "trainmon_gpu_peak_flops",
    "trainmon_gpu_power_limit_watts",
    "trainmon_gpu_power_watts",
    "trainmon_gpu_row_remap_failure",
    "trainmon_gpu_row_remap_pending",
    "trainmon_gpu_sm_utilization_ratio",
    "trainmon_gpu_throttle_seconds_total",
    "trainmon_gpu_up",
    "trainmon_gpu_utilization_ratio",
    "trainmon_gpu_xid_errors_total",
    "trainmon_gpu_xid_last_timestamp_seconds",
    "trainmon_gpus_expected",
    "trainmon_infiniband_info",  # TrainmonInfinibandLinkDegraded: a port's rate against its board's
    "trainmon_infiniband_link_downed_total",
    "trainmon_infiniband_port_errors_received_total",
    "trainmon_infiniband_port_info",
    "trainmon_infiniband_rate_bytes_per_second",
    "trainmon_infiniband_state_id",
    "trainmon_infiniband_symbol_error_total",
    "trainmon_ingest_ranks",
    "trainmon_nccl_group_size",
    "trainmon_nccl_inspector_bus_bandwidth_bytes_per_second",
    "trainmon_nccl_inspector_info",
    "trainmon_nccl_ras_missing_rank_info",  # TrainmonJobHung: a dead rank whose node no longer reports
    "trainmon_nccl_ras_missing_ranks",
    "trainmon_nccl_inflight_oldest_seconds",
    "trainmon_nccl_issued_total",
    "trainmon_nccl_time_seconds_total",
    "trainmon_nvme_info",  # TrainmonNVMeLatencyHigh: a drive against the fastest of its model
    "trainmon_nvme_read_time_seconds_total",
    "trainmon_nvme_reads_completed_total",
    "trainmon_nvme_write_time_seconds_total",
    "trainmon_nvme_writes_completed_total",
    "trainmon_pcie_aer_errors_total",
    "trainmon_train_comm_wait_seconds_total",
    "trainmon_train_cuda_alloc_retries_total",
    "trainmon_train_cuda_ooms_total",
    "trainmon_train_dataloader_wait_seconds_total",
    "trainmon_train_first_step_timestamp_seconds",
    "trainmon_train_grad_norm_spikes_total",
    "trainmon_train_hang_location",  # TrainmonJobHung: the class of a hang and its culprit
    "trainmon_train_hang_suspected",
    "trainmon_train_last_step_timestamp_seconds",
    "trainmon_train_loss",
    "trainmon_train_loss_scale",
    "trainmon_train_loss_spikes_total",
    "trainmon_train_model_flops_total",
    "trainmon_train_nonfinite_loss_total",
    "trainmon_train_phase",
    "trainmon_train_phase_seconds_total",
    "trainmon_train_pipeline_stage",  # the straggler-cause rules: a rank behind by its pipeline stage
    "trainmon_train_pg_timeout_seconds",
    "trainmon_train_process_start_timestamp_seconds",
    "trainmon_train_rank_exited",
    "trainmon_train_rank_exits_total",
    "trainmon_train_rank_info",
    "trainmon_train_samples_total",
    "trainmon_train_stack_info",  # TrainmonJobHung groups the suspected ranks' stacks
    "trainmon_train_step_duration_seconds",
    "trainmon_train_steps_total",
    "trainmon_train_tokens_total",
})
# Histograms the fleet tier reads only as a mean: served as `_sum` and `_count`, without the buckets
# (13 + 1 per rank and histogram). A Fleet-profile node then serves a bucket-less summary.
FLEET_WITHOUT_BUCKETS = frozenset({"trainmon_train_step_duration_seconds"})
# prometheus_client strips these from a family's name and adds them back on output.
EXPOSED_SUFFIX = {"counter": "_total", "info": "_info"}


def exposed_name(family: Metric) -> str:
    return family.name + EXPOSED_SUFFIX.get(family.type, "")


def without_buckets(family: Metric) -> Metric:
    """The histogram as a summary without quantiles: the same `_sum` and `_count` series, no `_bucket`."""
    from prometheus_client.core import Metric as MetricFamily

    summary = MetricFamily(family.name, family.documentation, "summary")
    summary.samples = [s for s in family.samples if not s.name.endswith("_bucket")]
    return summary


def fleet_shape(family: Metric) -> Metric | None:
    name = exposed_name(family)
    if name not in FLEET_FAMILIES:
        return None
    return without_buckets(family) if name in FLEET_WITHOUT_BUCKETS else family


def profile_shape(profile: str) -> Callable[[Metric], Metric | None] | None:
    """What `profile` serves of a family (None: nothing of it); None when it serves every family whole."""
    if profile == "full":
        return None
    return fleet_shape
