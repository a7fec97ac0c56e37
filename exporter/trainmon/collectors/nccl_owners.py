"""Who an NCCL record belongs to: the hook's ranks on this node, else the GPU and its Slurm job.

NCCL's own outputs name a GPU (Inspector's textfile: the CUDA device UUID) or a process (Inspector's JSON
dump, RAS: the pid), never the training job or its global rank. The hook's `trainmon_train_rank_info`
carries all three (job_id, rank, the GPU's NVML UUID, the pid), so a record joins through it. Where no
hook runs, the GPU inventory gives the GPU of a pid (NVML's compute processes) and the process's cgroup
its Slurm job; the rank is then `gpu<NVML index>`, unique on the node (with `instance`, in the fleet).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from trainmon.collectors.hpc_jobs import cgroup_jobs
from trainmon.collectors.training import inflight_age
from trainmon.gpu_inventory import GpuInventory
from trainmon.ingest.server import IngestServer
from trainmon.roots import Root
from trainmon.wire import DRIVER_RANK

UNKNOWN_JOB = "unknown"


@dataclass(frozen=True, slots=True)
class Owner:
    job_id: str
    rank: str
    uuid: str  # the GPU's NVML UUID ("GPU-..."), "" when unknown


@dataclass(frozen=True, slots=True)
class Owners:
    """One cycle's join tables, built once by `snapshot` and read by the NCCL collectors."""

    by_uuid: dict[str, Owner]
    by_pid: dict[int, Owner]
    gpu_uuid: dict[int, str]  # NVML index -> UUID
    gpu_of_pid: dict[int, int]  # NVML's compute processes -> NVML index
    oldest_inflight: float  # seconds, over every live rank's in-flight collectives; 0 when none
    pods: frozenset[str] = frozenset()  # the hook's ranks' pod names: a pod's hostname, which NCCL writes
    hang_suspected: bool = False  # some live rank's hook says it is past its hang threshold
    # of_pid's answers this cycle: a dump's every record names its pid, and a cgroup read is a syscall or three
    resolved: dict[int, Owner | None] = field(default_factory=dict)

    def of_gpu(self, uuid: str, index: int | None, slurm_job: str) -> Owner | None:
        """The owner of a GPU named by its UUID, or by its index where the UUID is unknown; None when the
        GPU is not one of this node's."""
        if not uuid and index is not None:
            uuid = self.gpu_uuid.get(index, "")
        if uuid in self.by_uuid:
            return self.by_uuid[uuid]
        found = next((i for i, u in self.gpu_uuid.items() if u == uuid), None) if uuid else None
        if found is None:
            return None
        return Owner(job_id=slurm_job or UNKNOWN_JOB, rank=f"gpu{found}", uuid=uuid)

    def of_pid(self, pid: int, procfs: Root) -> Owner | None:
        """The owner of a process: the hook's rank with that pid, else its GPU and its Slurm job (cgroup)."""
        if pid in self.by_pid:
            return self.by_pid[pid]
        if pid not in self.resolved:
            self.resolved[pid] = self._of_gpu_process(pid, procfs)
        return self.resolved[pid]

    def _of_gpu_process(self, pid: int, procfs: Root) -> Owner | None:
        index = self.gpu_of_pid.get(pid)
        if index is None:
            return None
        jobs, _ = cgroup_jobs(procfs, [pid])
        return Owner(job_id=jobs[0] if jobs else UNKNOWN_JOB, rank=f"gpu{index}", uuid=self.gpu_uuid.get(index, ""))


def snapshot(ingest: IngestServer | None, inventory: GpuInventory) -> Owners:
    """The hook's live ranks (lowest rank first where two share a GPU) and the GPUs NVML read last."""
    by_uuid: dict[str, Owner] = {}
    by_pid: dict[int, Owner] = {}
    pods: set[str] = set()
    oldest = 0.0
    suspected = False
    if ingest is not None:
        view = ingest.table.view()
        now = time.time()
        for slot in sorted(view.ranks, key=lambda s: (s.report.job_id, s.report.rank)):
            r = slot.report
            if r.rank == DRIVER_RANK:
                continue
            owner = Owner(job_id=r.job_id, rank=str(r.rank), uuid=r.uuid)
            by_pid.setdefault(r.pid, owner)
            if r.pod:
                pods.add(r.pod)
            if r.uuid:
                by_uuid.setdefault(r.uuid, owner)
            oldest = max([oldest, *(inflight_age(slot, f, now, view.taken_at) for f in r.inflight)])
            suspected = suspected or (slot.exited_at is None and bool(r.hang_suspected))
    gpus = inventory.latest() or ()
    gpu_uuid = {g.index: g.uuid for g in gpus}
    gpu_of_pid = {pid: g.index for g in gpus for pid in g.pids or ()}
    return Owners(by_uuid=by_uuid, by_pid=by_pid, gpu_uuid=gpu_uuid, gpu_of_pid=gpu_of_pid, oldest_inflight=oldest,
                  pods=frozenset(pods), hang_suspected=suspected)


__all__ = ["UNKNOWN_JOB", "Owner", "Owners", "snapshot"]
