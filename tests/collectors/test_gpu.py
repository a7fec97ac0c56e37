"""The gpu collector against pynvml's real wrappers, with NVML answered by `ScenarioLibrary`."""

from __future__ import annotations

import itertools
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pynvml
import pytest
from prometheus_client import CollectorRegistry

from tests.fake_nvml import scenario as scenarios
from tests.fake_nvml.fixtures import fake_nvml_dir  # noqa: F401  (fixture)
from tests.helpers.catalog import assert_declared
from tests.helpers.clock import Clock
from tests.helpers.metrics import registry_of, samples_of
from tests.helpers.net import wait_until
from trainmon.catalog import BY_SOURCE
from trainmon.collectors.base import Collection, NodeResources
from trainmon.collectors.gpu import GpuCollector
from trainmon.errors import CollectorError, NoData
from trainmon.nvml import fields, gpm
from trainmon.nvml.metrics import GpuMetric
from trainmon.settings import Settings
from trainmon.simulation.scenario import ScenarioLibrary

INTERVAL = 5.0


class Node:
    """A mutable scenario, a library answering from it, and a collector on top."""

    def __init__(self, scenario: dict[str, Any], tmp_path: Path, **settings: Any) -> None:
        self.scenario = scenario
        self.clock = Clock(1000.0)
        self.library = ScenarioLibrary(lambda: self.scenario)
        settings.setdefault("kmsg", tmp_path / "kmsg")  # never the host's kernel log
        settings.setdefault("state_dir", tmp_path / "state")  # never the host's /var/lib/trainmon
        self.collector = GpuCollector(Settings(interval=INTERVAL, sysfs=tmp_path, **settings), NodeResources(),
                                      library=self.library, clock=self.clock)

    def collect(self, advance: float = INTERVAL) -> Collection:
        self.clock.now += advance
        return self.collector.collect()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    made = Node(scenarios.node(8), tmp_path)
    yield made
    made.collector.close()


def registry(collection: Collection) -> CollectorRegistry:
    return registry_of(collection.families)


def samples(collection: Collection) -> dict[scenarios.Sample, float]:
    return samples_of(collection.families)


def gpu_names(collection: Collection, gpu: str) -> set[str]:
    return {s.name for family in collection.families for s in family.samples if s.labels.get("gpu") == gpu}


def test_every_metric_matches_the_scenario_in_base_units(node: Node) -> None:
    """8 GPUs with distinct values: each SPEC GPU series equals its scenario value, converted."""
    node.collect()
    collection = node.collect()
    got = samples(collection)
    want = scenarios.expected(node.scenario)

    assert want == pytest.approx({key: got.get(key) for key in want})
    assert {metric.family.name for metric in GpuMetric} <= assert_declared(collection.families, "gpu")
    for i in range(8):
        uuid = node.scenario["gpus"][i]["uuid"]
        assert pytest.approx((50 + i) / 100 * INTERVAL) == got[
            ("trainmon_gpu_sm_active_seconds_total", frozenset({"gpu": str(i), "uuid": uuid}.items()))]


def test_info_carries_identity_and_driver(node: Node) -> None:
    """Descriptive attributes live in trainmon_gpu_info only."""
    reg = registry(node.collect())
    g = node.scenario["gpus"][3]

    assert 1.0 == reg.get_sample_value("trainmon_gpu_info", {
        "gpu": "3", "uuid": g["uuid"], "name": g["name"], "pci_bus_id": g["pci_bus_id"],
        "driver_version": "550.54.15", "minor_number": "3"})


def test_first_cycle_has_no_gpm_values(node: Node) -> None:
    """GPM needs two samples: the first cycle only seeds them."""
    assert "trainmon_gpu_sm_utilization_ratio" not in gpu_names(node.collect(), "0")


def test_gpm_window_under_100ms_is_skipped(node: Node) -> None:
    """A cycle 50 ms after the last takes no GPM sample and reports no ratios; the next one does."""
    def gpm_calls() -> int:
        return sum(node.library.calls_by_name[f] for f in ("nvmlGpmSampleGet", "nvmlGpmMetricsGet"))

    node.collect()
    before = gpm_calls()
    node.collect()
    steady = gpm_calls() - before
    before = gpm_calls()
    quick = node.collect(advance=0.05)

    assert (2 * 8, 0) == (steady, gpm_calls() - before)  # a sample and a metrics call per GPU, then none
    assert "trainmon_gpu_sm_utilization_ratio" not in gpu_names(quick, "0")
    assert "trainmon_gpu_sm_active_seconds_total" in gpu_names(quick, "0")
    assert "trainmon_gpu_sm_utilization_ratio" in gpu_names(node.collect(), "0")


