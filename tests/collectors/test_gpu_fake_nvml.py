"""A real daemon subprocess on the C fake libnvidia-ml.so.1: pynvml and trainmon run unchanged.

The scenario file is rewritten while the daemon runs (the fake re-reads it), so a GPU can be
lost and brought back mid-run.
"""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
import pytest

from tests.fake_nvml import scenario as scenarios
from tests.fake_nvml.fixtures import fake_nvml_before_r565_dir, fake_nvml_dir  # noqa: F401  (fixtures)
from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.metrics import parse_samples
from tests.helpers.net import wait_until
from trainmon.collectors.gpu import MAX_LISTED_BUSES
from trainmon.nvml import fields
from trainmon.nvml.xid import MAX_KEYS

INTERVAL = "0.3"


def scrape_until(daemon: Daemon, ok: Callable[[dict[scenarios.Sample, float]], bool],
                 timeout: float = 15) -> dict[scenarios.Sample, float]:
    """The first scrape whose samples satisfy `ok`."""
    def attempt() -> dict[scenarios.Sample, float] | None:
        metrics = parse_samples(daemon.metrics_text())
        return metrics if ok(metrics) else None

    return wait_until(attempt, timeout)  # type: ignore[return-value]


def ids(scenario: dict[str, Any], index: int) -> frozenset[tuple[str, str]]:
    return frozenset({"gpu": str(index), "uuid": scenario["gpus"][index]["uuid"]}.items())


def start(tmp_path: Path, library_dir: Path | None, scenario: dict[str, Any], *args: str) -> tuple[Daemon, Path]:
    path = scenarios.write(tmp_path / "scenario.json", scenario)
    env = {"FAKE_NVML_SCENARIO": str(path)}
    if library_dir is not None:
        env["LD_LIBRARY_PATH"] = str(library_dir)
    daemon = start_daemon(tmp_path, ["--collectors", "gpu", "--interval", INTERVAL, "--sysfs", str(tmp_path), *args],
                          env=env)
    return daemon, path


def test_daemon_serves_every_gpu_metric_of_the_scenario(tmp_path: Path, fake_nvml_dir: Path,  # noqa: F811
                                                        daemons: list[Daemon]) -> None:
    """8 GPUs through the real loader, pynvml and the C ABI: every series equals the scenario, converted."""
    scenario = scenarios.node(8)
    daemon, _ = start(tmp_path, fake_nvml_dir, scenario)
    daemons.append(daemon)
    want = scenarios.expected(scenario)

    got = scrape_until(daemon, lambda m: all(k in m for k in want))
    assert want == pytest.approx({key: got[key] for key in want})


def test_lost_gpu_mid_run_and_its_return(tmp_path: Path, fake_nvml_dir: Path,  # noqa: F811
                                         daemons: list[Daemon]) -> None:
    """GPU 2 lost mid-run: up 0 and no values for it, the others unaffected, up again once it answers."""
    healthy = scenarios.node(4)
    daemon, path = start(tmp_path, fake_nvml_dir, healthy)
    daemons.append(daemon)
    up2, up0 = ("trainmon_gpu_up", ids(healthy, 2)), ("trainmon_gpu_up", ids(healthy, 0))
    scrape_until(daemon, lambda m: m.get(up2) == 1.0)

    scenarios.write(path, scenarios.changed(healthy, 2, errors={"*": 15}))
    lost = scrape_until(daemon, lambda m: m.get(up2) == 0.0)
    assert 1.0 == lost[up0]
    assert ("trainmon_gpu_power_watts", ids(healthy, 2)) not in lost
    assert 300.0 == lost[("trainmon_gpu_power_watts", ids(healthy, 0))]
    status = daemon.get("/api/v1/status").text
    assert "GpuIsLost" in status or "not found by NVML" in status

    scenarios.write(path, healthy)
    back = scrape_until(daemon, lambda m: m.get(up2) == 1.0, timeout=30)
    assert 0.12 == back[("trainmon_gpu_utilization_ratio", ids(healthy, 2))]


