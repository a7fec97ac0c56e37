"""The pod_resources collector against a real gRPC PodResources server on a Unix socket."""

from __future__ import annotations

import importlib.metadata
import logging
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fake_nvml import scenario as scenarios
from tests.fake_nvml.fixtures import fake_nvml_dir  # noqa: F401  (fixture)
from tests.helpers.catalog import assert_declared
from tests.helpers.clock import Clock
from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.kubelet import GPU, Claim, FakeKubelet, Pod, garbage_server, kubelet_server
from tests.helpers.metrics import parse_samples, samples_of
from tests.helpers.net import wait_until
from trainmon.catalog.pod_resources import GPU_ALLOCATION_INFO
from trainmon.collectors.base import Collection, NodeResources
from trainmon.collectors.pod_resources import (
    MAX_ROWS_PER_GPU,
    DraGpu,
    PodResourcesCollector,
    match_allocations,
    parse_dra_device,
)
from trainmon.collectors.problems import MAX_LISTED, MAX_LOGGED
from trainmon.errors import CollectorError
from trainmon.gpu_inventory import GpuInventory, InventoryGpu
from trainmon.kubelet.client import ClaimDevice, ContainerDevices
from trainmon.settings import Settings

ALLOCATION = "trainmon_gpu_allocation_info"
REFRESH_SECONDS = 2.0  # the daemon's --kubelet-pod-resources-refresh; cycles and scrapes come 4x as often


def uuid(index: int) -> str:
    return scenarios.gpu(index)["uuid"]


def minor(index: int) -> int:
    """The NVML minor number of GPU `index` in these tests: not the index, so a match by index would show."""
    return 7 - index


def node_inventory(count: int = 8) -> GpuInventory:
    inventory = GpuInventory()
    inventory.publish(InventoryGpu(index=i, uuid=uuid(i), pids=(), minor_number=str(minor(i))) for i in range(count))
    return inventory


def allocation(index: int, namespace: str, pod: str, container: str, claim: str = "",
               gpu_uuid: str | None = None) -> tuple[str, frozenset[tuple[str, str]]]:
    """The allocation series of GPU `index`: from the device plugin, or from DRA `claim` when one is given."""
    return (ALLOCATION, frozenset({"gpu": str(index), "uuid": gpu_uuid or uuid(index), "namespace": namespace,
                                   "pod": pod, "container": container, "source": "dra" if claim else "device_plugin",
                                   "claim": claim}.items()))


@pytest.fixture
def socket_path() -> Iterator[Path]:
    """A short path: a Unix socket's name is limited to 107 bytes, pytest's tmp_path can be longer."""
    with tempfile.TemporaryDirectory(prefix="kubelet-") as directory:
        yield Path(directory) / "kubelet.sock"


def collector(socket: Path, inventory: GpuInventory, clock: Callable[[], float] = time.monotonic,
              refresh_s: float | None = None) -> PodResourcesCollector:
    settings = Settings(kubelet_pod_resources_socket=socket, interval=1.0)
    return PodResourcesCollector(settings, NodeResources(gpus=inventory), refresh_s=refresh_s, clock=clock)


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

    plugin = "device_plugin", ""
    assert (("0", uuid(0), "ml", "a", "main", *plugin), ("1", uuid(1), "ml", "a", "main", *plugin),
            ("3", uuid(3), "ml", "b", "main", *plugin), ("4", uuid(4), "ml", "c", "main", *plugin)) == got.rows
    assert ["'ml/d/main': nvidia.com/gpu device 'GPU-not-here' is no GPU of this node",
            "'ml/e\\x1b[2J/main': names that are not printable, GPU 5 not attributed"] == list(got.unknown)


@pytest.mark.parametrize(("name", "expected"), [
    ("gpu-0", DraGpu(minor_number="0", mig="")),
    ("gpu-12", DraGpu(minor_number="12", mig="")),
    ("gpu-3-mig-19-4-1", DraGpu(minor_number="3", mig="19-4-1")),  # GPU-instance profile id 19, start 4, size 1
    ("gpu-3-mig-1g.10gb-0-1", DraGpu(minor_number="3", mig="1g.10gb-0-1")),
    ("gpu-vfio-0", None),  # the driver's VFIO passthrough devices: no NVML minor number to map to
    ("gpu-3-mig-19-4", None),
    ("gpu-", None),
    ("GPU-0", None),
    ("gpu-0 ", None),
    ("nic-0", None),
    ("gpu-\u0663", None),  # ARABIC-INDIC DIGIT THREE: int() reads 3, a kubelet never names a device so
])
def test_dra_device_names_of_nvidias_driver(name: str, expected: DraGpu | None) -> None:
    assert expected == parse_dra_device(name)