def test_not_supported_values_are_absent_not_zero(node: Node) -> None:
    """A GPU without power readings, energy or memory temperature stays up and omits just those."""
    g = node.scenario["gpus"][2]
    for field in ("energy_mj", "memory_temp"):
        del g["fields"][str(scenarios.FIELD[field])]
    node.scenario = scenarios.changed(node.scenario, 2, power_usage_mw=None, clock_sm_mhz=None)
    reg = registry(node.collect())
    ids = {"gpu": "2", "uuid": g["uuid"]}

    assert 1.0 == reg.get_sample_value("trainmon_gpu_up", ids)
    assert reg.get_sample_value("trainmon_gpu_power_watts", ids) is None
    assert reg.get_sample_value("trainmon_gpu_energy_joules_total", ids) is None
    assert reg.get_sample_value("trainmon_gpu_temperature_celsius", {**ids, "sensor": "memory"}) is None
    assert reg.get_sample_value("trainmon_gpu_clock_hertz", {**ids, "clock": "sm"}) is None
    assert 2602e6 == reg.get_sample_value("trainmon_gpu_clock_hertz", {**ids, "clock": "memory"})
    assert reg.get_sample_value("trainmon_gpu_power_watts", {"gpu": "1", "uuid": node.scenario["gpus"][1]["uuid"]})


def test_gpm_unsupported_gives_no_sm_series(node: Node) -> None:
    """Without GPM there is no SM activity at all, never one derived from coarse utilization."""
    node.scenario = scenarios.changed(node.scenario, 4, gpm_supported=False)
    node.collect()
    names = gpu_names(node.collect(), "4")

    assert "trainmon_gpu_utilization_ratio" in names
    assert not names & {"trainmon_gpu_sm_utilization_ratio", "trainmon_gpu_sm_active_seconds_total",
                        "trainmon_gpu_sm_occupancy_ratio", "trainmon_gpu_tensor_active_ratio"}


def test_lost_gpu_reads_down_others_go_on_and_it_recovers(node: Node) -> None:
    """GPU_IS_LOST on GPU 1: up 0 and no value series for it, the rest unaffected, back when it answers."""
    healthy = node.scenario
    node.collect()
    node.scenario = scenarios.changed(healthy, 1, errors={"*": 15})
    lost = registry(node.collect())
    uuid1, uuid0 = healthy["gpus"][1]["uuid"], healthy["gpus"][0]["uuid"]

    assert 0.0 == lost.get_sample_value("trainmon_gpu_up", {"gpu": "1", "uuid": uuid1})
    assert lost.get_sample_value("trainmon_gpu_utilization_ratio", {"gpu": "1", "uuid": uuid1}) is None
    assert 1.0 == lost.get_sample_value("trainmon_gpu_info", {
        "gpu": "1", "uuid": uuid1, "name": healthy["gpus"][1]["name"], "pci_bus_id": healthy["gpus"][1]["pci_bus_id"],
        "driver_version": "550.54.15", "minor_number": "1"})
    assert 0.10 == lost.get_sample_value("trainmon_gpu_utilization_ratio", {"gpu": "0", "uuid": uuid0})
    again = registry(node.collect())  # NVML re-initialised (back-off passed): still lost, still listed
    assert 0.0 == again.get_sample_value("trainmon_gpu_up", {"gpu": "1", "uuid": uuid1})
    assert 1.0 == again.get_sample_value("trainmon_gpu_up", {"gpu": "7", "uuid": healthy["gpus"][7]["uuid"]})

    node.scenario = healthy
    back = registry(node.collect(advance=60))
    assert 1.0 == back.get_sample_value("trainmon_gpu_up", {"gpu": "1", "uuid": uuid1})
    assert 0.11 == back.get_sample_value("trainmon_gpu_utilization_ratio", {"gpu": "1", "uuid": uuid1})


def test_gpu_missing_after_reinit_stays_listed_down(node: Node) -> None:
    """A GPU that vanished from enumeration after a reset still reads up 0 under its UUID."""
    healthy = node.scenario
    node.collect()
    node.scenario = scenarios.changed(healthy, 7, errors={"*": 15})
    node.collect()
    node.scenario = {**healthy, "gpus": healthy["gpus"][:7]}
    collection = node.collect(advance=60)

    assert 0.0 == registry(collection).get_sample_value("trainmon_gpu_up", {"gpu": "7",
                                                                            "uuid": healthy["gpus"][7]["uuid"]})
    assert [False] == [g["up"] for g in collection.details["gpus"] if g["index"] == 7]  # type: ignore[attr-defined]


