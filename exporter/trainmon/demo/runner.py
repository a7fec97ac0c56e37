"""`trainmon demo`: the real daemon on a simulated node, fed by a simulated job, in a per-user runtime
directory that is removed on every way out (normal stop, SIGTERM, SIGINT, an exception), and after a
SIGKILL by the next start (demo/runtime_dir.py).
"""

from __future__ import annotations

import logging
import signal
from dataclasses import replace
from types import FrameType
from typing import TYPE_CHECKING

from trainmon.demo.job import GRADIENT_BYTES, RANKS, default_uuids, start_simulated_job
from trainmon.demo.owners import Kubelet, kubelet_available, write_job_mapping
from trainmon.demo.processes import SimulatedProcesses
from trainmon.demo.runtime_dir import runtime_directory
from trainmon.demo.tree import DemoTree, Traffic
from trainmon.settings import Address, Settings
from trainmon.simulation.incidents import INCIDENTS, Plan
from trainmon.simulation.nccl import ALLREDUCE_CALLS, InspectorFiles, SimulatedRas
from trainmon.simulation.node import SimulatedNode

if TYPE_CHECKING:
    from trainmon.webconfig import WebConfig

log = logging.getLogger(__name__)


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def run_demo(settings: Settings, web: WebConfig | None, plan: Plan) -> int:
    from trainmon.daemon import serve

    log.warning("SIMULATED node: trainmon demo serves made-up GPUs, NVMe, InfiniBand, NCCL Inspector and RAS output "
                "and a made-up job")
    # Until uvicorn installs its own handlers, SIGTERM must still unwind through the `finally` below.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    processes = SimulatedProcesses(RANKS)  # forked before any thread starts
    try:
        with runtime_directory() as root:
            if plan.incident:
                log.warning("incident %s planted: it starts in %.0fs and ends in %s", plan.incident,
                            plan.after, INCIDENTS[plan.incident])
            tree = DemoTree(root, plan, write_every=settings.interval)
            inspector = InspectorFiles(root / "nccl-inspector", default_uuids(), RANKS,
                                       GRADIENT_BYTES // RANKS // ALLREDUCE_CALLS)
            ras = SimulatedRas(RANKS, plan)
            settings = replace(settings, procfs=tree.proc, sysfs=tree.sys, ingest_socket=str(root / "ingest.sock"),
                               ingest_udp=None,
                               hpc_job_mapping_dir=write_job_mapping(root / "job-mapping", RANKS),
                               nccl_inspector_dir=root / "nccl-inspector", nccl_ras_addr=Address("127.0.0.1", ras.port))

            def traffic(moved: Traffic) -> None:
                tree.advance(moved)
                inspector.advance(moved.allreduce_bytes, moved.allreduce_seconds)
                ras.advance(moved.allreduce_bytes)

            kubelet = None
            if kubelet_available():
                kubelet = Kubelet(root / "kubelet.sock", default_uuids())
                settings = replace(settings, kubelet_pod_resources_socket=root / "kubelet.sock")
            else:
                log.warning("no grpcio (the kubernetes extra): the demo serves no trainmon_gpu_allocation_info")
            owners = ("hpc_jobs", "pod_resources") if kubelet is not None else ("hpc_jobs",)
            added = (*owners, "nccl_inspector", "nccl_ras")
            settings = replace(settings, collectors=settings.collectors + tuple(c for c in added
                                                                                if c not in settings.collectors))
            job = start_simulated_job(settings, plan=plan, traffic=traffic)
            try:
                return serve(settings, web, SimulatedNode(pids=processes.pids, plan=plan))
            finally:
                job.stop()
                ras.stop()
                if kubelet is not None:
                    kubelet.stop()
    finally:
        processes.stop()