def test_healthy_gpus_keep_sm_series_while_a_lost_gpu_is_retried(tmp_path: Path, fake_nvml_dir: Path,  # noqa: F811
                                                                 daemons: list[Daemon]) -> None:
    """GPU 2 lost: every cycle seen while NVML is re-initialised again and again still serves GPU 0's
    and GPU 3's SM utilisation, and GPU 2 reads up 0 with no values."""
    healthy = scenarios.node(4)
    daemon, path = start(tmp_path, fake_nvml_dir, healthy)
    daemons.append(daemon)
    sm0, sm3 = ("trainmon_gpu_sm_utilization_ratio", ids(healthy, 0)), ("trainmon_gpu_sm_utilization_ratio",
                                                                        ids(healthy, 3))
    up2 = ("trainmon_gpu_up", ids(healthy, 2))
    scrape_until(daemon, lambda m: sm0 in m)

    scenarios.write(path, scenarios.changed(healthy, 2, errors={"*": 15}))
    scrape_until(daemon, lambda m: m.get(up2) == 0.0)
    cycles: dict[float, dict[scenarios.Sample, float]] = {}  # by the gpu collector's last success
    last_success = ("trainmon_collector_last_success_timestamp_seconds", frozenset({("collector", "gpu")}))

    def enough_retries_seen() -> bool:
        metrics = parse_samples(daemon.metrics_text())
        cycles[metrics[last_success]] = metrics
        return daemon.log().count("nvml re-initialising") >= 4 and len(cycles) >= 8

    wait_until(enough_retries_seen, timeout=30, interval=0.02)
    for metrics in cycles.values():
        assert pytest.approx((0.50, 0.53)) == (metrics.get(sm0), metrics.get(sm3))
        assert 0.0 == metrics[up2]
        assert ("trainmon_gpu_utilization_ratio", ids(healthy, 2)) not in metrics


def without_driver(why: str, tmp_path: Path, fake_nvml_dir: Path,  # noqa: F811
                   *args: str) -> tuple[Daemon, subprocess.CompletedProcess[str]]:
    """A daemon and `trainmon check` where nvmlInit fails with `why` (no library, or no driver loaded)."""
    if why == "LibraryNotFound" and ctypes.util.find_library("nvidia-ml"):
        pytest.skip("a real libnvidia-ml is installed here")
    library_dir = None if why == "LibraryNotFound" else fake_nvml_dir
    daemon, path = start(tmp_path, library_dir, {**scenarios.node(1), "init_error": 9}, *args)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINMON_", "LD_LIBRARY_PATH"))}
    if library_dir is not None:
        env.update(LD_LIBRARY_PATH=str(library_dir), FAKE_NVML_SCENARIO=str(path))
    check = subprocess.run([sys.executable, "-m", "trainmon", "check", "--collectors", "gpu", "--sysfs",
                            str(tmp_path), *args], capture_output=True, text=True, timeout=60, env=env)
    return daemon, check


