"""A node for the NCCL collectors' tests: a real ingest server the hook's reports reach, and a GPU inventory."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from tests.helpers.net import wait_until
from trainmon import wire
from trainmon.collectors.base import NodeResources
from trainmon.daemon import build_ingest, maintain_resources
from trainmon.gpu_inventory import GpuInventory, InventoryGpu
from trainmon.settings import Settings

UUID1 = "GPU-00000000-0000-0000-0000-000000000001"  # the fake NVML's GPU 1 (tests/fake_nvml/scenario.py)


class Node:
    def __init__(self, tmp_path: Path, **settings: object) -> None:
        (tmp_path / "run").mkdir(exist_ok=True)
        self.socket = tmp_path / "run" / "ingest.sock"
        self.settings = Settings(ingest_socket=str(self.socket), **settings)  # type: ignore[arg-type]
        self.gpus = GpuInventory()
        self.gpus.publish([InventoryGpu(index=i, uuid=f"GPU-00000000-0000-0000-0000-{i:012d}", pids=(4000 + i,))
                           for i in range(2)])
        self.resources = NodeResources(ingest=build_ingest(self.settings), gpus=self.gpus)
        maintain_resources(self.resources)

    def report(self, job_id: str = "llama", rank: int = 9, uuid: str = UUID1, seq: int = 1, **fields: object) -> None:
        """A hook report of this process, and wait until the rank table holds it (this report, not an earlier one
        of the same rank)."""
        report = wire.Report(job_id=job_id, rank=rank, start_time=1_767_000_000.0, seq=seq, world_size=16, uuid=uuid,
                             pid=os.getpid(), **fields)  # type: ignore[arg-type]
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(wire.encode(report), str(self.socket))
        assert self.resources.ingest is not None
        ingest = self.resources.ingest
        sent = (job_id, rank, seq)
        wait_until(lambda: sent in {(s.report.job_id, s.report.rank, s.report.seq) for s in ingest.table.view().ranks})

    def close(self) -> None:
        if self.resources.ingest is not None:
            self.resources.ingest.close()
