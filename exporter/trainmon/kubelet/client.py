"""One kubelet PodResources v1 `List` call over its Unix socket, flattened to plain records.

A container's devices come two ways in the same answer: `devices` from device plugins, and
`dynamic_resources` from DRA claims (Kubernetes 1.34+; a DRA-allocated container has no `devices`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from trainmon.kubelet.api_pb2 import ListPodResourcesRequest
from trainmon.kubelet.api_pb2_grpc import PodResourcesListerStub


@dataclass(frozen=True, slots=True)
class ContainerDevices:
    """Devices of one resource the kubelet allocated to one container."""

    namespace: str
    pod: str
    container: str
    resource_name: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ClaimDevice:
    """One device of one DRA claim the kubelet prepared for one container."""

    namespace: str
    pod: str
    container: str
    claim: str
    driver: str
    pool: str
    device: str


Allocated = ContainerDevices | ClaimDevice


class KubeletError(Exception):
    """The `List` call failed: the kubelet is down, slow, or answered something that does not decode."""


def list_devices(socket: Path, timeout: float) -> tuple[Allocated, ...]:
    """Every container's allocated devices, device plugins' then DRA claims'.

    A fresh channel each call: kubelet recreates its socket on restart.

    Raises:
        KubeletError: with the gRPC status (UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, …) and its details.
    """
    try:
        with grpc.insecure_channel(f"unix:{socket}") as channel:
            response = PodResourcesListerStub(channel).List(ListPodResourcesRequest(), timeout=timeout)
    except grpc.RpcError as exc:
        code = exc.code() if isinstance(exc, grpc.Call) else None
        details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
        raise KubeletError(f"{code.name if code else 'error'}: {details}") from None
    allocated: list[Allocated] = []
    for pod in response.pod_resources:
        for container in pod.containers:
            allocated.extend(
                ContainerDevices(namespace=pod.namespace, pod=pod.name, container=container.name,
                                 resource_name=devices.resource_name, device_ids=tuple(devices.device_ids))
                for devices in container.devices)
            allocated.extend(
                ClaimDevice(namespace=pod.namespace, pod=pod.name, container=container.name,
                            claim=claim.claim_name, driver=resource.driver_name, pool=resource.pool_name,
                            device=resource.device_name)
                for claim in container.dynamic_resources
                for resource in claim.claim_resources)
    return tuple(allocated)