def test_no_driver_fails_with_the_reason_and_retries_with_backoff(tmp_path: Path) -> None:
    """DRIVER_NOT_LOADED with NVIDIA device nodes present: collect() raises one line; init is retried only
    after the back-off."""
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").touch()
    node = Node({**scenarios.node(8), "init_error": 9}, tmp_path, devfs=tmp_path / "dev")
    try:
        with pytest.raises(CollectorError, match=r"NVML unavailable.*DriverNotLoaded"):
            node.collect()
        calls = node.library.calls
        with pytest.raises(CollectorError, match="next try in"):
            node.collect(advance=1)
        assert calls == node.library.calls

        node.scenario = scenarios.node(8)
        assert 8 == len(node.collect(advance=INTERVAL).details["gpus"])  # type: ignore[arg-type]
    finally:
        node.collector.close()


def test_xid_event_counted_once_and_early_events_lost(node: Node) -> None:
    """Events before registration are lost; one after it is counted exactly once."""
    node.scenario = {**node.scenario, "xid_events": [{"id": 1, "gpu": 0, "xid": 13}]}
    node.collect()
    node.scenario = {**node.scenario, "xid_events": [{"id": 1, "gpu": 0, "xid": 13}, {"id": 2, "gpu": 5, "xid": 79}]}
    labels = {"gpu": "5", "uuid": node.scenario["gpus"][5]["uuid"], "xid": "79"}

    wait_until(lambda: registry(node.collect()).get_sample_value("trainmon_gpu_xid_errors_total", labels))
    reg = registry(node.collect())
    assert 1.0 == reg.get_sample_value("trainmon_gpu_xid_errors_total", labels)
    assert reg.get_sample_value("trainmon_gpu_xid_last_timestamp_seconds", labels) > 1.6e9  # type: ignore[operator]
    assert reg.get_sample_value("trainmon_gpu_xid_errors_total",
                                {"gpu": "0", "uuid": node.scenario["gpus"][0]["uuid"], "xid": "13"}) is None


def test_pcie_counter_wrap_is_unwrapped(node: Node) -> None:
    """A 32-bit PCIe byte field that wraps keeps counting up."""
    rx = str(scenarios.FIELD["pcie_rx"])
    g = node.scenario["gpus"][0]
    g["field_types"] = {rx: 1}  # NVML_VALUE_TYPE_UNSIGNED_INT
    g["fields"][rx] = 2**32 - 100
    node.collect()
    g["fields"][rx] = 50
    reg = registry(node.collect())

    assert 2**32 + 50 == reg.get_sample_value("trainmon_gpu_pcie_received_bytes_total", {"gpu": "0",
                                                                                        "uuid": g["uuid"]})


def test_memory_v1_fallback_has_no_reserved(node: Node) -> None:
    """A driver without memory info v2: v1 values (used includes reserved) and no reserved series."""
    node.scenario = scenarios.changed(node.scenario, 0, errors={"nvmlDeviceGetMemoryInfo_v2": 13})
    reg = registry(node.collect())
    g = node.scenario["gpus"][0]
    ids = {"gpu": "0", "uuid": g["uuid"]}

    assert g["memory_used"] + g["memory_reserved"] == reg.get_sample_value("trainmon_gpu_fb_used_bytes", ids)
    assert reg.get_sample_value("trainmon_gpu_fb_reserved_bytes", ids) is None


def test_process_list_without_v3_symbol_is_absent_not_a_crash(node: Node) -> None:
    """pynvml raises NVMLLibraryMismatchError (not an NVMLError) for a driver without the _v3 symbol."""
    node.scenario = scenarios.changed(node.scenario, 0, errors={"nvmlDeviceGetComputeRunningProcesses_v3": 13})
    reg = registry(node.collect())
    ids = {"gpu": "0", "uuid": node.scenario["gpus"][0]["uuid"]}

    assert 1.0 == reg.get_sample_value("trainmon_gpu_up", ids)
    assert reg.get_sample_value("trainmon_gpu_processes", ids) is None


def test_per_process_series_only_when_asked(tmp_path: Path) -> None:
    """--gpu-processes adds framebuffer per pid and the process name from psutil."""
    pid = os.getpid()
    base = scenarios.changed(scenarios.node(1), 0, processes=[{"pid": pid, "used_memory": 123 << 20}])
    plain, detailed = Node(base, tmp_path), Node(base, tmp_path, gpu_processes=True)
    names = {s.name for f in plain.collect().families for s in f.samples}
    reg = registry(detailed.collect())
    ids = {"gpu": "0", "uuid": base["gpus"][0]["uuid"]}

    assert "trainmon_gpu_processes" in names and "trainmon_gpu_process_fb_used_bytes" not in names
    assert 123 << 20 == reg.get_sample_value("trainmon_gpu_process_fb_used_bytes", {**ids, "pid": str(pid)})
    assert 1.0 == reg.get_sample_value("trainmon_gpu_process_info", {"pid": str(pid),
                                                                     "name": psutil.Process(pid).name()})
    plain.collector.close()
    detailed.collector.close()


