"""NCCL's own view joined to the hook's ranks end to end: a real daemon, the fake NVML's UUIDs, a real wire
report on the ingest socket, Inspector's files, a loopback RAS stand-in, and the NIC of the rank's GPU from a
synthetic PCIe tree and the job's NCCL_IB_HCA."""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path

from tests.fake_nvml import scenario as scenarios
from tests.fake_nvml.fixtures import fake_nvml_dir  # noqa: F401  (fixture)
from tests.helpers.daemon import start_daemon
from tests.helpers.metrics import parse_samples
from tests.helpers.net import wait_until
from tests.helpers.ras import RasStandIn
from tests.helpers.trees import IbDevice, IbPort, write_infiniband, write_pci_device
from trainmon import wire

NCCL = Path(__file__).parents[1] / "fixtures" / "nccl"
PROM_NAME = "nccl_inspector_metrics_00000000-0000-0000-0000-000000000001.prom"


def send_report(path: Path) -> None:
    """What the hook of global rank 9 on the fake NVML's GPU 1 sends: its job keeps NCCL off mlx5_0."""
    report = wire.Report(job_id="llama", rank=9, start_time=1_767_000_000.0, seq=1, world_size=16,
                         uuid=scenarios.gpu(1)["uuid"], pid=os.getpid(), nccl_env={"NCCL_IB_HCA": "^=mlx5_0"})
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(wire.encode(report), str(path))


def write_pcie_tree(sys: Path) -> None:
    """The fake NVML's GPU 1 (bus 0x28) on one PCIe switch with mlx5_0; mlx5_1 on another root complex of its
    socket."""
    switch = "pci0000:25/0000:25:01.0/0000:26:00.0"
    write_pci_device(sys, f"{switch}/0000:27:00.0/0000:28:00.0", "bus/pci/devices/0000:28:00.0")
    write_pci_device(sys, f"{switch}/0000:27:01.0/0000:29:00.0", "class/infiniband/mlx5_0/device")
    write_pci_device(sys, "pci0000:45/0000:45:01.0/0000:46:00.0", "class/infiniband/mlx5_1/device")
    write_infiniband(sys, [IbDevice(name, ports=[IbPort(name)]) for name in ("mlx5_0", "mlx5_1")])


def write_inspector_output(prom: Path, dumps: Path) -> None:
    shutil.copy(NCCL / "inspector" / "prom" / PROM_NAME, prom / PROM_NAME)
    past = time.time() - 5  # a window Inspector finished writing
    os.utime(prom / PROM_NAME, (past, past))
    records = (NCCL / "inspector" / "json" / "gpu-node-07-pid4001.log").read_text()
    (dumps / f"{socket.gethostname()}-pid{os.getpid()}.log").write_text(
        records.replace('"pid":4001', f'"pid":{os.getpid()}'))


def test_inspector_and_ras_join_to_the_hooks_job_rank_and_gpu(tmp_path: Path, fake_nvml_dir: Path) -> None:  # noqa: F811
    prom, dumps = tmp_path / "prom", tmp_path / "json"
    prom.mkdir()
    dumps.mkdir()
    answer = (NCCL / "ras" / "status_unresponsive_16.json").read_bytes()
    ras = RasStandIn(answer.replace(b'"pid": 4001,', f'"pid": {os.getpid()},'.encode()), chunk=1000)
    scenario = scenarios.write(tmp_path / "scenario.json", scenarios.node(2))
    write_pcie_tree(tmp_path / "sys")
    daemon = start_daemon(tmp_path, [
        "--collectors", "gpu,infiniband,training,nccl_inspector,nccl_ras", "--interval", "0.2",
        "--sysfs", str(tmp_path / "sys"),
        "--nccl-inspector-dir", str(prom), "--nccl-inspector-json-dir", str(dumps),
        "--nccl-ras-addr", f"127.0.0.1:{ras.port}",
    ], env={"FAKE_NVML_SCENARIO": str(scenario), "LD_LIBRARY_PATH": str(fake_nvml_dir)})
    try:
        send_report(tmp_path / "ingest.sock")
        wait_until(lambda: 'rank="9"' in daemon.metrics_text())  # the GPU's owner is known: the window joins to it
        write_inspector_output(prom, dumps)
        rank = (("job_id", "llama"), ("rank", "9"))
        dp = (("collective", "all_reduce"), ("comm_name", "DP Group 0"), *rank, ("size_class", ">=256MiB"))

        def joined() -> dict[object, float] | None:
            samples = parse_samples(daemon.metrics_text())
            done = ("trainmon_nccl_ras_up", frozenset({("job_id", "llama")})) in samples and (
                ("trainmon_nccl_inspector_operations_total", frozenset(dp)) in samples) and any(
                name == "trainmon_gpu_nic_affinity_info" and ("nccl_ib_hca", "^=mlx5_0") in labels
                for name, labels in samples)
            return samples if done else None  # type: ignore[return-value]

        samples = wait_until(joined, timeout=30)
    finally:
        daemon.stop()
        ras.close()
    assert isinstance(samples, dict)
    assert 4 == samples[("trainmon_nccl_inspector_operations_total", frozenset(dp))]
    assert 5 == samples[("trainmon_nccl_inspector_bus_bandwidth_bytes_per_second_count", frozenset(dp))]
    [info] = [labels for name, labels in samples if name == "trainmon_nccl_inspector_info"]
    assert {*rank, ("uuid", scenarios.gpu(1)["uuid"])} <= info
    gpu_info = [k for k in samples if k[0] == "trainmon_gpu_info" and ("gpu", "1") in k[1]]
    assert gpu_info and ("uuid", scenarios.gpu(1)["uuid"]) in gpu_info[0][1]  # the join on uuid reaches the GPU
    assert 1 == samples[("trainmon_nccl_ras_missing_ranks", frozenset({("job_id", "llama"), ("kind", "unresponsive")}))]
    assert 2 == samples[("trainmon_nccl_ras_communicators_mismatched", frozenset({("job_id", "llama")}))]
    # the GPU's closest HCA (mlx5_0, its own switch) is excluded by the job: NCCL sends through the CPU to mlx5_1
    [nic] = [dict(labels) for name, labels in samples if name == "trainmon_gpu_nic_affinity_info"]
    assert {"gpu": "1", "uuid": scenarios.gpu(1)["uuid"], "device": "mlx5_1", "port": "1", "path": "PHB",
            "nccl_ib_hca": "^=mlx5_0"}.items() <= nic.items()
