"""A real `trainmon serve` process on loopback, spoken to over real HTTP."""

from __future__ import annotations

import gzip
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from tests.fake_nvml import scenario as scenarios
from tests.fake_nvml.fixtures import fake_nvml_dir  # noqa: F401  (fixture)
from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.metrics import parse_samples
from tests.helpers.net import wait_until
from tests.helpers.trees import (
    Disk,
    IbDevice,
    IbPort,
    NvmeController,
    write,
    write_diskstats,
    write_infiniband,
    write_nvme,
)
from trainmon import wire

OPENMETRICS = "application/openmetrics-text;version=1.0.0"


def node_tree(root: Path, seed: int = 1) -> tuple[Path, Path]:
    proc, sys = root / "proc", root / "sys"
    write_diskstats(proc, [Disk(f"nvme{i}n1", seed=seed, minor=i) for i in range(4)])
    write_nvme(sys, [NvmeController(f"nvme{i}", entries=[f"nvme{i}n1"]) for i in range(4)])
    write_infiniband(sys, [IbDevice(f"mlx5_{i}", ports=[IbPort(f"mlx5_{i}")]) for i in range(2)])
    return proc, sys


def tree_args(proc: Path, sys: Path, *extra: str) -> list[str]:
    return ["--procfs", str(proc), "--sysfs", str(sys), "--collectors", "nvme,infiniband", *extra]


def test_metrics_in_both_formats_and_gzip(tmp_path: Path, daemons) -> None:  # type: ignore[no-untyped-def]
    daemons.append(daemon := start_daemon(tmp_path, tree_args(*node_tree(tmp_path))))

    text = daemon.get("/metrics", headers={"Accept": "text/plain"})
    openmetrics = daemon.get("/metrics", headers={"Accept": OPENMETRICS})
    zipped = httpx.get(daemon.url + "/metrics", headers={"Accept": "text/plain", "Accept-Encoding": "gzip"})
    raw = httpx.Client().send(httpx.Request("GET", daemon.url + "/metrics",
                                            headers={"Accept-Encoding": "gzip", "Accept": "text/plain"}), stream=True)
    compressed = b"".join(raw.iter_raw())

    assert text.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
    samples = parse_samples(text.text)
    read_bytes = [v for (n, _), v in samples.items() if n == "trainmon_nvme_read_bytes_total"]
    assert 4 * [512 * Disk("x").values()[2]] == read_bytes
    families = {f.name for f in parse_openmetrics(openmetrics.text)}
    assert {"trainmon_nvme_read_bytes", "trainmon_infiniband_port_data_received_bytes", "trainmon_collector_success",
            "trainmon_build"} <= families
    assert "gzip" == raw.headers["content-encoding"]
    assert gzip.decompress(compressed).decode() == zipped.text
    assert "/metrics" == str(daemon.get("/metrics").url.path)  # no 307 to /metrics/


def test_accept_variants_get_one_of_two_content_types_never_the_clients_version(  # type: ignore[no-untyped-def]
        tmp_path: Path, daemons) -> None:
    daemons.append(daemon := start_daemon(tmp_path, tree_args(*node_tree(tmp_path))))
    variants = [f"application/openmetrics-text;version=1.{k}.{n}" for k in range(4) for n in range(4)]

    with httpx.Client(base_url=daemon.url) as client:
        answers = [client.get("/metrics", headers={"Accept": accept}) for accept in [*variants, "text/plain"]]

    assert {200} == {a.status_code for a in answers}
    assert {"application/openmetrics-text; version=1.0.0; charset=utf-8",
            "text/plain; version=0.0.4; charset=utf-8"} == {a.headers["content-type"] for a in answers}


def test_status_and_landing_page(tmp_path: Path, daemons) -> None:  # type: ignore[no-untyped-def]
    proc, sys = node_tree(tmp_path)
    breakable = sys / "class" / "infiniband" / "mlx5_1" / "ports" / "1" / "counters" / "symbol_error"
    breakable.unlink()
    breakable.mkdir()
    daemons.append(daemon := start_daemon(tmp_path, tree_args(proc, sys)))

    status = daemon.get("/api/v1/status").json()
    landing = daemon.get("/")

    by_name = {c["name"]: c for c in status["collectors"]}
    assert {"nvme", "infiniband"} == set(by_name)
    assert by_name["nvme"]["ok"] and by_name["nvme"]["last_success"] > 0
    assert ["mlx5_1/ports/1/counters/symbol_error: EISDIR"] == by_name["infiniband"]["skipped"]
    assert status["simulated"] is False
    assert "trainmon" in landing.text and 'href="/metrics"' in landing.text and "SIMULATED" not in landing.text
    assert 'href="/api/v1/xid-catalog"' in landing.text


