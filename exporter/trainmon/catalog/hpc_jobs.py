"""The `hpc_jobs` collector: the scheduler job that owns each GPU."""

from __future__ import annotations

from trainmon.catalog.family import Family, Kind

GPU_JOB_INFO = Family(
    "trainmon_gpu_job_info",
    Kind.INFO,
    "Scheduler job running on the GPU (Slurm: mapping directory, else the cgroup of its compute "
    "processes); join on (gpu, uuid).",
    ("gpu", "uuid", "scheduler", "job_id"),
)

FAMILIES: tuple[Family, ...] = (
    GPU_JOB_INFO,
)