@pytest.mark.parametrize("why", ["LibraryNotFound", "DriverNotLoaded"])
def test_without_a_driver_the_daemon_serves_and_says_why(why: str, tmp_path: Path, fake_nvml_dir: Path,  # noqa: F811
                                                        daemons: list[Daemon]) -> None:
    """NVIDIA device nodes but no library, or a library without its driver: gpu success 0, /readyz 200,
    `trainmon check` says why and exits 1."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidiactl", "nvidia0"):
        (dev / name).touch()
    daemon, check = without_driver(why, tmp_path, fake_nvml_dir, "--devfs", str(dev))
    daemons.append(daemon)
    metrics = parse_samples(daemon.metrics_text())

    assert 0.0 == metrics[("trainmon_collector_success", frozenset({("collector", "gpu")}))]
    assert 200 == daemon.get("/readyz").status_code
    assert 0 != check.returncode
    assert "NVML unavailable" in check.stdout and why in check.stdout


@pytest.mark.parametrize("why", ["LibraryNotFound", "DriverNotLoaded"])
def test_a_node_without_gpus_has_no_gpu_data_not_a_failing_collector(
        why: str, tmp_path: Path, fake_nvml_dir: Path, daemons: list[Daemon]) -> None:  # noqa: F811
    """No NVIDIA device nodes, none on the PCI bus, and NVML without library or driver: the gpu collector
    reads no_data (success 1, as a node without InfiniBand), cycle after cycle; `trainmon check` exits 0."""
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "null").touch()
    daemon, check = without_driver(why, tmp_path, fake_nvml_dir, "--devfs", str(tmp_path / "dev"))
    daemons.append(daemon)
    success = ("trainmon_collector_success", frozenset({("collector", "gpu")}))
    last = ("trainmon_collector_last_success_timestamp_seconds", frozenset({("collector", "gpu")}))
    first = parse_samples(daemon.metrics_text())
    later = scrape_until(daemon, lambda m: m[last] > first[last])  # a retry, after the back-off

    assert (1.0, 1.0) == (first[success], later[success])
    gpu = next(c for c in daemon.get("/api/v1/status").json()["collectors"] if c["name"] == "gpu")
    assert ("no_data", True) == (gpu["state"], why in gpu["error"])
    assert 0 == check.returncode, check.stdout
    assert "NO_DATA" in check.stdout and "no NVIDIA GPU" in check.stdout


def check_output(library_dir: Path, scenario: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`trainmon check --collectors gpu` on the fake library."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINMON_")}
    env.update(LD_LIBRARY_PATH=str(library_dir), FAKE_NVML_SCENARIO=str(scenario))
    return subprocess.run([sys.executable, "-m", "trainmon", "check", "--collectors", "gpu", *args],
                          capture_output=True, text=True, timeout=60, env=env)


def gpu_skipped(daemon: Daemon) -> list[str]:
    status = daemon.get("/api/v1/status").json()
    return list(next(c for c in status["collectors"] if c["name"] == "gpu")["skipped"])


def test_a_driver_before_r565_serves_temperature_and_lists_what_it_lacks(
        tmp_path: Path, fake_nvml_before_r565_dir: Path, daemons: list[Daemon]) -> None:  # noqa: F811
    """No nvmlDeviceGetTemperatureV symbol (pynvml: FUNCTION_NOT_FOUND): the temperature comes from
    nvmlDeviceGetTemperature; that and GPU 1's unsupported power reading are listed as skipped, once each,
    in /api/v1/status and by `trainmon check`, which exits 0."""
    scenario = scenarios.changed(scenarios.node(2), 1, power_usage_mw=None)
    daemon, path = start(tmp_path, fake_nvml_before_r565_dir, scenario)
    daemons.append(daemon)
    temperatures = [("trainmon_gpu_temperature_celsius", ids(scenario, i) | {("sensor", "gpu")}) for i in (0, 1)]
    metrics = scrape_until(daemon, lambda m: all(t in m for t in temperatures))

    assert [40.0, 41.0] == [metrics[t] for t in temperatures]
    missing_v = ("gpu 0,1 temperature (falls back to nvmlDeviceGetTemperature): nvmlDeviceGetTemperatureV "
                 "is not in this driver")
    no_power = "gpu 1 power_watts: nvmlDeviceGetPowerUsage is not supported on this GPU"
    skipped = gpu_skipped(daemon)
    assert {missing_v, no_power} <= set(skipped)
    assert 1 == sum("temperature" in line for line in skipped)
    no_fabric = "gpu 0,1 fabric info: nvmlDeviceGetGpuFabricInfoV is not supported on this GPU"  # read last
    check = check_output(fake_nvml_before_r565_dir, path)
    assert 0 == check.returncode
    assert [True] * 3 == [f"skipped: {line}" in check.stdout for line in (missing_v, no_power, no_fabric)]


def test_gpm_refusing_samples_skips_windows_and_asks_again(tmp_path: Path, fake_nvml_dir: Path,  # noqa: F811
                                                           daemons: list[Daemon]) -> None:
    """GPU 0's GPM answers NO_PERMISSION to its first 4 samples (DCGM saw this in unprivileged containers):
    `trainmon check` lists the skipped window; the daemon asks again with back-off and serves GPU 0's SM
    activity once GPM answers, GPU 1's all along."""
    scenario = scenarios.changed(scenarios.node(2), 0, gpm_refusals=4)
    daemon, path = start(tmp_path, fake_nvml_dir, scenario)
    daemons.append(daemon)
    sm0, sm1 = (("trainmon_gpu_sm_utilization_ratio", ids(scenario, i)) for i in (0, 1))
    metrics = scrape_until(daemon, lambda m: sm0 in m, timeout=30)

    assert (0.50, 0.51) == (metrics[sm0], metrics[sm1])
    check = check_output(fake_nvml_dir, path)
    assert "skipped: gpu 0 SM activity (GPM): sample refused (Insufficient Permissions), window skipped; " \
           "asked again in" in check.stdout


