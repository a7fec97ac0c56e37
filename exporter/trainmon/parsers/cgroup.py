"""`/proc/<pid>/cgroup`: which Slurm job a process belongs to."""

from __future__ import annotations

import re

# Only where slurmd puts a job's processes, under cgroups only root can make: cgroup v2
# (`0::/system.slice/slurmstepd.scope/job_123/step_0/user/task_0`; a slurmd built for several per host
# names the scope `<node>_slurmstepd.scope`) and each v1 hierarchy (`7:devices:/slurm/uid_1000/job_123/
# step_batch`, `/slurm_<node>/…` likewise). A `job_<id>` anywhere else is anyone's: a user's delegated
# cgroup (`/user.slice/…/app.slice/job_31337/x`) claims no job. Job ids are 32-bit: at most 10 ASCII digits.
_SLURM_JOB = re.compile(r"/(?:system\.slice/(?:[A-Za-z0-9._-]+_)?slurmstepd\.scope"
                        r"|slurm(?:_[A-Za-z0-9._-]+)?/uid_[0-9]{1,10})/job_([0-9]{1,10})(?:/|$)")


def slurm_job_of(text: str) -> str | None:
    """The Slurm job id in a process's cgroup file, or None when the process is in no job."""
    for line in text.split("\n"):
        _, _, path = line.partition(":")
        match = _SLURM_JOB.match(path.partition(":")[2])
        if match:
            return match.group(1)
    return None