def test_gpus_expected_counts_nvidia_display_devices_in_sysfs(node: Node, tmp_path: Path) -> None:
    """Vendor 0x10de and class 0x03xxxx count; an NVSwitch bridge (0x0680) and others do not."""
    for address, vendor, klass in (("0000:18:00.0", "0x10de", "0x030200"), ("0000:2a:00.0", "0x10de", "0x030000"),
                                   ("0000:05:00.0", "0x10de", "0x068000"), ("0000:06:00.0", "0x15b3", "0x020700")):
        device = tmp_path / "bus" / "pci" / "devices" / address
        device.mkdir(parents=True)
        (device / "vendor").write_text(vendor + "\n")
        (device / "class").write_text(klass + "\n")

    assert 2.0 == registry(node.collect()).get_sample_value("trainmon_gpus_expected")


@pytest.mark.parametrize(("device_node", "pci_class", "failing"), [
    (None, None, False),  # nothing NVIDIA here: a node without GPUs
    ("nvidia0", None, True),  # the driver's device nodes, NVML not loading
    (None, "0x030200", True),  # a GPU on the bus whose driver did not load (no device nodes either)
    (None, "0x068000", False),  # only an NVIDIA bridge (NVSwitch), no GPU
])
def test_nvml_without_a_driver_fails_only_where_there_are_nvidia_gpus(
        tmp_path: Path, device_node: str | None, pci_class: str | None, failing: bool) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / (device_node or "null")).touch()
    if pci_class is not None:
        device = tmp_path / "bus" / "pci" / "devices" / "0000:18:00.0"
        device.mkdir(parents=True)
        (device / "vendor").write_text("0x10de\n")
        (device / "class").write_text(pci_class + "\n")
    node = Node({**scenarios.node(1), "init_error": 9}, tmp_path, devfs=tmp_path / "dev")
    try:
        with pytest.raises(CollectorError) as raised:
            node.collect()
    finally:
        node.collector.close()

    assert failing != isinstance(raised.value, NoData), raised.value
    assert "DriverNotLoaded" in str(raised.value)


def test_nvml_calls_per_gpu_per_cycle_stay_small(node: Node) -> None:
    """A steady cycle costs at most 16 NVML calls per GPU (one field-values call covers 19 values)."""
    node.collect()
    node.collect()
    before = node.library.calls
    node.collect()

    assert (node.library.calls - before) / 8 <= 16


def test_no_second_cycle_while_one_hangs(tmp_path: Path) -> None:
    """A driver call that hangs holds its cycle; the next collect() refuses instead of piling up."""
    release, entered = threading.Event(), threading.Event()
    state = {"hang": False, "scenario": scenarios.node(1)}

    def source() -> dict[str, Any]:
        if state["hang"]:
            entered.set()
            release.wait(10)
        return state["scenario"]  # type: ignore[return-value]

    collector = GpuCollector(Settings(interval=INTERVAL, sysfs=tmp_path), NodeResources(),
                             library=ScenarioLibrary(source))
    collector.collect()
    state["hang"] = True
    hung = threading.Thread(target=collector.collect)
    hung.start()
    entered.wait(10)
    with pytest.raises(CollectorError, match="still running"):
        collector.collect()
    state["hang"] = False
    release.set()
    hung.join(10)
    collector.close()


def test_gpm_window_too_long_starts_over(node: Node) -> None:
    """After a stall longer than the GPM guard the window is not averaged; the SM counter does not jump."""
    node.collect()
    before = samples(node.collect())
    after = node.collect(advance=3600)
    key = ("trainmon_gpu_sm_active_seconds_total",
           frozenset({"gpu": "0", "uuid": node.scenario["gpus"][0]["uuid"]}.items()))

    assert "trainmon_gpu_sm_utilization_ratio" not in gpu_names(after, "0")
    assert before[key] == samples(after)[key]


def test_the_c_fake_exports_every_symbol_the_collector_resolves(node: Node, fake_nvml_dir: Path) -> None:  # noqa: F811
    """Every C function pynvml looked up for a full cycle (GPM, XID, processes) exists in the C fake."""
    node.collect()
    node.collect()
    resolved = set(pynvml._nvmlGetFunctionPointer_cache)
    exported = subprocess.run(["nm", "-D", "--defined-only", str(fake_nvml_dir / "libnvidia-ml.so.1")],
                              capture_output=True, text=True, check=True).stdout.split()

    assert {"nvmlGpmMetricsGet", "nvmlEventSetWait_v2", "nvmlDeviceGetComputeRunningProcesses_v3"} <= resolved
    assert resolved <= set(exported)