def test_unsupported_values_gpm_and_xid_through_the_fake(tmp_path: Path, fake_nvml_dir: Path,  # noqa: F811
                                                         daemons: list[Daemon]) -> None:
    """NOT_SUPPORTED fields absent, no SM series without GPM, and one XID event counted once."""
    base = scenarios.node(2)
    del base["gpus"][1]["fields"][str(scenarios.FIELD["energy_mj"])]
    base = scenarios.changed(base, 1, gpm_supported=False, power_usage_mw=None)
    daemon, path = start(tmp_path, fake_nvml_dir, base, "--kmsg", str(tmp_path))  # unreadable: NVML events count
    daemons.append(daemon)
    scrape_until(daemon, lambda m: ("trainmon_gpu_sm_utilization_ratio", ids(base, 0)) in m)

    scenarios.write(path, {**base, "xid_events": [{"id": 7, "gpu": 1, "xid": 79}]})
    xid = ("trainmon_gpu_xid_errors_total", ids(base, 1) | {("xid", "79")})
    scrape_until(daemon, lambda m: xid in m)
    later = scenarios.changed(base, 0, utilization_gpu=77)  # a marker: cycles after the event have run
    scenarios.write(path, {**later, "xid_events": [{"id": 7, "gpu": 1, "xid": 79}]})
    metrics = scrape_until(daemon, lambda m: m.get(("trainmon_gpu_utilization_ratio", ids(base, 0))) == 0.77)

    assert 1.0 == metrics[xid]
    assert 1.0 == metrics[("trainmon_gpu_up", ids(base, 1))]
    for name in ("power_watts", "energy_joules_total", "sm_utilization_ratio", "sm_active_seconds_total"):
        assert (f"trainmon_gpu_{name}", ids(base, 1)) not in metrics
    assert metrics[("trainmon_gpu_sm_active_seconds_total", ids(base, 0))] > 0


