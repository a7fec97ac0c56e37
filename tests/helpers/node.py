"""A whole synthetic GPU node: procfs/sysfs tree, fake NVML scenario and training ranks.

Benchmarks and end-to-end tests build the node a real daemon (and node_exporter) read.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fake_nvml import scenario
from tests.helpers.daemon import Daemon
from tests.helpers.net import wait_until
from tests.helpers.trees import (
    DEFAULT_HW_COUNTERS,
    Disk,
    IbDevice,
    IbPort,
    NvmeController,
    write_diskstats,
    write_infiniband,
    write_nvme,
)
from trainmon.wire import STEP_BUCKETS, Collective, Report, encode

OWNER_JOB = "bench-job"  # the Slurm job that owns every GPU, the job the ranks report too


@dataclass
class SyntheticNode:
    root: Path
    gpus: int = 8
    nvme_namespaces: int = 16
    ib_ports: int = 8
    nvml: dict[str, Any] | None = None  # the fake NVML scenario; None: `scenario.node(gpus)`
    proc: Path = field(init=False)
    sys: Path = field(init=False)
    scenario_path: Path = field(init=False)
    job_mapping: Path = field(init=False)  # the Slurm prolog's GPU -> job files: every GPU has an owner

    def __post_init__(self) -> None:
        self.proc, self.sys = self.root / "proc", self.root / "sys"
        self.scenario_path = self.root / "nvml.json"
        self.job_mapping = self.root / "job-mapping"
        self.write(step=0)
        (self.proc / str(os.getpid())).mkdir()  # the ranks a RankFeeder sends are this process: alive, not gone

    def write(self, step: int) -> None:
        """Lay out (or advance) the tree: `step` moves every counter forward."""
        disks = [Disk(f"nvme{i}n1", seed=1 + i + step, minor=i) for i in range(self.nvme_namespaces)]
        write_diskstats(self.proc, disks)
        write_nvme(self.sys, [NvmeController(f"nvme{i}", entries=[f"nvme{i}n1"])
                              for i in range(self.nvme_namespaces)])
        write_infiniband(self.sys, [IbDevice(f"mlx5_{i}", ports=[IbPort(f"mlx5_{i}", hw_counters=DEFAULT_HW_COUNTERS)])
                                    for i in range(self.ib_ports)])
        scenario.write(self.scenario_path, self.nvml or scenario.node(self.gpus))
        self.job_mapping.mkdir(parents=True, exist_ok=True)
        for gpu in range(self.gpus):
            (self.job_mapping / str(gpu)).write_text(f"{OWNER_JOB}\n")

    def ib_counter(self, port: int, name: str) -> Path:
        """The sysfs file of the error or traffic counter `name` (`symbol_error`) of IB port `port`."""
        return self.sys / "class" / "infiniband" / f"mlx5_{port}" / "ports" / "1" / "counters" / name

    def daemon_args(self, ingest_socket: Path, interval: float = 5.0) -> list[str]:
        # Never the host's kernel log: none here, so the scenario's NVML XID events count.
        return ["--procfs", str(self.proc), "--sysfs", str(self.sys), "--interval", str(interval),
                "--collectors", "gpu,nvme,infiniband,training", "--ingest-socket", str(ingest_socket),
                "--kmsg", str(self.root / "kmsg")]

    def owner_args(self) -> list[str]:
        """The daemon reads the Slurm owner of every GPU (trainmon_gpu_job_info)."""
        return ["--hpc-job-mapping-dir", str(self.job_mapping)]

    def daemon_env(self, fake_nvml_dir: Path) -> dict[str, str]:
        return {"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_SCENARIO": str(self.scenario_path)}


def rank_report(job_id: str, rank: int, world_size: int, step: int, seq: int) -> Report:
    """A plausible cumulative report of one rank after `step` steps of 0.8 s."""
    buckets = (*(step if bound >= 1.0 else 0 for bound in STEP_BUCKETS), step)
    return Report(
        job_id=job_id, rank=rank, pid=os.getpid(), start_time=1_700_000_000.0, seq=seq, local_rank=rank,
        world_size=world_size, uuid=scenario.gpu(rank % 8)["uuid"], backend="nccl", framework="ddp",
        steps=step, samples=step * 32, tokens=step * 32 * 4096, step_buckets=buckets,
        step_seconds_sum=step * 0.8, last_step=time.time(), comm_wait=step * 0.2, data_wait=step * 0.01,
        collectives=(Collective(op="all_reduce", group="default_pg", seconds=step * 0.25, calls=step * 4,
                                bytes=step * 4 * 100_000_000),),
        group_sizes={"default_pg": world_size}, loss=2.5, grad_norm=1.1,
        nccl_env={"NCCL_IB_HCA": "mlx5"}, cuda_alloc_retries=0, cuda_ooms=0,
    )


class RankFeeder:
    """Sends the reports of `ranks` training ranks to a daemon's ingest socket, as the hook would."""

    def __init__(self, ingest_socket: Path, ranks: int, job_id: str = OWNER_JOB) -> None:
        self._path = os.fspath(ingest_socket)
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._ranks = ranks
        self._job_id = job_id
        self._seq = 0

    def send_all(self, step: int) -> None:
        for rank in range(self._ranks):
            self._seq += 1
            self._socket.sendto(encode(rank_report(self._job_id, rank, self._ranks, step, self._seq)), self._path)

    def close(self) -> None:
        self._socket.close()


def served_with_ranks(daemon: Daemon, ingest_socket: Path, ranks: int) -> str:
    """What `daemon` serves once `ranks` ranks of `OWNER_JOB` have reported to it through `ingest_socket`."""
    feeder = RankFeeder(ingest_socket, ranks)
    try:
        feeder.send_all(step=10)
        wait_until(lambda: f'rank="{ranks - 1}"' in daemon.metrics_text(), timeout=30)
        return daemon.metrics_text()
    finally:
        feeder.close()