def test_gpm_refused_mid_run_drops_sm_series_not_the_gpu(node: Node) -> None:
    """GPM sampling answering NOT_SUPPORTED later on (MIG enabled, say) leaves the GPU up without SM ratios."""
    node.collect()
    node.scenario = scenarios.changed(node.scenario, 3, errors={"nvmlGpmSampleGet": 3})
    collection = node.collect()
    reg = registry(collection)

    assert 1.0 == reg.get_sample_value("trainmon_gpu_up", {"gpu": "3", "uuid": node.scenario["gpus"][3]["uuid"]})
    assert "trainmon_gpu_sm_utilization_ratio" not in gpu_names(node.collect(), "3")
    assert "trainmon_gpu_sm_utilization_ratio" in gpu_names(collection, "2")


def test_gpm_no_permission_skips_windows_and_asks_again_with_back_off(node: Node) -> None:
    """GPM refusing samples (NO_PERMISSION) skips the window and asks again after the interval, then twice as
    long; once it answers, the next window serves SM activity again. GPU 2 keeps its series all along."""
    refused = "gpu 3 SM activity (GPM): sample refused (Insufficient Permissions), window skipped; asked again in"
    node.collect()
    healthy = node.scenario
    node.scenario = scenarios.changed(healthy, 3, errors={"nvmlGpmSampleGet": pynvml.NVML_ERROR_NO_PERMISSION})
    seen = []
    for advance in (INTERVAL, INTERVAL, 2 * INTERVAL):  # refused at once, after 5 s, after 10 s more
        collection = node.collect(advance)
        seen.append(([line for line in collection.skipped if line.startswith(refused)],
                     "trainmon_gpu_sm_utilization_ratio" in gpu_names(collection, "3"),
                     "trainmon_gpu_sm_utilization_ratio" in gpu_names(collection, "2")))
    node.scenario = healthy
    waiting = node.collect(INTERVAL)  # 5 s of the 20 s back-off passed: not asked
    primed = node.collect(3 * INTERVAL)  # asked: the first sample of a fresh window
    served = node.collect(INTERVAL)

    assert [([f"{refused} 5s"], False, True), ([f"{refused} 10s"], False, True), ([f"{refused} 20s"], False, True)] \
        == seen
    assert [f"{refused} 15s"] == [line for line in waiting.skipped if line.startswith(refused)]
    assert "trainmon_gpu_sm_utilization_ratio" not in gpu_names(primed, "3")
    assert not [line for line in primed.skipped if "GPM" in line]
    assert 0.53 == registry(served).get_sample_value("trainmon_gpu_sm_utilization_ratio",
                                                     {"gpu": "3", "uuid": healthy["gpus"][3]["uuid"]})


def test_xid_events_are_rearmed_after_reinitialisation(node: Node, caplog: pytest.LogCaptureFixture) -> None:
    """A re-initialisation invalidates the event set; the new one still counts XIDs."""
    healthy = node.scenario
    node.collect()
    node.scenario = scenarios.changed(healthy, 1, errors={"*": 15})
    node.collect()
    with caplog.at_level("INFO", logger="trainmon.collectors.gpu"):
        node.collect()
    node.scenario = {**healthy, "xid_events": [{"id": 1, "gpu": 0, "xid": 48}]}
    labels = {"gpu": "0", "uuid": healthy["gpus"][0]["uuid"], "xid": "48"}

    assert "nvml re-initialising" in caplog.text
    assert 1.0 == wait_until(lambda: registry(node.collect()).get_sample_value("trainmon_gpu_xid_errors_total", labels))


def test_gpus_seen_before_a_driver_outage_still_read_down(node: Node) -> None:
    """The driver going away mid-run: the collector fails, yet every GPU it knew is served as up 0, not gone."""
    healthy = node.scenario
    node.collect()
    node.scenario = {**scenarios.changed(healthy, 0, errors={"*": 15}), "init_error": 9}
    node.collect()  # GPU 0 lost: re-initialisation is wanted

    with pytest.raises(CollectorError, match="NVML unavailable") as failure:
        node.collect(advance=60)

    partial = registry(Collection(families=failure.value.families))  # type: ignore[arg-type]
    ups = [partial.get_sample_value("trainmon_gpu_up", {"gpu": str(i), "uuid": healthy["gpus"][i]["uuid"]})
           for i in range(8)]
    assert [0.0] * 8 == ups
    assert partial.get_sample_value("trainmon_gpu_utilization_ratio",
                                    {"gpu": "1", "uuid": healthy["gpus"][1]["uuid"]}) is None


