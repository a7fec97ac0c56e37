"""`/proc/<pid>/cgroup`: which Slurm job a process belongs to."""

from __future__ import annotations

import re

# slurmd puts every job's processes under a `job_<id>` directory, in cgroup v2
# (`0::/system.slice/slurmstepd.scope/job_123/step_0/user/task_0`) and in each v1 hierarchy
# (`7:devices:/slurm/uid_1000/job_123/step_batch`).
_SLURM_JOB = re.compile(r"/job_(\d+)(?=/|$)")


def slurm_job_of(text: str) -> str | None:
    """The Slurm job id in a process's cgroup file, or None when the process is in no job."""
    for line in text.splitlines():
        _, _, path = line.partition(":")
        match = _SLURM_JOB.search(path.partition(":")[2])
        if match:
            return match.group(1)
    return None