def test_the_xid_catalog_is_served_as_json_not_in_every_scrape(  # type: ignore[no-untyped-def]
        tmp_path: Path, fake_nvml_dir: Path, daemons) -> None:  # noqa: F811
    """172 codes at /api/v1/xid-catalog with NVIDIA's words and trainmon's action; /metrics of a GPU node
    carries no catalogue series (the trainmon rules record them once for the fleet)."""
    scenario = scenarios.write(tmp_path / "scenario.json", scenarios.node(2))
    daemons.append(daemon := start_daemon(tmp_path, ["--collectors", "gpu", "--sysfs", str(tmp_path)],
                                          env={"LD_LIBRARY_PATH": str(fake_nvml_dir),
                                               "FAKE_NVML_SCENARIO": str(scenario)}))

    codes = {c["xid"]: c for c in daemon.get("/api/v1/xid-catalog").json()["codes"]}
    metrics = daemon.metrics_text()

    assert 172 == len(codes)
    assert {"xid": 79, "mnemonic": "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "action": "reboot",
            "immediate_resolution": "RESTART_BM"}.items() <= codes[79].items()
    assert "trainmon_gpu_up{" in metrics and "xid_catalog" not in metrics


def test_readyz_waits_for_the_first_collection_and_a_hung_collector_fails_alone(
        tmp_path: Path, fake_nvml_dir: Path, daemons: list[Daemon]) -> None:  # noqa: F811
    """A GPU driver call that never returns (the fake NVML's `hang_ms`), like a wedged driver."""
    proc, sys = node_tree(tmp_path)
    scenario = scenarios.write(tmp_path / "scenario.json", scenarios.changed(scenarios.node(1), 0, hang_ms=120_000))
    env = {"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_SCENARIO": str(scenario)}
    args = tree_args(proc, sys, "--interval", "5", "--collectors", "gpu,nvme,infiniband")  # the later flag wins
    daemons.append(daemon := start_daemon(tmp_path, args, env=env, wait_ready=False))

    first = daemon.get("/readyz").status_code
    wait_until(lambda: daemon.get("/readyz").status_code == 200, timeout=20)
    samples = parse_samples(daemon.metrics_text())

    assert 503 == first
    assert 0 == samples[("trainmon_collector_success", frozenset({("collector", "gpu")}))]
    assert 1 == samples[("trainmon_collector_success", frozenset({("collector", "nvme")}))]
    assert 1 == samples[("trainmon_collector_success", frozenset({("collector", "infiniband")}))]
    assert any(name == "trainmon_infiniband_port_data_received_bytes_total" for name, _ in samples)
    started = time.monotonic()
    assert 0 == daemon.stop()  # SIGTERM with a collector stuck in a blocking read
    print(f"stopped in {time.monotonic() - started:.2f}s with a hung collector")


