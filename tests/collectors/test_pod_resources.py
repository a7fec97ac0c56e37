"""The pod_resources collector against a real gRPC PodResources server on a Unix socket."""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fake_nvml import scenario as scenarios
from tests.fake_nvml.fixtures import fake_nvml_dir  # noqa: F401  (fixture)
from tests.helpers.clock import Clock
from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.kubelet import GPU, FakeKubelet, Pod, garbage_server, kubelet_server
from tests.helpers.metrics import parse_samples, samples_of
from tests.helpers.net import wait_until
from trainmon.collectors.base import NodeResources
from trainmon.collectors.pod_resources import PodResourcesCollector, match_allocations
from trainmon.errors import CollectorError
from trainmon.gpu_inventory import GpuInventory, InventoryGpu
from trainmon.kubelet.client import ContainerDevices
from trainmon.settings import Settings

ALLOCATION = "trainmon_gpu_allocation_info"


def uuid(index: int) -> str:
    return scenarios.gpu(index)["uuid"]


def node_inventory(count: int = 8) -> GpuInventory:
    inventory = GpuInventory()
    inventory.publish(InventoryGpu(index=i, uuid=uuid(i), pids=()) for i in range(count))
    return inventory


def allocation(index: int, namespace: str, pod: str, container: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return (ALLOCATION, frozenset({"gpu": str(index), "uuid": uuid(index), "namespace": namespace, "pod": pod,
                                   "container": container}.items()))


@pytest.fixture
def socket_path() -> Iterator[Path]:
    """A short path: a Unix socket's name is limited to 107 bytes, pytest's tmp_path can be longer."""
    with tempfile.TemporaryDirectory(prefix="kubelet-") as directory:
        yield Path(directory) / "kubelet.sock"


def collector(socket: Path, inventory: GpuInventory, clock: Callable[[], float] | None = None,
              **kwargs: float) -> PodResourcesCollector:
    settings = Settings(kubelet_pod_resources_socket=socket, interval=1.0)
    if clock is None:
        return PodResourcesCollector(settings, NodeResources(gpus=inventory), **kwargs)
    return PodResourcesCollector(settings, NodeResources(gpus=inventory), clock=clock, **kwargs)


def test_devices_match_by_uuid_by_index_and_time_slicing_replica() -> None:
    devices = [
        ContainerDevices("ml", "a", "main", GPU, (uuid(0), uuid(1))),
        ContainerDevices("ml", "b", "main", GPU, ("3",)),  # a device plugin that reports indices
        ContainerDevices("ml", "c", "main", GPU, (f"{uuid(4)}::2",)),  # time-slicing replica 2 of GPU 4
        ContainerDevices("ml", "c", "side", "rdma/hca", ("mlx5_0",)),  # not a GPU: ignored, not unknown
        ContainerDevices("ml", "d", "main", "nvidia.com/gpu", ("GPU-not-here",)),
        ContainerDevices("ml", "e\x1b[2J", "main", GPU, (uuid(5),)),  # garbage names: dropped, not served
    ]

    got = match_allocations(devices, node_inventory().latest() or ())

    assert (("0", uuid(0), "ml", "a", "main"), ("1", uuid(1), "ml", "a", "main"), ("3", uuid(3), "ml", "b", "main"),
            ("4", uuid(4), "ml", "c", "main")) == got.rows
    assert ["'ml/d/main': nvidia.com/gpu device 'GPU-not-here' is no GPU of this node",
            "'ml/e\\x1b[2J/main': names that are not printable, GPU 5 not attributed"] == list(got.unknown)


def test_allocations_served_changed_and_removed(socket_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    kubelet = FakeKubelet([Pod("team-a", "trainer-0", {"main": {GPU: [uuid(0), uuid(1)]}}),
                           Pod("team-b", "notebook", {"lab": {GPU: [uuid(5), "GPU-gone"]}})])
    with kubelet_server(socket_path, kubelet):
        pods = collector(socket_path, node_inventory(), refresh_s=0.2)
        try:
            first = pods.collect()
            assert {allocation(0, "team-a", "trainer-0", "main"), allocation(1, "team-a", "trainer-0", "main"),
                    allocation(5, "team-b", "notebook", "lab")} == set(samples_of(first.families))
            assert 1 == len(first.skipped) and "GPU-gone" in first.skipped[0]

            kubelet.set([Pod("team-a", "trainer-0", {"main": {GPU: [uuid(2)]}})])
            wait_until(lambda: {allocation(2, "team-a", "trainer-0", "main")} == set(
                samples_of(pods.collect().families)), timeout=10)
            kubelet.set([])
            wait_until(lambda: not samples_of(pods.collect().families), timeout=10)
        finally:
            pods.close()
    assert 1 == sum("GPU-gone" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_a_step_of_the_wall_clock_does_not_age_the_kubelet_answer(socket_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31: a +2 h step of the wall clock failed the collector for up to 30 s ("the last kubelet
    answer is 7230s old")."""
    kubelet = FakeKubelet([Pod("team-a", "trainer-0", {"main": {GPU: [uuid(0)]}})])
    with kubelet_server(socket_path, kubelet):
        pods = collector(socket_path, node_inventory(), refresh_s=30)  # no refresh within the test
        try:
            pods.collect()
            stepped = time.time() + 7200
            monkeypatch.setattr(time, "time", lambda: stepped)

            served = samples_of(pods.collect().families)
        finally:
            pods.close()

    assert {allocation(0, "team-a", "trainer-0", "main")} == set(served)


def test_an_answer_older_than_three_refreshes_fails_the_collector(socket_path: Path) -> None:
    clock = Clock(1000.0)
    kubelet = FakeKubelet([Pod("team-a", "trainer-0", {"main": {GPU: [uuid(0)]}})])
    with kubelet_server(socket_path, kubelet):
        pods = collector(socket_path, node_inventory(), refresh_s=3600, clock=clock)
        try:
            pods.collect()
            clock.now += 3 * 3600 + 1

            with pytest.raises(CollectorError, match="10801s old: the refresher is stuck"):
                pods.collect()
        finally:
            pods.close()


def test_kubelet_down_fails_the_collector_and_recovery_serves_again(socket_path: Path) -> None:
    pods = collector(socket_path, node_inventory(), refresh_s=0.2)
    try:
        with pytest.raises(CollectorError, match="UNAVAILABLE"):
            pods.collect()
        with kubelet_server(socket_path, FakeKubelet([Pod("ns", "p", {"c": {GPU: [uuid(7)]}})])):
            wait_until(lambda: {allocation(7, "ns", "p", "c")} == set(samples_of(pods.collect().families)), timeout=10)
    finally:
        pods.close()


def test_slow_kubelet_times_out_within_the_refresh_period(socket_path: Path) -> None:
    kubelet = FakeKubelet([Pod("ns", "p", {"c": {GPU: [uuid(0)]}})], delay=2.0)
    with kubelet_server(socket_path, kubelet):
        pods = collector(socket_path, node_inventory(), refresh_s=0.5)
        try:
            listing = pods.refresh()
            assert listing.error is not None and "DEADLINE_EXCEEDED" in listing.error
            with pytest.raises(CollectorError, match="DEADLINE_EXCEEDED"):
                pods.collect()
        finally:
            kubelet.set(delay=0.0)
            pods.close()


def test_garbage_answer_fails_with_a_clear_error(socket_path: Path) -> None:
    with garbage_server(socket_path):
        pods = collector(socket_path, node_inventory(), refresh_s=5)
        try:
            with pytest.raises(CollectorError, match=r"List at .* failed: INTERNAL: Exception deserializing"):
                pods.collect()
        finally:
            pods.close()


def test_the_base_daemon_never_imports_grpc() -> None:
    """Without the flag, building every default collector loads no gRPC (the extra may be absent)."""
    code = ("import sys; from trainmon.collectors.base import NodeResources; "
            "from trainmon.daemon import build_collectors; from trainmon.settings import Settings; "
            "build_collectors(Settings(), NodeResources()); print('grpc' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "False" == result.stdout.strip().splitlines()[-1]


def test_committed_stubs_are_what_generate_sh_makes(tmp_path: Path) -> None:
    kubelet = Path(__file__).resolve().parents[2] / "exporter" / "trainmon" / "kubelet"
    copy = tmp_path / "exporter" / "trainmon" / "kubelet"
    copy.mkdir(parents=True)
    for name in ("api.proto", "generate.sh"):
        (copy / name).write_bytes((kubelet / name).read_bytes())
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}
    subprocess.run(["sh", str(copy / "generate.sh")], check=True, timeout=120, env=env)
    for name in ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py"):
        assert (kubelet / name).read_text() == (copy / name).read_text(), name


@pytest.mark.slow
def test_daemon_serves_allocations_of_fake_nvml_gpus_while_pods_change(
        tmp_path: Path, socket_path: Path, fake_nvml_dir: Path, daemons: list[Daemon]) -> None:  # noqa: F811
    """A real daemon on the fake NVML's 8 GPUs: pods listed, then moved and removed (one 30 s refresh)."""
    scenario = scenarios.write(tmp_path / "scenario.json", scenarios.node(8))
    kubelet = FakeKubelet([Pod("team-a", "trainer-0", {"main": {GPU: [uuid(0), uuid(1)]}}),
                           Pod("team-b", "trainer-1", {"main": {GPU: [uuid(2)]}})])
    with kubelet_server(socket_path, kubelet):
        daemon = start_daemon(tmp_path, ["--collectors", "gpu", "--interval", "0.5", "--sysfs", str(tmp_path),
                                         "--kubelet-pod-resources-socket", str(socket_path)],
                              env={"FAKE_NVML_SCENARIO": str(scenario), "LD_LIBRARY_PATH": str(fake_nvml_dir)})
        daemons.append(daemon)

        def allocations() -> set[tuple[str, frozenset[tuple[str, str]]]]:
            return {k for k in parse_samples(daemon.metrics_text()) if k[0] == ALLOCATION}

        wait_until(lambda: {allocation(0, "team-a", "trainer-0", "main"), allocation(1, "team-a", "trainer-0", "main"),
                            allocation(2, "team-b", "trainer-1", "main")} == allocations(), timeout=20)
        calls = kubelet.calls
        kubelet.set([Pod("team-a", "trainer-0", {"main": {GPU: [uuid(6)]}})])
        wait_until(lambda: {allocation(6, "team-a", "trainer-0", "main")} == allocations(), timeout=45, interval=0.5)
        assert kubelet.calls - calls <= 2, "scrapes and cycles must not call the kubelet"
        status = daemon.get("/api/v1/status").json()
        assert "ok" == next(c for c in status["collectors"] if c["name"] == "pod_resources")["state"]
