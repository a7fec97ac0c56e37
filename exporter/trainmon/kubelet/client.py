"""One kubelet PodResources v1 `List` call over its Unix socket, flattened to plain records."""

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


class KubeletError(Exception):
    """The `List` call failed: the kubelet is down, slow, or answered something that does not decode."""


def list_devices(socket: Path, timeout: float) -> tuple[ContainerDevices, ...]:
    """Every container's allocated devices. A fresh channel each call: kubelet recreates its socket on restart.

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
    return tuple(
        ContainerDevices(namespace=pod.namespace, pod=pod.name, container=container.name,
                         resource_name=devices.resource_name, device_ids=tuple(devices.device_ids))
        for pod in response.pod_resources
        for container in pod.containers
        for devices in container.devices
    )