def test_healthy_gpus_keep_their_gpm_series_through_every_reinitialisation(
        node: Node, caplog: pytest.LogCaptureFixture) -> None:
    """GPU 1 lost for 12 cycles: NVML is re-initialised several times, yet GPUs 0 and 7 never miss
    an SM ratio, their SM-seconds counter keeps growing, and GPU 1 reads up 0 every cycle."""
    healthy = node.scenario
    node.collect()
    node.collect()
    node.scenario = scenarios.changed(healthy, 1, errors={"*": 15})
    sm_seconds: list[float] = []
    with caplog.at_level("INFO", logger="trainmon.collectors.gpu"):
        for _ in range(12):
            collection = node.collect()
            reg = registry(collection)
            for gpu in (0, 7):
                ids = {"gpu": str(gpu), "uuid": healthy["gpus"][gpu]["uuid"]}
                assert (50 + gpu) / 100 == pytest.approx(reg.get_sample_value("trainmon_gpu_sm_utilization_ratio", ids))
            assert 0.0 == reg.get_sample_value("trainmon_gpu_up", {"gpu": "1", "uuid": healthy["gpus"][1]["uuid"]})
            assert "trainmon_gpu_utilization_ratio" not in gpu_names(collection, "1")  # down, never idle
            sm_seconds.append(reg.get_sample_value("trainmon_gpu_sm_active_seconds_total",
                                                   {"gpu": "0", "uuid": healthy["gpus"][0]["uuid"]}))  # type: ignore[arg-type]

    assert caplog.text.count("nvml re-initialising") >= 3
    assert all(later > earlier for earlier, later in itertools.pairwise(sm_seconds))


