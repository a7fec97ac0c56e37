"""A real gRPC server speaking kubelet PodResources v1 (the same api.proto) on a Unix socket."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from trainmon.kubelet import api_pb2, api_pb2_grpc

GPU = "nvidia.com/gpu"
DRA_DRIVER = "gpu.nvidia.com"


@dataclass(frozen=True)
class Claim:
    """A DRA claim as the kubelet lists it for a container: its devices, all from one driver's pool."""

    name: str
    devices: Sequence[str]
    driver: str = DRA_DRIVER
    pool: str = "node-1"

    def message(self, namespace: str) -> api_pb2.DynamicResource:
        return api_pb2.DynamicResource(claim_name=self.name, claim_namespace=namespace, claim_resources=[
            api_pb2.ClaimResource(driver_name=self.driver, pool_name=self.pool, device_name=device,
                                  cdi_devices=[api_pb2.CDIDevice(name=f"k8s.{self.driver}/claim={device}")])
            for device in self.devices])


@dataclass
class Pod:
    namespace: str
    name: str
    # container name -> {resource name: device ids}, the device plugins' allocations
    containers: Mapping[str, Mapping[str, Sequence[str]]]
    # container name -> DRA claims (a DRA-allocated container has no device-plugin devices)
    claims: Mapping[str, Sequence[Claim]] = field(default_factory=dict)

    def message(self) -> api_pb2.PodResources:
        names = dict.fromkeys([*self.containers, *self.claims])
        return api_pb2.PodResources(name=self.name, namespace=self.namespace, containers=[
            api_pb2.ContainerResources(
                name=container,
                devices=[api_pb2.ContainerDevices(resource_name=resource, device_ids=list(ids))
                         for resource, ids in self.containers.get(container, {}).items()],
                dynamic_resources=[claim.message(self.namespace) for claim in self.claims.get(container, ())])
            for container in names])


@dataclass
class FakeKubelet(api_pb2_grpc.PodResourcesListerServicer):
    """Answers `List` with `pods`; `delay` seconds late when set; counts the calls."""

    pods: list[Pod] = field(default_factory=list)
    delay: float = 0.0
    calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def List(self, request: api_pb2.ListPodResourcesRequest,  # the gRPC method name
             context: grpc.ServicerContext) -> api_pb2.ListPodResourcesResponse:
        with self._lock:
            self.calls += 1
            pods, delay = list(self.pods), self.delay
        if delay:
            time.sleep(delay)
        return api_pb2.ListPodResourcesResponse(pod_resources=[p.message() for p in pods])

    def set(self, pods: Sequence[Pod] | None = None, delay: float | None = None) -> None:
        with self._lock:
            if pods is not None:
                self.pods = list(pods)
            if delay is not None:
                self.delay = delay


@contextmanager
def kubelet_server(socket: Path, kubelet: FakeKubelet | None = None) -> Iterator[FakeKubelet]:
    """Serve `kubelet` on `socket` until the block ends."""
    kubelet = kubelet or FakeKubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(kubelet, server)
    server.add_insecure_port(f"unix:{socket}")
    server.start()
    try:
        yield kubelet
    finally:
        server.stop(grace=None)


@contextmanager
def garbage_server(socket: Path) -> Iterator[None]:
    """A server on the PodResources method path whose answer does not decode as a ListPodResourcesResponse."""
    handler = grpc.unary_unary_rpc_method_handler(
        lambda request, context: b"\xff\xff\xff\xff\xff", request_deserializer=lambda data: data,
        response_serializer=lambda data: data)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("v1.PodResourcesLister",
                                                                          {"List": handler})])
    server.add_insecure_port(f"unix:{socket}")
    server.start()
    try:
        yield
    finally:
        server.stop(grace=None)