def test_a_raising_collector_fails_alone(tmp_path: Path, daemons) -> None:  # type: ignore[no-untyped-def]
    proc, sys = node_tree(tmp_path)
    class_dir = sys / "class" / "infiniband"
    for path in sorted(class_dir.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    class_dir.rmdir()
    write(class_dir, "not a directory\n")  # listdir raises ENOTDIR: broken, not absent
    daemons.append(daemon := start_daemon(tmp_path, tree_args(proc, sys)))

    samples = parse_samples(daemon.metrics_text())
    status = {c["name"]: c for c in daemon.get("/api/v1/status").json()["collectors"]}

    assert 0 == samples[("trainmon_collector_success", frozenset({("collector", "infiniband")}))]
    assert 1 == samples[("trainmon_collector_success", frozenset({("collector", "nvme")}))]
    assert "NotADirectoryError" in status["infiniband"]["error"]


def test_concurrent_scrapes_during_collection_are_whole_and_consistent(
        tmp_path: Path, daemons: list[Daemon]) -> None:
    """50 clients at once while the tree changes under a 0.2 s interval: every body is one snapshot."""
    proc, sys = node_tree(tmp_path)
    daemons.append(daemon := start_daemon(tmp_path, tree_args(proc, sys, "--interval", "0.2")))
    stop = threading.Event()

    def advance() -> None:
        seed = 1
        while not stop.is_set():
            seed += 1
            staged = tmp_path / "staged"
            write_diskstats(staged, [Disk(f"nvme{i}n1", seed=seed, minor=i) for i in range(4)])
            os.replace(staged / "diskstats", proc / "diskstats")  # atomic, as the kernel's file is
            time.sleep(0.01)

    writer = threading.Thread(target=advance)
    writer.start()
    bodies: list[str] = []
    errors: list[BaseException] = []

    def scrape(accept: str) -> None:
        try:
            with httpx.Client(timeout=20) as client:
                for _ in range(3):
                    response = client.get(daemon.url + "/metrics", headers={"Accept": accept})
                    response.raise_for_status()
                    bodies.append(response.text)
        except BaseException as exc:
            errors.append(exc)

    clients = [threading.Thread(target=scrape, args=("text/plain" if i % 2 else OPENMETRICS,)) for i in range(50)]
    for client in clients:
        client.start()
    for client in clients:
        client.join()
    stop.set()
    writer.join()

    assert [] == errors
    assert 150 == len(bodies)
    seeds_seen = set()
    for body in bodies:
        if body.startswith("# HELP") and "# EOF" in body:
            families = list(parse_openmetrics(body))
            reads = [s.value for f in families if f.name == "trainmon_nvme_reads_completed" for s in f.samples]
        else:
            reads = [v for (n, _), v in parse_samples(body).items() if n == "trainmon_nvme_reads_completed_total"]
        assert 4 == len(reads)
        assert 1 == len(set(reads)), "one body mixes two collections"
        seeds_seen.add(reads[0])
    assert len(seeds_seen) > 1, "the tree advanced, so the scrapes must have seen more than one snapshot"


def test_sigint_stops_cleanly(tmp_path: Path, daemons) -> None:  # type: ignore[no-untyped-def]
    daemons.append(daemon := start_daemon(tmp_path, tree_args(*node_tree(tmp_path))))

    assert 0 == daemon.stop(signal.SIGINT)
    assert "Traceback" not in daemon.log()


def test_sighup_without_web_config_is_a_logged_no_op(tmp_path: Path, daemons) -> None:  # type: ignore[no-untyped-def]
    """SIGHUP used to kill the daemon; without --web-config there is nothing to re-read."""
    daemons.append(daemon := start_daemon(tmp_path, ["--collectors", "nvme"]))

    daemon.process.send_signal(signal.SIGHUP)
    wait_until(lambda: "SIGHUP" in daemon.log())
    answer = daemon.get("/healthz")

    assert daemon.process.poll() is None
    assert 200 == answer.status_code
    assert "no --web-config to re-read" in daemon.log()
    assert 0 == daemon.stop()


def test_ranks_endpoint_serves_each_ranks_latest_stack_as_json(tmp_path: Path, daemons) -> None:  # type: ignore[no-untyped-def]
    """The stack of a rank suspected of a hang, sent once, stays on /api/v1/ranks; /metrics has its signature."""
    daemons.append(daemon := start_daemon(tmp_path, ["--collectors", "training", "--interval", "0.2"]))
    stack = ("/job/train.py:12:wait_for_batch", "/site/trainmon/torch/_monitor.py:266:_timed", "/job/train.py:40:main")
    report = wire.Report(job_id="j", rank=3, pid=os.getpid(), start_time=time.time(), seq=1, steps=4,
                         hang_suspected=1, stack=stack, group_ranks={"default_pg": "0-3"},
                         group_seqs=(wire.GroupSeq("default_pg", 8, 8),))
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(wire.encode(report), str(tmp_path / "ingest.sock"))

    ranks: Any = wait_until(lambda: daemon.get("/api/v1/ranks").json()["ranks"])
    metrics = daemon.get("/metrics").text

    assert [(3, True, list(stack), "data")] == [(r["rank"], r["hang_suspected"], r["stack"], r["stack_place"])
                                                for r in ranks]
    assert {"issued": 8, "completed": 8, "ranks": "0-3", "timeout_seconds": None} == ranks[0]["groups"]["default_pg"]
    assert f'trainmon_train_stack_info{{job_id="j",rank="3",signature="{ranks[0]["stack_signature"]}"}} 1.0' in metrics
    assert "wait_for_batch" not in metrics
    assert "stack" not in str(daemon.get("/api/v1/status").json())