def test_reinitialisation_backs_off_to_a_cap_of_five_minutes(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """A GPU lost for an hour: re-initialisations double their spacing from the interval to 300 s."""
    node = Node(scenarios.node(2), tmp_path)
    node.collect()
    node.scenario = scenarios.changed(node.scenario, 1, errors={"*": 15})
    started, reinits = node.clock.now, []
    with caplog.at_level("INFO", logger="trainmon.collectors.gpu"):
        for _ in range(3600 // int(INTERVAL)):
            before = caplog.text.count("nvml re-initialising")
            node.collect()
            if caplog.text.count("nvml re-initialising") > before:
                reinits.append(node.clock.now - started)
    node.collector.close()

    gaps = [later - earlier for earlier, later in itertools.pairwise(reinits)]
    assert [5, 10, 20, 40, 80, 160, 300, 300] == gaps[:8]
    assert {300} == set(gaps[6:])


def test_every_gpu_metric_key_is_a_catalogued_family_and_the_nvml_tables_use_only_those_keys() -> None:
    """The reading's keys are the catalogue's families: nothing read goes unserved or undeclared."""
    assert {metric.family for metric in GpuMetric} <= set(BY_SOURCE["gpu"])
    assert all(m.family.labels[:2] == ("gpu", "uuid") and len(m.family.labels) <= 3 for m in GpuMetric)
    assert {f.metric for f in fields.FIELDS} | set(gpm.GPM_METRICS.values()) <= set(GpuMetric)
    assert all(isinstance(f.metric, GpuMetric) for f in fields.FIELDS)


def health(collection: Collection) -> dict[str, tuple[str, set[str]]]:
    """Per GPU index: the action of trainmon_gpu_health_action and the reasons."""
    actions = {s.labels["gpu"]: s.labels["action"] for f in collection.families for s in f.samples
               if s.name == "trainmon_gpu_health_action" and s.value == 1.0}
    reasons: dict[str, set[str]] = {}
    for family in collection.families:
        for sample in family.samples:
            if sample.name == "trainmon_gpu_health_reason_info":
                reasons.setdefault(sample.labels["gpu"], set()).add(sample.labels["reason"])
    return {gpu: (action, reasons.get(gpu, set())) for gpu, action in actions.items()}


def test_health_verdict_per_gpu_from_the_nvml_values(node: Node) -> None:
    """Pending remap and DBE ask for a reset, the driver's recovery action for a reboot, a failed remap for
    service; a clean GPU needs nothing and has no reason series."""
    recovery = str(pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)
    base = node.scenario
    node.scenario = scenarios.changed(base, 2, fields={**base["gpus"][2]["fields"], recovery: 2})
    node.scenario = scenarios.changed(node.scenario, 3, fields={**base["gpus"][3]["fields"],
                                                                str(scenarios.FIELD["remap_failure"]): 1})
    verdicts = health(node.collect())

    assert ("none", set()) == verdicts["0"]
    assert ("reset_gpu", {"row remap pending: reset the GPU to apply it",
                          "uncorrectable ECC errors since the last reset: reset the GPU"}) == verdicts["1"]
    assert "reboot" == verdicts["2"][0]
    assert "NVML recovery action NODE_REBOOT: reboot the node" in verdicts["2"][1]
    assert "drain" == verdicts["3"][0]
    assert "row remapping failed: service the GPU" in verdicts["3"][1]


def kmsg_xid(sequence: int, xid: int, seconds_ago: float) -> str:
    """A /dev/kmsg record of an XID on GPU 0 (bus 18) stamped `seconds_ago` on this boot's clock."""
    stamp = int((time.clock_gettime(time.CLOCK_MONOTONIC) - seconds_ago) * 1e6)
    return f"4,{sequence},{stamp},-;NVRM: Xid (PCI:0000:18:00): {xid}, pid=1, name=python3, Timeout waiting\n"


def test_an_xid_in_the_kernel_log_cleared_by_a_reset_and_escalated_when_it_comes_back(tmp_path: Path) -> None:
    """XID 119 (catalog: reset the GPU) from the kernel log; GPU 0 lost (reboot), back (the reset done: none);
    the same XID again: drain."""
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(kmsg_xid(1, 119, 60))
    node = Node(scenarios.node(2), tmp_path)
    try:
        healthy = node.scenario
        assert ("reset_gpu", {"XID 119 GSP_RPC_TIMEOUT: reset the GPU"}) == health(node.collect())["0"]
        node.scenario = scenarios.changed(healthy, 0, errors={"*": 15})
        assert "reboot" == health(node.collect())["0"][0]
        node.scenario = healthy
        assert ("none", set()) == health(node.collect(advance=60))["0"]

        with kmsg.open("a") as log:
            log.write(kmsg_xid(2, 119, -1))
        wait_until(lambda: health(node.collect())["0"][0] == "drain", timeout=10)
        assert {"XID 119 GSP_RPC_TIMEOUT again after a GPU reset: service the GPU"} == health(node.collect())["0"][1]
    finally:
        node.collector.close()


def boot(procfs: Path, boot_id: str) -> Path:
    (procfs / "sys" / "kernel" / "random").mkdir(parents=True, exist_ok=True)
    (procfs / "sys" / "kernel" / "random" / "boot_id").write_text(boot_id + "\n")
    return procfs


@pytest.mark.parametrize(("xid", "verdict"), [
    (119, ("drain", {"XID 119 GSP_RPC_TIMEOUT again after a reboot: service the GPU"})),
    (62, ("reset_gpu", {"XID 62 PMU_HALT_ERROR: reset the GPU"})),
])
def test_the_same_xid_after_a_reboot_asks_for_service_and_another_one_does_not(
        xid: int, verdict: tuple[str, set[str]], tmp_path: Path) -> None:
    """XID 119 in one boot; the daemon stops; the node boots again (a new boot id, a fresh kernel log);
    the same XID on the same GPU: drain. Another XID: its own catalog action."""
    kmsg, procfs = tmp_path / "kmsg", tmp_path / "proc"
    kmsg.write_text(kmsg_xid(1, 119, 30))
    before = Node(scenarios.node(2), tmp_path, procfs=boot(procfs, "boot-one"))
    try:
        assert "reset_gpu" == health(before.collect())["0"][0]
    finally:
        before.collector.close()

    kmsg.write_text(kmsg_xid(1, xid, 10))
    after = Node(scenarios.node(2), tmp_path, procfs=boot(procfs, "boot-two"))
    try:
        collection = after.collect()
        assert verdict == health(collection)["0"]
        assert "health history: " + str(tmp_path / "state" / "health.json") in "\n".join(collection.found)
    finally:
        after.collector.close()


def test_a_non_fatal_nvlink5_xid_is_counted_and_asks_for_nothing_a_fatal_one_for_a_reset(tmp_path: Path) -> None:
    stamp = int((time.clock_gettime(time.CLOCK_MONOTONIC) - 30) * 1e6)
    (tmp_path / "kmsg").write_text(
        f"4,1,{stamp},-;NVRM: Xid (PCI:0000:18:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 "
        "0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)\n"
        f"4,2,{stamp},-;NVRM: Xid (PCI:0000:28:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6 "
        "0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)\n")
    node = Node(scenarios.node(2), tmp_path)
    try:
        collection = node.collect()
        counted = {(k[1], v) for k, v in samples(collection).items() if k[0] == "trainmon_gpu_xid_errors_total"}

        assert {(frozenset({"gpu": "0", "uuid": node.scenario["gpus"][0]["uuid"], "xid": "145"}.items()), 1.0),
                (frozenset({"gpu": "1", "uuid": node.scenario["gpus"][1]["uuid"], "xid": "149"}.items()), 1.0),
                } == counted
        verdicts = health(collection)
        assert ("none", set()) == verdicts["0"]
        assert "XID 149 NVLINK_NETIR_ERROR: reset the GPU" in verdicts["1"][1]  # beside the scenario's ECC
    finally:
        node.collector.close()



def test_a_user_cannot_make_a_healthy_gpu_ask_for_a_reboot(tmp_path: Path) -> None:
    """GPU 0's XID 79 in a segfault report (a program mapped from a file so named) and in a user-facility record
    counts nothing; GPU 1's own XID 119 from the driver still asks for a reset."""
    stamp = int((time.clock_gettime(time.CLOCK_MONOTONIC) - 30) * 1e6)
    spoof = "NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus."
    (tmp_path / "kmsg").write_text(
        f"6,1,{stamp},-;a.out[4242]: segfault at 0 ip 00007f3c1e2a1000 sp 00007ffd5e8b3c40 error 4 in {spoof}"
        "[1000,7f3c1e2a0000+1000] likely on CPU 0 (core 0, socket 0)\n"
        f"14,2,{stamp},-;{spoof}\n" + kmsg_xid(3, 119, 30).replace("0000:18:00", "0000:28:00"))
    node = Node(scenarios.node(2), tmp_path)
    try:
        collection = node.collect()
        verdicts = health(collection)

        assert ("none", set()) == verdicts["0"]
        assert "XID 119 GSP_RPC_TIMEOUT: reset the GPU" in verdicts["1"][1]  # beside the scenario's ECC
        assert ["1"] == [dict(labels)["gpu"] for name, labels in samples(collection)
                         if name == "trainmon_gpu_xid_errors_total"]
    finally:
        node.collector.close()

def test_a_corrupt_state_file_is_reported_and_the_verdict_still_served(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "health.json").write_text("not json")
    (tmp_path / "kmsg").write_text(kmsg_xid(1, 119, 30))
    node = Node(scenarios.node(2), tmp_path)
    try:
        collection = node.collect()
        assert "reset_gpu" == health(collection)["0"][0]
        assert [line for line in collection.skipped if line.startswith("health state: ")
                and "health.json unreadable at start, treated as empty" in line]
        assert '"version": 1' in (tmp_path / "state" / "health.json").read_text()  # replaced
    finally:
        node.collector.close()


def nvlink_fields(links: dict[int, tuple[int, int, int, int, int]]) -> dict[str, int]:
    """Scenario fields of a GPU with these links: link -> (state, crc_flit, crc_data, replay, recovery)."""
    answered = {str(fields.LINK_COUNT): len(links)}
    for link, (state, flit, data, replay, recovery) in links.items():
        answered |= {f"{fields.LINK_STATE}@{link}": state, f"{pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC}@{link}": flit,
                     str(fields.CRC_DATA_PER_LINK[link]): data,
                     f"{pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY}@{link}": replay,
                     f"{pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY}@{link}": recovery}
    return answered


def test_nvlink_per_link_in_the_same_field_values_call(node: Node) -> None:
    """GPU 0 with two links (one down) serves state and four error counters per link; GPU 1 without NVLink
    serves none; the cycle makes no NVML call more than without links."""
    node.collect()
    node.collect()
    before = node.library.calls
    node.collect()
    calls_without_links = node.library.calls - before
    base = node.scenario
    node.scenario = scenarios.changed(base, 0, fields={**base["gpus"][0]["fields"],
                                                       **nvlink_fields({0: (1, 5, 3, 7, 1), 1: (0, 9, 0, 0, 0)})})
    node.collector.close()  # links are counted at attach
    node.collect()
    before = node.library.calls
    got = samples(node.collect())

    gpu0 = {"gpu": "0", "uuid": base["gpus"][0]["uuid"]}
    up = {k[1]: v for k, v in got.items() if k[0] == "trainmon_gpu_nvlink_link_up"}
    errors = {k[1]: v for k, v in got.items() if k[0] == "trainmon_gpu_nvlink_errors_total"}
    assert {frozenset({**gpu0, "link": "0"}.items()): 1.0, frozenset({**gpu0, "link": "1"}.items()): 0.0} == up
    assert {("0", "crc_flit"): 5, ("0", "crc_data"): 3, ("0", "replay"): 7, ("0", "recovery"): 1,
            ("1", "crc_flit"): 9} == {  # zeros are not served
        (dict(k)["link"], dict(k)["error"]): v for k, v in errors.items()}
    assert calls_without_links == node.library.calls - before
