"""The `hpc_jobs` collector: which Slurm job each GPU runs (SPEC §4), without the training hook.

Enabled by `--hpc-job-mapping-dir` (or by naming it in `--collectors` for the cgroup path alone).
A GPU's jobs come from its file in the DCGM mapping directory (parsers/job_mapping.py), which the
Slurm prolog writes and the epilog removes (deploy/slurm/); a GPU without a file takes the jobs of
its NVML compute processes, from the `job_<id>` directory of `<procfs>/<pid>/cgroup`, which slurmd
creates and any user may read. Read at most every `REFRESH_SECONDS` from the collection cycle,
never on a scrape. A file that is empty, too large, binary or gone mid-read, and a process that
exits before its cgroup is read, drop only what they affect and are listed in `skipped`. A mapping
file is read only if it is a regular file (not a symbolic link, not a FIFO) owned by root, who runs
the prolog, or by the daemon's own user; a note about a file names it and what was wrong, never what
it holds (a link to a root-only file must not serve that file's first line to whoever reads the status).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from trainmon.catalog.hpc_jobs import GPU_JOB_INFO
from trainmon.collectors.base import Collection, NodeResources
from trainmon.collectors.problems import ProblemLog
from trainmon.errors import CollectorError
from trainmon.families import info
from trainmon.gpu_inventory import InventoryGpu
from trainmon.parsers.cgroup import slurm_job_of
from trainmon.parsers.job_mapping import gpu_index_of, parse_job_lines
from trainmon.roots import Root, Unavailable, read_attribute, read_owned_file
from trainmon.settings import Settings

log = logging.getLogger(__name__)

REFRESH_SECONDS = 30.0
MAX_MAPPING_BYTES = 64 << 10  # a GPU's file holds a few job ids; anything larger is not a mapping file
MAX_CGROUP_BYTES = 64 << 10
SCHEDULER = "slurm"
GONE = frozenset({"ENOENT", "ESRCH"})  # the process exited between listing and reading
UNREAD = {"ENOENT": "removed while being read", "ELOOP": "a symbolic link, not followed"}
# Jobs served per GPU (Slurm shares a GPU among a few jobs at most); the others are counted and noted.
MAX_JOBS_PER_GPU = 32


@dataclass(frozen=True, slots=True)
class Mapping:
    """The mapping directory as read once: job ids by GPU index, and the files that were dropped."""

    jobs: dict[int, tuple[str, ...]]
    problems: tuple[str, ...]


def read_mapping(directory: Path) -> Mapping:
    """Every mapping file of `directory`; an absent directory is an empty mapping (no job has started)."""
    jobs: dict[int, dict[str, None]] = {}
    problems: list[str] = []
    owners = frozenset({0, os.geteuid()})
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except FileNotFoundError:
        return Mapping(jobs={}, problems=())
    for entry in entries:
        index = gpu_index_of(entry.name)
        if index is None:
            continue
        name = f"mapping file {entry.name}"
        text = read_owned_file(entry.path, MAX_MAPPING_BYTES, owners)
        if isinstance(text, Unavailable):
            if text.why != "EISDIR":
                problems.append(f"{name}: {UNREAD.get(text.why, text.why)}")
            continue
        if "\0" in text or "\ufffd" in text:
            problems.append(f"{name}: binary, not job ids a line")
            continue
        lines = parse_job_lines(text)
        if lines.rejected:
            problems.append(f"{name}: {len(lines.rejected)} line(s) that are not job ids, "
                            f"first line {lines.rejected[0]}")
        if not lines.job_ids:
            if not lines.rejected:
                problems.append(f"{name}: empty")
            continue
        jobs.setdefault(index, {}).update(dict.fromkeys(lines.job_ids))
    return Mapping(jobs={i: tuple(ids) for i, ids in jobs.items()}, problems=tuple(problems))


def cgroup_jobs(procfs: Root, pids: Iterable[int]) -> tuple[tuple[str, ...], list[str]]:
    """The Slurm jobs of these processes, from their cgroup files; a process gone meanwhile is dropped."""
    jobs: dict[str, None] = {}
    problems: list[str] = []
    for pid in pids:
        text = read_attribute(procfs.join(str(pid), "cgroup"), MAX_CGROUP_BYTES)
        if isinstance(text, Unavailable):
            why = "exited before its cgroup was read" if text.why in GONE else text.why
            problems.append(f"pid {pid}: {why}")
            continue
        job = slurm_job_of(text)
        if job is not None:
            jobs[job] = None
    return tuple(jobs), problems


class HpcJobsCollector:
    name = "hpc_jobs"

    def __init__(self, settings: Settings, resources: NodeResources,
                 refresh_s: float = REFRESH_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._directory = settings.hpc_job_mapping_dir
        self._procfs = Root(settings.procfs, "procfs")
        self._inventory = resources.gpus
        self._refresh_s = refresh_s
        self._clock = clock
        self._problems = ProblemLog(log, self.name)
        self._cached: Collection | None = None
        self._read_at = 0.0

    def collect(self) -> Collection:
        now = self._clock()
        if self._cached is not None and now - self._read_at < self._refresh_s:
            return self._cached
        gpus = self._inventory.latest()
        if gpus is None:
            raise CollectorError("no GPU inventory to map jobs to: the gpu collector has not run (enabled?)")
        self._cached, self._read_at = self._collection(gpus), now
        return self._cached

    def _collection(self, gpus: Sequence[InventoryGpu]) -> Collection:
        mapping = read_mapping(self._directory) if self._directory is not None else Mapping(jobs={}, problems=())
        problems = list(mapping.problems)
        indices = {g.index for g in gpus}
        problems += [f"mapping file {i}: no GPU {i} on this node" for i in sorted(mapping.jobs) if i not in indices]
        family = info(GPU_JOB_INFO)
        found: list[str] = []
        sources: dict[str, str] = {}
        not_served = 0
        for gpu in gpus:
            if gpu.index in mapping.jobs:
                jobs, source = mapping.jobs[gpu.index], "mapping"
            elif gpu.pids:
                jobs, dropped = cgroup_jobs(self._procfs, gpu.pids)
                problems += [f"gpu {gpu.index}: {p}" for p in dropped]
                source = "cgroup"
            else:
                continue
            if len(jobs) > MAX_JOBS_PER_GPU:
                not_served += len(jobs) - MAX_JOBS_PER_GPU
                problems.append(f"gpu {gpu.index}: {len(jobs) - MAX_JOBS_PER_GPU} more jobs not served "
                                f"(at most {MAX_JOBS_PER_GPU} a GPU)")
                jobs = jobs[:MAX_JOBS_PER_GPU]
            for job in jobs:
                family.add_metric([str(gpu.index), gpu.uuid, SCHEDULER, job], {})
            if jobs:
                sources[str(gpu.index)] = source
                found.append(f"gpu {gpu.index} {gpu.uuid}: slurm job {', '.join(jobs)} (from the {source})")
        return Collection(
            families=(family,), found=tuple(found), skipped=self._problems.update(problems),
            details={"mapping_dir": str(self._directory) if self._directory else None, "job_sources": sources,
                     "jobs_not_served": not_served},
        )

    def close(self) -> None:
        pass


__all__ = ["HpcJobsCollector", "cgroup_jobs", "read_mapping"]