def test_dra_devices_match_by_minor_number_and_unmappable_ones_are_listed_never_guessed() -> None:
    def claim(container: str, claim: str, device: str, driver: str = "gpu.nvidia.com") -> ClaimDevice:
        return ClaimDevice("ml", "trainer", container, claim, driver, "node-1", device)

    devices = [
        claim("main", "gpus", f"gpu-{minor(0)}"),
        claim("main", "gpus", f"gpu-{minor(1)}"),
        claim("side", "slice", f"gpu-{minor(2)}-mig-19-0-1"),
        claim("side", "slice", f"gpu-{minor(2)}-mig-19-1-1"),  # a second slice of the same GPU: one row
        claim("main", "nic", "eth1", driver="dra.net"),  # another driver: never guessed
        claim("main", "gpus", "gpu-vfio-0"),  # a scheme trainmon cannot map
        claim("main", "gpus", "gpu-42"),  # no GPU here has minor 42
    ]

    got = match_allocations(devices, node_inventory().latest() or ())

    assert (("0", uuid(0), "ml", "trainer", "main", "dra", "gpus"),
            ("1", uuid(1), "ml", "trainer", "main", "dra", "gpus"),
            ("2", uuid(2), "ml", "trainer", "side", "dra", "slice")) == got.rows
    assert f"gpu 2 {uuid(2)} MIG 19-0-1: ml/trainer container side (dra claim slice)" == got.found[2]
    assert ["'ml/trainer/main': DRA claim 'nic' device 'node-1'/'eth1' of driver 'dra.net': "
            "not a device name trainmon can map",
            "'ml/trainer/main': DRA claim 'gpus' device 'node-1'/'gpu-vfio-0' of driver 'gpu.nvidia.com': "
            "not a device name trainmon can map",
            "'ml/trainer/main': DRA claim 'gpus' device 'node-1'/'gpu-42': no GPU of this node has minor number 42",
            ] == list(got.unknown)


def test_dra_mig_and_device_plugin_on_one_node_from_the_kubelet(socket_path: Path) -> None:
    """One `List` answer with every form: device plugin, DRA whole GPUs, DRA MIG, and a pod with both."""
    kubelet = FakeKubelet([
        Pod("team-a", "plugin-pod", {"main": {GPU: [uuid(0)]}}),
        Pod("team-b", "dra-pod", {}, claims={"main": [Claim("two-gpus", [f"gpu-{minor(1)}", f"gpu-{minor(2)}"])]}),
        Pod("team-c", "mig-pod", {}, claims={"lab": [Claim("slice", [f"gpu-{minor(3)}-mig-14-0-2"])]}),
        Pod("team-d", "mixed", {"main": {GPU: [uuid(4)]}},
            claims={"main": [Claim("extra", [f"gpu-{minor(5)}"])],
                    "side": [Claim("nic", ["eth0"], driver="dra.net", pool="nics")]}),
    ])
    with kubelet_server(socket_path, kubelet):
        pods = collector(socket_path, node_inventory(), refresh_s=5)
        try:
            got = pods.collect()
        finally:
            pods.close()
    assert {allocation(0, "team-a", "plugin-pod", "main"),
            allocation(1, "team-b", "dra-pod", "main", claim="two-gpus"),
            allocation(2, "team-b", "dra-pod", "main", claim="two-gpus"),
            allocation(3, "team-c", "mig-pod", "lab", claim="slice"),
            allocation(4, "team-d", "mixed", "main"),
            allocation(5, "team-d", "mixed", "main", claim="extra")} == set(samples_of(got.families))
    assert any("MIG 14-0-2" in line for line in got.found)
    assert {GPU_ALLOCATION_INFO.name} == assert_declared(got.families, "pod_resources")
    assert ["'team-d/mixed/side': DRA claim 'nic' device 'nics'/'eth0' of driver 'dra.net': "
            "not a device name trainmon can map"] == list(got.skipped)


