"""Which Slurm job a process is in, from its cgroup file: Slurm's own layout only."""

from __future__ import annotations

import pytest

from trainmon.parsers.cgroup import slurm_job_of


@pytest.mark.parametrize(("text", "expected"), [
    ("0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n", "4242"),  # cgroup v2
    ("0::/system.slice/slurmstepd.scope/job_4242/step_batch/user/task_special\n", "4242"),
    ("0::/system.slice/slurmstepd.scope/job_99\n", "99"),
    ("12:pids:/slurm/uid_1000/job_777/step_0/task_0\n7:devices:/slurm/uid_1000/job_777/step_0\n", "777"),  # v1
    ("12:pids:/user.slice\n4:memory:/slurm/uid_0/job_5/step_extern\n", "5"),
    ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
    ("0::/kubepods.slice/kubepods-pod1234.slice/cri-containerd-abc.scope\n", None),
    ("0::/system.slice/my_job_12.service\n", None),  # job_ must be a whole path component
    ("0::/system.slice/job_12abc\n", None),
    ("", None),
    ("garbage without colons", None),
    ("0::/system.slice/node-07_slurmstepd.scope/job_4242/step_0/user/task_0\n", "4242"),  # several slurmd a host
    ("5:freezer:/slurm_node-07/uid_1000/job_777/step_batch\n", "777"),
    # What a user can make: a delegated cgroup under their own slice, wherever a job_ component sits in it.
    ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/job_31337/x\n", None),
    ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/system.slice/slurmstepd.scope/job_31337\n", None),
    ("0::/user.slice/user-1000.slice/user@1000.service/slurm/uid_1000/job_31337\n", None),
    ("0::/system.slice/slurmstepd.scope/job_\u0664\u0662\n", None),  # Arabic-Indic digits
    ("0::/system.slice/slurmstepd.scope/job_" + "9" * 11 + "/step_0\n", None),  # past a 32-bit job id
    ("0::/system.slice/slurmstepd.scope/job_4294967295/step_0\n", "4294967295"),
])
def test_slurm_job_of(text: str, expected: str | None) -> None:
    assert expected == slurm_job_of(text)
