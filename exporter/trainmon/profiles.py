"""Exposition profiles: `full` serves every family; `fleet` only what the shipped alerts, recording rules
and Fleet dashboard read, plus identity and collector health, for Prometheus tiers that hold many nodes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from trainmon.catalog import (
    Family,
    aer,
    daemon,
    fs,
    gpu,
    hpc_jobs,
    infiniband,
    nccl_inspector,
    nccl_ras,
    nvme,
    pod_resources,
    training,
)

if TYPE_CHECKING:  # settings imports PROFILES and must stay light (no prometheus_client)
    from trainmon.families import Metric

PROFILES = ("full", "fleet")

# What `fleet` serves; FLEET_FAMILIES holds their exposed names (a counter's with `_total`, an info's with `_info`,
# a histogram's base), which is what `exposed_name` gives a collected family.
FLEET: tuple[Family, ...] = (
    daemon.BUILD_INFO,
    daemon.COLLECTOR_SUCCESS,
    fs.FS_RPC_SECONDS_TOTAL,
    fs.FS_RPC_TIMEOUTS_TOTAL,
    fs.FS_RPCS_TOTAL,
    pod_resources.GPU_ALLOCATION_INFO,
    gpu.GPU_ECC_ERRORS_TOTAL,
    gpu.GPU_ENERGY_JOULES_TOTAL,
    gpu.GPU_FB_USED_BYTES,
    gpu.GPU_HEALTH_ACTION,
    gpu.GPU_HEALTH_REASON_INFO,  # the health alerts' descriptions query it when they are sent
    gpu.GPU_INFO,
    hpc_jobs.GPU_JOB_INFO,
    infiniband.GPU_NIC_AFFINITY_INFO,  # TrainmonNCCLSlowLink names the slow rank's NIC by it
    gpu.GPU_NVLINK_ERRORS_TOTAL,
    gpu.GPU_PCIE_LINK_WIDTH,
    gpu.GPU_PEAK_FLOPS,
    gpu.GPU_POWER_LIMIT_WATTS,
    gpu.GPU_POWER_WATTS,
    gpu.GPU_ROW_REMAP_FAILURE,
    gpu.GPU_ROW_REMAP_PENDING,
    gpu.GPU_SM_UTILIZATION_RATIO,
    gpu.GPU_THROTTLE_SECONDS_TOTAL,
    gpu.GPU_UP,
    gpu.GPU_UTILIZATION_RATIO,
    gpu.GPU_XID_ERRORS_TOTAL,
    gpu.GPU_XID_LAST_TIMESTAMP_SECONDS,
    gpu.GPUS_EXPECTED,
    infiniband.INFINIBAND_INFO,  # TrainmonInfinibandLinkDegraded: a port's rate against its board's
    infiniband.INFINIBAND_LINK_DOWNED_TOTAL,
    infiniband.INFINIBAND_PORT_ERRORS_RECEIVED_TOTAL,
    infiniband.INFINIBAND_PORT_INFO,
    infiniband.INFINIBAND_RATE_BYTES_PER_SECOND,
    infiniband.INFINIBAND_STATE_ID,
    infiniband.INFINIBAND_SYMBOL_ERROR_TOTAL,
    training.INGEST_RANKS,
    training.NCCL_GROUP_SIZE,
    nccl_inspector.NCCL_INSPECTOR_BUS_BANDWIDTH_BYTES_PER_SECOND,
    nccl_inspector.NCCL_INSPECTOR_INFO,
    nccl_ras.NCCL_RAS_MISSING_RANK_INFO,  # TrainmonJobHung: a dead rank whose node no longer reports
    nccl_ras.NCCL_RAS_MISSING_RANKS,
    training.NCCL_INFLIGHT_OLDEST_SECONDS,
    training.NCCL_ISSUED_TOTAL,
    training.NCCL_TIME_SECONDS_TOTAL,
    nvme.NVME_INFO,  # TrainmonNVMeLatencyHigh: a drive against the fastest of its model
    nvme.NVME_READ_TIME_SECONDS_TOTAL,
    nvme.NVME_READS_COMPLETED_TOTAL,
    nvme.NVME_WRITE_TIME_SECONDS_TOTAL,
    nvme.NVME_WRITES_COMPLETED_TOTAL,
    aer.PCIE_AER_ERRORS_TOTAL,
    training.TRAIN_COMM_WAIT_SECONDS_TOTAL,
    training.TRAIN_CUDA_ALLOC_RETRIES_TOTAL,
    training.TRAIN_CUDA_OOMS_TOTAL,
    training.TRAIN_DATALOADER_WAIT_SECONDS_TOTAL,
    training.TRAIN_FIRST_STEP_TIMESTAMP_SECONDS,
    training.TRAIN_GRAD_NORM_SPIKES_TOTAL,
    training.TRAIN_HANG_LOCATION,  # TrainmonJobHung: the class of a hang and its culprit
    training.TRAIN_HANG_SUSPECTED,
    training.TRAIN_LAST_STEP_TIMESTAMP_SECONDS,
    training.TRAIN_LOSS,
    training.TRAIN_LOSS_SCALE,
    training.TRAIN_LOSS_SPIKES_TOTAL,
    training.TRAIN_MODEL_FLOPS_TOTAL,
    training.TRAIN_NONFINITE_LOSS_TOTAL,
    training.TRAIN_PHASE,
    training.TRAIN_PHASE_SECONDS_TOTAL,
    training.TRAIN_PIPELINE_STAGE,  # the straggler-cause rules: a rank behind by its pipeline stage
    training.TRAIN_PG_TIMEOUT_SECONDS,
    training.TRAIN_PROCESS_START_TIMESTAMP_SECONDS,
    training.TRAIN_RANK_EXITED,
    training.TRAIN_RANK_EXITS_TOTAL,
    training.TRAIN_RANK_INFO,
    training.TRAIN_SAMPLES_TOTAL,
    training.TRAIN_STACK_INFO,  # TrainmonJobHung groups the suspected ranks' stacks
    training.TRAIN_STEP_DURATION_SECONDS,
    training.TRAIN_STEPS_TOTAL,
    training.TRAIN_TOKENS_TOTAL,
)
FLEET_FAMILIES = frozenset(family.name for family in FLEET)
# Histograms the fleet tier reads only as a mean: served as `_sum` and `_count`, without the buckets
# (13 + 1 per rank and histogram). A Fleet-profile node then serves a bucket-less summary.
FLEET_WITHOUT_BUCKETS = frozenset({training.TRAIN_STEP_DURATION_SECONDS.name})
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
