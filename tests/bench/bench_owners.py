"""The GPU-ownership collectors' CPU cost per minute on 8 GPUs: kubelet with 100 pods, Slurm mapping.

    python -m tests.bench.bench_owners [--refreshes N]

`pod_resources`: a real gRPC PodResources server (tests/helpers/kubelet.py) in another process, so
only the daemon's side is timed: one `List` call and its decoding per refresh (2 a minute), and the
join with the GPU inventory in every collection cycle (12 a minute at the default 5 s interval).
`hpc_jobs`: the mapping directory the prolog writes, and the cgroup fallback, read per refresh.
CPU time of this process (all threads, gRPC's included). Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.helpers.kubelet import GPU, FakeKubelet, Pod, kubelet_server
from tests.helpers.net import wait_until
from tests.helpers.slurm import run_script
from tests.helpers.trees import write
from trainmon.collectors.base import NodeResources
from trainmon.collectors.hpc_jobs import HpcJobsCollector
from trainmon.collectors.pod_resources import PodResourcesCollector
from trainmon.gpu_inventory import GpuInventory, InventoryGpu
from trainmon.settings import Settings

GPUS = 8
PODS = 100
REFRESHES_PER_MINUTE = 2  # every 30 s
CYCLES_PER_MINUTE = 12  # --interval 5


def uuid(index: int) -> str:
    return f"GPU-00000000-0000-0000-0000-{index:012d}"


def pods(shared: bool) -> list[Pod]:
    """100 pods of two containers; 8 hold a GPU each, or (time-slicing) every pod holds a GPU replica."""
    found = []
    for i in range(PODS):
        holds = shared or i < GPUS
        devices = {GPU: [f"{uuid(i % GPUS)}::{i // GPUS}" if shared else uuid(i)]} if holds else {}
        found.append(Pod(f"team-{i % 7}", f"pod-{i:03d}-abcde", {"main": devices, "sidecar": {}}))
    return found


def inventory() -> GpuInventory:
    result = GpuInventory()
    result.publish(InventoryGpu(index=i, uuid=uuid(i), pids=(5000 + i,)) for i in range(GPUS))
    return result


def cpu_per_call(call: Callable[[], object], count: int) -> float:
    call()
    start = time.process_time()
    for _ in range(count):
        call()
    return (time.process_time() - start) / count


def serve(socket: str, shared: bool) -> None:
    with kubelet_server(Path(socket), FakeKubelet(pods(shared))):
        sys.stdin.read()  # until the bench closes our stdin


def bench_pod_resources(directory: Path, shared: bool, refreshes: int) -> str:
    socket = directory / f"kubelet-{int(shared)}.sock"
    server = subprocess.Popen([sys.executable, "-m", "tests.bench.bench_owners", "--serve", str(socket),
                               *(["--shared"] if shared else [])], stdin=subprocess.PIPE)
    try:
        wait_until(socket.exists, timeout=30)
        collector = PodResourcesCollector(Settings(kubelet_pod_resources_socket=socket),
                                          NodeResources(gpus=inventory()), refresh_s=3600)
        try:
            wait_until(lambda: collector.refresh().error is None, timeout=30)
            refresh = cpu_per_call(collector.refresh, refreshes)
            join = cpu_per_call(collector.collect, refreshes * 5)
            series = len(list(collector.collect().families[0].samples))
        finally:
            collector.close()
    finally:
        server.communicate(b"", timeout=30)
    per_minute = refresh * REFRESHES_PER_MINUTE + join * CYCLES_PER_MINUTE
    label = "pod_resources, time-sliced (100 pods on 8 GPUs)" if shared else "pod_resources, 8 of 100 pods hold GPUs"
    return (f"{label:<48} List {refresh * 1e3:6.2f} ms, join {join * 1e3:5.2f} ms, {series:3d} series: "
            f"{per_minute * 1e3:6.1f} ms CPU per minute")


def bench_hpc_jobs(directory: Path, refreshes: int, with_mapping: bool) -> str:
    mapping, procfs = directory / f"mapping-{int(with_mapping)}", directory / "proc"
    for i in range(GPUS):
        write(procfs / str(5000 + i) / "cgroup", f"0::/system.slice/slurmstepd.scope/job_{900 + i}/step_0/user\n")
        if with_mapping:
            run_script("prolog.sh", mapping, str(800 + i), SLURM_JOB_GPUS=str(i))
    collector = HpcJobsCollector(Settings(hpc_job_mapping_dir=mapping if with_mapping else None, procfs=procfs),
                                 NodeResources(gpus=inventory()), refresh_s=0)
    refresh = cpu_per_call(collector.collect, refreshes * 5)
    label = "hpc_jobs, mapping directory" if with_mapping else "hpc_jobs, cgroups of 8 processes"
    return f"{label:<48} read {refresh * 1e3:6.2f} ms: {refresh * REFRESHES_PER_MINUTE * 1e3:6.1f} ms CPU per minute"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--refreshes", type=int, default=200, help="refreshes timed per case")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--shared", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.shared)
        return
    with tempfile.TemporaryDirectory(prefix="trainmon-bench-owners-") as tmp:
        directory = Path(tmp)
        lines = [bench_pod_resources(directory, shared, args.refreshes) for shared in (False, True)]
        lines += [bench_hpc_jobs(directory, args.refreshes, with_mapping) for with_mapping in (True, False)]
    print(f"{GPUS} GPUs, {PODS} pods; per minute: {REFRESHES_PER_MINUTE} refreshes, {CYCLES_PER_MINUTE} cycles")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