def test_allocations_served_changed_and_removed(socket_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    kubelet = FakeKubelet([Pod("team-a", "trainer-0", {"main": {GPU: [uuid(0), uuid(1)]}}),
                           Pod("team-b", "notebook", {"lab": {GPU: [uuid(5), "GPU-gone"]}})])
    with kubelet_server(socket_path, kubelet):
        pods = collector(socket_path, node_inventory(), refresh_s=0.2)
        try:
            first = pods.collect()
            assert {allocation(0, "team-a", "trainer-0", "main"), allocation(1, "team-a", "trainer-0", "main"),
                    allocation(5, "team-b", "notebook", "lab")} == set(samples_of(first.families))
            assert 1 == len(first.skipped)
            assert "GPU-gone" in first.skipped[0]

            kubelet.set([Pod("team-a", "trainer-0", {"main": {GPU: [uuid(2)]}})])
            wait_until(lambda: {allocation(2, "team-a", "trainer-0", "main")} == set(
                samples_of(pods.collect().families)), timeout=10)
            kubelet.set([])
            wait_until(lambda: not samples_of(pods.collect().families), timeout=10)
        finally:
            pods.close()
    assert 1 == sum("GPU-gone" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_a_crowded_kubelet_answer_is_served_bounded_and_counted(socket_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """20,000 pods sharing 8 GPUs, 300,000 device ids of no GPU here and a 10 KB pod name: at most
    MAX_ROWS_PER_GPU series a GPU, a bounded list of notes and of log lines, and every one counted."""
    shared = [Pod("ml", f"replica-{n}", {"main": {GPU: [str(n % 8)]}}) for n in range(20_000)]
    unknown = Pod("ml", "many", {"main": {GPU: [f"x{n:x}" for n in range(300_000)]}})  # under gRPC's 4 MiB
    long_name = Pod("ml", "p" * 10_000, {"main": {GPU: [uuid(0)]}})
    with kubelet_server(socket_path, FakeKubelet([long_name, *shared, unknown])):
        pods = collector(socket_path, node_inventory())
        try:
            caplog.set_level(logging.WARNING)
            got: Collection = wait_until(pods.collect, timeout=60)  # type: ignore[assignment]  # seconds to decode
        finally:
            pods.close()

    served = samples_of(got.families)
    assert 8 * MAX_ROWS_PER_GPU == len(served)
    assert {str(g) for g in range(8)} == {dict(labels)["gpu"] for _, labels in served}
    assert (300_001, 20_000 - 8 * MAX_ROWS_PER_GPU) == (got.details["devices_not_attributed"],
                                                          got.details["allocations_not_served"])
    assert len(got.skipped) <= MAX_LISTED
    assert max(map(len, got.skipped)) < 400
    assert any("pod name of 10000 characters (Kubernetes allows 253)" in note for note in got.skipped)
    assert "gpu 0: 2436 more container allocations not served (at most 64 a GPU)" in got.skipped
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) <= MAX_LOGGED + 1
    assert max(map(len, warnings)) < 400


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
            assert listing.error is not None
            assert "DEADLINE_EXCEEDED" in listing.error
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
    code = ("import sys; from trainmon.collectors.base import Collection, NodeResources; "
            "from trainmon.daemon import build_collectors; from trainmon.settings import Settings; "
            "build_collectors(Settings(), NodeResources()); print('grpc' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "False" == result.stdout.strip().splitlines()[-1]


KUBELET_STUBS = Path(__file__).resolve().parents[2] / "exporter" / "trainmon" / "kubelet"


def test_test_extra_pins_the_grpcio_tools_that_generated_the_committed_stubs() -> None:
    """generate.sh writes grpcio-tools' own version into the stubs: with `>=` a new release on the index
    made the byte comparison below fail on every fresh install while cached venvs kept passing."""
    pins = re.findall(r'"(grpcio-tools[^"]*)"', (KUBELET_STUBS.parents[2] / "pyproject.toml").read_text())
    generated = re.search(r"^GRPC_GENERATED_VERSION = '([0-9.]+)'$", (KUBELET_STUBS / "api_pb2_grpc.py").read_text(),
                          re.MULTILINE)
    assert generated is not None
    assert pins == [f"grpcio-tools=={generated.group(1)}"]
    assert importlib.metadata.version("grpcio-tools") == generated.group(1)


def test_committed_stubs_are_what_generate_sh_makes(tmp_path: Path) -> None:
    kubelet = KUBELET_STUBS
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
    """A real daemon on the fake NVML's 8 GPUs: pods listed, then moved and removed (one 2 s refresh)."""
    scenario = scenarios.write(tmp_path / "scenario.json", scenarios.node(8))
    kubelet = FakeKubelet([Pod("team-a", "trainer-0", {"main": {GPU: [uuid(0), uuid(1)]}}),
                           Pod("team-b", "trainer-1", {"main": {GPU: [uuid(2)]}})])
    with kubelet_server(socket_path, kubelet):
        daemon = start_daemon(tmp_path, ["--collectors", "gpu", "--interval", "0.5", "--sysfs", str(tmp_path),
                                         "--kubelet-pod-resources-socket", str(socket_path),
                                         "--kubelet-pod-resources-refresh", str(REFRESH_SECONDS)],
                              env={"FAKE_NVML_SCENARIO": str(scenario), "LD_LIBRARY_PATH": str(fake_nvml_dir)})
        daemons.append(daemon)

        def allocations() -> set[tuple[str, frozenset[tuple[str, str]]]]:
            return {k for k in parse_samples(daemon.metrics_text()) if k[0] == ALLOCATION}

        wait_until(lambda: {allocation(0, "team-a", "trainer-0", "main"), allocation(1, "team-a", "trainer-0", "main"),
                            allocation(2, "team-b", "trainer-1", "main")} == allocations(), timeout=20)
        calls, since = kubelet.calls, time.monotonic()
        kubelet.set([Pod("team-a", "trainer-0", {"main": {GPU: [uuid(6)]}})])
        wait_until(lambda: {allocation(6, "team-a", "trainer-0", "main")} == allocations(), timeout=60, interval=0.5)
        refreshes = (time.monotonic() - since) / REFRESH_SECONDS
        assert kubelet.calls - calls <= refreshes + 2, "scrapes and cycles must not call the kubelet"
        status = daemon.get("/api/v1/status").json()
        assert "ok" == next(c for c in status["collectors"] if c["name"] == "pod_resources")["state"]


@pytest.mark.slow
def test_daemon_maps_dra_devices_by_the_minor_numbers_nvml_reports(
        tmp_path: Path, socket_path: Path, fake_nvml_dir: Path, daemons: list[Daemon]) -> None:  # noqa: F811
    """A real daemon on the fake NVML (minor number = index): DRA whole GPU and MIG slice, next to the device
    plugin; another driver's device is in /api/v1/status, not served."""
    scenario = scenarios.write(tmp_path / "scenario.json", scenarios.node(8))
    kubelet = FakeKubelet([
        Pod("team-a", "trainer-0", {}, claims={"main": [Claim("gpus", ["gpu-3", "gpu-5-mig-19-2-1"])],
                                              "side": [Claim("nic", ["eth0"], driver="dra.net")]}),
        Pod("team-b", "trainer-1", {"main": {GPU: [uuid(6)]}}),
    ])
    with kubelet_server(socket_path, kubelet):
        daemon = start_daemon(tmp_path, ["--collectors", "gpu", "--interval", "0.5", "--sysfs", str(tmp_path),
                                         "--kubelet-pod-resources-socket", str(socket_path)],
                              env={"FAKE_NVML_SCENARIO": str(scenario), "LD_LIBRARY_PATH": str(fake_nvml_dir)})
        daemons.append(daemon)
        wait_until(lambda: {allocation(3, "team-a", "trainer-0", "main", claim="gpus"),
                            allocation(5, "team-a", "trainer-0", "main", claim="gpus"),
                            allocation(6, "team-b", "trainer-1", "main")} == {
            k for k in parse_samples(daemon.metrics_text()) if k[0] == ALLOCATION}, timeout=20)
        status = daemon.get("/api/v1/status").json()
    pods = next(c for c in status["collectors"] if c["name"] == "pod_resources")
    assert ["'team-a/trainer-0/side': DRA claim 'nic' device 'node-1'/'eth0' of driver 'dra.net': "
            "not a device name trainmon can map"] == pods["skipped"]