def test_kernel_log_history_and_nvml_events_count_each_xid_once(tmp_path: Path, fake_nvml_dir: Path,  # noqa: F811
                                                                 daemons: list[Daemon]) -> None:
    """XIDs logged before the daemon started are served from the kernel log; the NVML event for the XID 79
    the log also has counts once; a GPU of another node is not served; `trainmon check` names the source."""
    base = scenarios.node(2)
    now = time.clock_gettime(time.CLOCK_MONOTONIC)
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(
        f"4,1,{int(max(now - 3600, 0) * 1e6)},-;NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=python3, Graphics "
        "Exception\n"  # an hour ago, or at boot on a machine up for less (the kernel's clock is never negative)
        f"4,2,{int((now - 1) * 1e6)},-;NVRM: Xid (PCI:0000:28:00): 79, pid=1, name=python3, fallen off the bus\n"
        f"4,3,{int(now * 1e6)},-;NVRM: Xid (PCI:0000:c1:00): 48, pid=1, name=python3, DBE\n")
    daemon, path = start(tmp_path, fake_nvml_dir, base, "--kmsg", str(kmsg))
    daemons.append(daemon)
    xid13, xid79 = (("trainmon_gpu_xid_errors_total", ids(base, i) | {("xid", x)}) for i, x in ((0, "13"), (1, "79")))
    scrape_until(daemon, lambda m: xid13 in m and xid79 in m)

    scenarios.write(path, {**scenarios.changed(base, 0, utilization_gpu=77),
                           "xid_events": [{"id": 1, "gpu": 1, "xid": 79}]})
    metrics = scrape_until(daemon, lambda m: m.get(("trainmon_gpu_utilization_ratio", ids(base, 0))) == 0.77)
    time.sleep(3 * float(INTERVAL))  # cycles after the event was delivered
    metrics = parse_samples(daemon.metrics_text())

    assert (1.0, 1.0) == (metrics[xid13], metrics[xid79])
    assert not [k for k in metrics if k[0] == "trainmon_gpu_xid_errors_total" and ("xid", "48") in k[1]]
    status = daemon.get("/api/v1/status").json()
    kmsg_status = next(c for c in status["collectors"] if c["name"] == "gpu")["details"]["kmsg"]
    assert (True, ["0000:c1:00"]) == (kmsg_status["readable"], kmsg_status["other_buses"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINMON_")}
    env.update(LD_LIBRARY_PATH=str(fake_nvml_dir), FAKE_NVML_SCENARIO=str(path))
    check = subprocess.run([sys.executable, "-m", "trainmon", "check", "--collectors", "gpu", "--kmsg", str(kmsg)],
                           capture_output=True, text=True, timeout=60, env=env)
    assert f"XIDs: kernel log {kmsg}" in check.stdout
    unreadable = subprocess.run([sys.executable, "-m", "trainmon", "check", "--collectors", "gpu",
                                 "--kmsg", str(tmp_path)], capture_output=True, text=True, timeout=60, env=env)
    assert "XIDs: NVML events only" in unreadable.stdout
    assert "--kmsg" in unreadable.stdout


@pytest.mark.parametrize("sources", ["log and nvml", "nvml, log unreadable", "log alone"])
def test_an_xid_48_on_gpu_1_counts_once_whichever_sources_report_it(tmp_path: Path, fake_nvml_dir: Path,  # noqa: F811
                                                                   daemons: list[Daemon], sources: str) -> None:
    """The log's record is stamped on the kernel's clock, two minutes off CLOCK_MONOTONIC (the drift of a long
    uptime): the two reports of one event cannot be paired by time, and the readable log alone counts."""
    base = scenarios.node(2)
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    log_path = tmp_path if sources.endswith("unreadable") else kmsg
    daemon, path = start(tmp_path, fake_nvml_dir, base, "--kmsg", str(log_path))
    daemons.append(daemon)
    scrape_until(daemon, lambda m: ("trainmon_gpu_sm_utilization_ratio", ids(base, 0)) in m)

    stamp = int((time.clock_gettime(time.CLOCK_MONOTONIC) - 120) * 1e6)
    with kmsg.open("a") as log:
        log.write(f"4,1,{stamp},-;NVRM: Xid (PCI:0000:28:00): 48, pid=1, name=python3, DBE (0x1,0x2)\n")
    if sources != "log alone":
        scenarios.write(path, {**base, "xid_events": [{"id": 1, "gpu": 1, "xid": 48}]})
    xid48 = ("trainmon_gpu_xid_errors_total", ids(base, 1) | {("xid", "48")})
    scrape_until(daemon, lambda m: xid48 in m)
    time.sleep(2)  # the NVML event thread waits 500 ms at a time: both reports have been handled by now

    assert 1.0 == parse_samples(daemon.metrics_text())[xid48]


def test_a_kernel_log_flooded_with_other_buses_still_counts_this_nodes_gpu(tmp_path: Path,
                                                                           fake_nvml_dir: Path,  # noqa: F811
                                                                           daemons: list[Daemon]) -> None:
    """More distinct foreign (bus, xid) pairs than the ledger keeps, then XID 79 on GPU 0: GPU 0's is served,
    the foreign ones are counted as refused, and the status names a bounded sample of the other buses."""
    base = scenarios.node(2)
    flood = [(f"0001:{n >> 8:02x}:{n & 0xff:02x}", 31) for n in range(MAX_KEYS + 100)]
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(xid_records(*flood, ("0000:18:00", 79)))
    daemon, _ = start(tmp_path, fake_nvml_dir, base, "--kmsg", str(kmsg))
    daemons.append(daemon)

    xid79 = ("trainmon_gpu_xid_errors_total", ids(base, 0) | {("xid", "79")})
    assert 1.0 == scrape_until(daemon, lambda m: xid79 in m)[xid79]
    status = daemon.get("/api/v1/status").json()
    kmsg_status = next(c for c in status["collectors"] if c["name"] == "gpu")["details"]["kmsg"]
    assert (100, MAX_KEYS, MAX_LISTED_BUSES) == (kmsg_status["refused"], kmsg_status["other_bus_count"],
                                                 len(kmsg_status["other_buses"]))


def xid_records(*xids: tuple[str, int]) -> str:
    """/dev/kmsg records of XIDs (bus, code) stamped a minute ago on this boot's clock."""
    stamp = int((time.clock_gettime(time.CLOCK_MONOTONIC) - 60) * 1e6)
    return "".join(f"4,{n},{stamp},-;NVRM: Xid (PCI:{bus}): {xid}, pid=1, name=python3, Timeout waiting for RPC\n"
                   for n, (bus, xid) in enumerate(xids, 1))


def test_the_same_xid_after_a_reboot_drains_across_a_daemon_stop(tmp_path: Path, fake_nvml_dir: Path,  # noqa: F811
                                                                  daemons: list[Daemon]) -> None:
    """Boot one: XID 119 on both GPUs (reset the GPU). The daemon stops, the node boots again (new boot id,
    fresh kernel log): 119 again on GPU 0 is drain, 62 on GPU 1 is its own catalog action. `trainmon check`
    says where the history is, and that it stays in memory where the directory cannot be made."""
    base = scenarios.node(2)
    random = tmp_path / "proc" / "sys" / "kernel" / "random"
    random.mkdir(parents=True)
    (random / "boot_id").write_text("8d1a3c56-0000-4000-8000-000000000001\n")
    kmsg, state = tmp_path / "kmsg", tmp_path / "state"
    kmsg.write_text(xid_records(("0000:18:00", 119), ("0000:28:00", 119)))
    flags = ("--kmsg", str(kmsg), "--procfs", str(tmp_path / "proc"), "--state-dir", str(state))
    action = [("trainmon_gpu_health_action", ids(base, i) | {("action", a)}) for i, a in
              ((0, "reset_gpu"), (1, "reset_gpu"), (0, "drain"))]
    first, path = start(tmp_path, fake_nvml_dir, base, *flags)
    daemons.append(first)
    scrape_until(first, lambda m: action[0] in m and action[1] in m)
    assert 0 == first.stop()

    (random / "boot_id").write_text("8d1a3c56-0000-4000-8000-000000000002\n")
    kmsg.write_text(xid_records(("0000:18:00", 119), ("0000:28:00", 62)))
    second, _ = start(tmp_path, fake_nvml_dir, base, *flags)
    daemons.append(second)
    metrics = scrape_until(second, lambda m: action[2] in m)

    assert action[1] in metrics
    assert 1.0 == metrics[("trainmon_gpu_health_reason_info", ids(base, 0) | {
        ("reason", "XID 119 GSP_RPC_TIMEOUT again after a reboot: service the GPU")})]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINMON_")}
    env.update(LD_LIBRARY_PATH=str(fake_nvml_dir), FAKE_NVML_SCENARIO=str(path))
    check = subprocess.run([sys.executable, "-m", "trainmon", "check", "--collectors", "gpu", *flags[:4],
                            "--state-dir", str(kmsg / "state")], capture_output=True, text=True, timeout=60, env=env)
    assert f"health history: in memory only ({kmsg / 'state'}: " in check.stdout


def test_recovery_action_nvlink_links_and_fabric_through_the_c_fake(tmp_path: Path, fake_nvml_dir: Path,  # noqa: F811
                                                                    daemons: list[Daemon]) -> None:
    """GPU 0 answers the recovery-action field, per-link NVLink fields (scope = link) and fabric info; GPU 1
    answers NOT_SUPPORTED to each: no series for it, no guessed verdict."""
    base = scenarios.node(2)
    links = {str(fields.LINK_COUNT): 2, f"{fields.LINK_STATE}@0": 1, f"{fields.LINK_STATE}@1": 0,
             f"{pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC}@1": 12, f"{pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY}@1": 4,
             str(pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION): 1}
    scenario = scenarios.changed(base, 0, fields={**base["gpus"][0]["fields"], **links}, fabric_state=3,
                                 fabric_health_mask=0x5)
    daemon, _ = start(tmp_path, fake_nvml_dir, scenario, "--kmsg", str(tmp_path / "no-kmsg"))
    daemons.append(daemon)
    action0 = ("trainmon_gpu_health_action", ids(scenario, 0) | {("action", "reset_gpu")})
    metrics = scrape_until(daemon, lambda m: action0 in m)

    assert 1.0 == metrics[("trainmon_gpu_nvlink_link_up", ids(scenario, 0) | {("link", "0")})]
    assert 0.0 == metrics[("trainmon_gpu_nvlink_link_up", ids(scenario, 0) | {("link", "1")})]
    link1 = ids(scenario, 0) | {("link", "1")}
    assert 12.0 == metrics[("trainmon_gpu_nvlink_errors_total", link1 | {("error", "crc_flit")})]
    assert 4.0 == metrics[("trainmon_gpu_nvlink_errors_total", link1 | {("error", "replay")})]
    assert (3.0, 5.0) == (metrics[("trainmon_gpu_fabric_state_id", ids(scenario, 0))],
                          metrics[("trainmon_gpu_fabric_health_mask", ids(scenario, 0))])
    reason = ("trainmon_gpu_health_reason_info", ids(scenario, 0) | {("reason", "NVML recovery action GPU_RESET: "
                                                                                "reset the GPU")})
    assert 1.0 == metrics[reason]
    new = ("trainmon_gpu_nvlink_link_up", "trainmon_gpu_nvlink_errors_total", "trainmon_gpu_fabric_state_id",
           "trainmon_gpu_fabric_health_mask")
    gpu1 = [k for k in metrics if dict(k[1]).get("gpu") == "1"
            and (k[0] in new or "recovery action" in dict(k[1]).get("reason", ""))]
    assert [] == gpu1
    assert 1.0 == metrics[("trainmon_gpu_health_action", ids(scenario, 1) | {("action", "reset_gpu")})]  # its DBE
