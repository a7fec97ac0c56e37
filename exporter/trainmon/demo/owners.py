"""Who holds the simulated GPUs, told both ways trainmon reads it (SPEC §4), so both owner panels show.

A real node has one scheduler; the demo's node has both so that a person sees each: a DCGM job-mapping
directory as a Slurm prolog writes it (`trainmon_gpu_job_info`), and a kubelet PodResources server on a
Unix socket answering `List` the way the kubelet does (`trainmon_gpu_allocation_info`). The server needs
the `kubernetes` extra (grpcio); without it the demo goes on without the allocation series.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

SLURM_JOB = "4242"
POD = ("training", "demo-llama-8b-0", "trainer")  # namespace, pod, container
GPU_RESOURCE = "nvidia.com/gpu"


def write_job_mapping(directory: Path, gpus: int) -> Path:
    """A file per GPU index holding the Slurm job id, as deploy/slurm/prolog.sh writes it."""
    directory.mkdir()
    for index in range(gpus):
        (directory / str(index)).write_text(f"{SLURM_JOB}\n")
    return directory


def kubelet_available() -> bool:
    return importlib.util.find_spec("grpc") is not None


class Kubelet:
    """A PodResources v1 server on `socket` that allocated every GPU in `uuids` to the demo's pod."""

    def __init__(self, socket: Path, uuids: Sequence[str]) -> None:
        import grpc

        from trainmon.kubelet import api_pb2, api_pb2_grpc

        namespace, pod, container = POD
        answer = api_pb2.ListPodResourcesResponse(pod_resources=[api_pb2.PodResources(
            name=pod, namespace=namespace, containers=[api_pb2.ContainerResources(name=container, devices=[
                api_pb2.ContainerDevices(resource_name=GPU_RESOURCE, device_ids=list(uuids))])])])

        class Lister(api_pb2_grpc.PodResourcesListerServicer):
            def List(self, request: Any, context: Any) -> Any:  # the gRPC method name
                return answer

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(Lister(), self._server)
        self._server.add_insecure_port(f"unix:{socket}")
        self._server.start()

    def stop(self) -> None:
        self._server.stop(grace=None)
