"""The DCGM HPC job-mapping directory: a file per GPU, named after its NVML index, a job id a line.

The format is dcgm-exporter's (`internal/pkg/transformation/hpc.go`): a file is named `<index>`, or
`<index>.<gpu instance>` for a MIG slice; any other name is not a mapping file. Slurm prolog and
epilog scripts (deploy/slurm/) write and remove the files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# ASCII digits only (`\d` is any script's: a file named `٣` is not GPU 3), as many as an index can have.
_FILE_NAME = re.compile(r"([0-9]{1,4})(?:\.([0-9]{1,4}))?")
# Slurm job ids: `123`, array tasks `123_4`, heterogeneous components `123+0`.
_JOB_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_.+-]{0,63}")


@dataclass(frozen=True, slots=True)
class JobLines:
    """The job ids of one mapping file, in file order without repeats, and the numbers (from 1) of the lines
    that were not ids: what they hold is never repeated, the file may be anyone's."""

    job_ids: tuple[str, ...]
    rejected: tuple[int, ...]


def gpu_index_of(file_name: str) -> int | None:
    """The NVML GPU index a mapping file is for (a MIG slice's file counts for its GPU); None: not one."""
    match = _FILE_NAME.fullmatch(file_name)
    return int(match.group(1)) if match else None


def parse_job_lines(text: str) -> JobLines:
    """Job ids, one a line; blank lines are ignored and anything that is not a job id is rejected."""
    ids: dict[str, None] = {}
    rejected: list[int] = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            continue
        if _JOB_ID.fullmatch(stripped):
            ids[stripped] = None
        else:
            rejected.append(number)
    return JobLines(job_ids=tuple(ids), rejected=tuple(rejected))
