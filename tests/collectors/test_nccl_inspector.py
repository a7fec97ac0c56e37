"""The nccl_inspector collector on real files in Inspector's layouts, joined through a real ingest server."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.catalog import assert_declared
from tests.helpers.metrics import registry_of
from tests.helpers.nccl_node import UUID1, Node
from trainmon.catalog import nccl_inspector as catalog
from trainmon.collectors import nccl_inspector
from trainmon.collectors.nccl_inspector import NcclInspectorCollector
from trainmon.errors import NoData

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nccl" / "inspector"
PROM_NAME = "nccl_inspector_metrics_00000000-0000-0000-0000-000000000001.prom"
JSON_NAME = "gpu-node-07-pid4001.log"  # the fixture: Inspector in pid 4001
DP_BIG = {"job_id": "llama", "rank": "9", "comm_name": "DP Group 0", "collective": "all_reduce",
          "size_class": ">=256MiB"}
HOST = "gpu-node-07"  # the fixtures' writer: this node
BANDWIDTH = "trainmon_nccl_inspector_bus_bandwidth_bytes_per_second"


class Clock:
    """Wall time a little ahead, so files just written count as settled unless a test says otherwise."""

    def __init__(self) -> None:
        self.ahead = 10.0

    def __call__(self) -> float:
        return time.time() + self.ahead


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    (tmp_path / "prom").mkdir()
    (tmp_path / "json").mkdir()
    n = Node(tmp_path, nccl_inspector_dir=tmp_path / "prom", nccl_inspector_json_dir=tmp_path / "json")
    yield n
    n.close()


def collector(node: Node, clock: Clock | None = None) -> NcclInspectorCollector:
    return NcclInspectorCollector(node.settings, node.resources, clock=clock or Clock(), hostname=HOST)


def json_dump(pid: int) -> str:
    """The fixture's records, as written by a process with `pid` (the hook's pid, so that they join)."""
    return (FIXTURES / "json" / JSON_NAME).read_text().replace('"pid":4001', f'"pid":{pid}')


def dump_path(tmp_path: Path, pid: int | None = None) -> Path:
    """Where Inspector in process `pid` (this one by default) writes its JSON dump."""
    return tmp_path / "json" / f"gpu-node-07-pid{pid or os.getpid()}.log"


def value(node_collector: NcclInspectorCollector, name: str, labels: dict[str, str]) -> float | None:
    return registry_of(node_collector.collect().families).get_sample_value(name, labels)


def test_a_textfile_window_joins_through_the_gpu_uuid_to_the_hooks_rank_once(node: Node, tmp_path: Path) -> None:
    node.report(rank=9, uuid=UUID1)
    shutil.copy(FIXTURES / "prom" / PROM_NAME, tmp_path / "prom" / PROM_NAME)
    c = collector(node)

    reg = registry_of(c.collect().families)
    assert 1 == reg.get_sample_value(f"{BANDWIDTH}_count", DP_BIG)
    assert 182.4e9 == reg.get_sample_value(f"{BANDWIDTH}_sum", DP_BIG)
    assert 1 == reg.get_sample_value("trainmon_nccl_inspector_info",
                                     {"job_id": "llama", "rank": "9", "uuid": UUID1, "source": "textfile",
                                      "version": "v5.1"})
    assert reg.get_sample_value("trainmon_nccl_inspector_operations_total", DP_BIG) is None  # no counts in a window
    assert 1 == value(c, f"{BANDWIDTH}_count", DP_BIG)  # the same window is not counted twice

    path = tmp_path / "prom" / PROM_NAME
    path.write_text(path.read_text())  # Inspector's next window rewrites the file
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000_000))
    assert 2 == value(c, f"{BANDWIDTH}_count", DP_BIG)


def test_json_operations_become_counters_and_cpu_timed_ones_are_dropped(node: Node, tmp_path: Path) -> None:
    node.report(rank=9)
    dump_path(tmp_path).write_text(json_dump(os.getpid()))
    c = collector(node)

    collection = c.collect()
    reg = registry_of(collection.families)
    skipped = catalog.NCCL_INSPECTOR_RECORDS_SKIPPED_TOTAL.name  # nothing to skip in this dump
    assert {family.name for family in catalog.FAMILIES} - {skipped} == assert_declared(collection.families,
                                                                                      "nccl_inspector")
    assert 4 == reg.get_sample_value("trainmon_nccl_inspector_operations_total", DP_BIG)
    assert (2701 + 2702 + 2703 + 2704) / 1e6 == pytest.approx(
        reg.get_sample_value("trainmon_nccl_inspector_seconds_total", DP_BIG))
    assert 4 * (256 << 20) == reg.get_sample_value("trainmon_nccl_inspector_bytes_total", DP_BIG)
    assert 1 == reg.get_sample_value("trainmon_nccl_inspector_dropped_total", {**DP_BIG, "size_class": "<64KiB"})
    tp = {**DP_BIG, "comm_name": "TP Group 0", "collective": "all_gather", "size_class": "<256MiB"}
    assert 3 == reg.get_sample_value("trainmon_nccl_inspector_operations_total", tp)

    with open(dump_path(tmp_path), "a") as f:  # the next dump appends
        f.write(json_dump(os.getpid()).splitlines(keepends=True)[0])
    assert 5 == value(c, "trainmon_nccl_inspector_operations_total", DP_BIG)


def test_a_record_cut_short_waits_for_its_writer_then_is_skipped_and_counted(node: Node, tmp_path: Path) -> None:
    node.report(rank=9)
    lines = json_dump(os.getpid()).splitlines(keepends=True)
    path = dump_path(tmp_path)
    path.write_text(lines[0] + lines[1][:50])
    clock = Clock()
    clock.ahead = 0.0  # the writer may still be writing
    c = collector(node, clock)

    reg = registry_of(c.collect().families)
    assert 1 == reg.get_sample_value("trainmon_nccl_inspector_operations_total", DP_BIG)
    assert reg.get_sample_value("trainmon_nccl_inspector_records_skipped_total", {"reason": "truncated"}) is None

    with open(path, "a") as f:  # the writer finishes the line
        f.write(lines[1][50:])
    assert 2 == value(c, "trainmon_nccl_inspector_operations_total", DP_BIG)

    with open(path, "a") as f:  # and dies mid-record
        f.write(lines[2][:30])
    clock.ahead = 10.0
    reg = registry_of(c.collect().families)
    assert 1 == reg.get_sample_value("trainmon_nccl_inspector_records_skipped_total", {"reason": "truncated"})
    assert 2 == reg.get_sample_value("trainmon_nccl_inspector_operations_total", DP_BIG)


def test_a_replaced_dump_is_read_from_its_start(node: Node, tmp_path: Path) -> None:
    node.report(rank=9)
    path = dump_path(tmp_path)
    path.write_text(json_dump(os.getpid()))
    c = collector(node)
    assert 4 == value(c, "trainmon_nccl_inspector_operations_total", DP_BIG)

    path.unlink()
    path.write_text(json_dump(os.getpid()).splitlines(keepends=True)[0])  # rotated: a new, shorter file
    assert 5 == value(c, "trainmon_nccl_inspector_operations_total", DP_BIG)


def test_without_a_hook_a_record_goes_to_its_gpu(node: Node, tmp_path: Path) -> None:
    dump_path(tmp_path, 4001).write_text(json_dump(4001))  # NVML's process on GPU 1
    shutil.copy(FIXTURES / "prom" / PROM_NAME, tmp_path / "prom" / PROM_NAME)
    reg = registry_of(collector(node).collect().families)

    gpu1 = {**DP_BIG, "job_id": "unknown", "rank": "gpu1"}
    assert 4 == reg.get_sample_value("trainmon_nccl_inspector_operations_total", gpu1)
    assert 5 == reg.get_sample_value(f"{BANDWIDTH}_count", gpu1)  # 4 operations and 1 window


def test_records_of_no_known_process_or_gpu_are_counted_not_served(node: Node, tmp_path: Path) -> None:
    dump_path(tmp_path, 77).write_text(json_dump(77))
    other = PROM_NAME.replace("000000000001", "000000000042")  # another node's GPU: its file is not read
    shutil.copy(FIXTURES / "prom" / PROM_NAME, tmp_path / "prom" / other)
    unnamed = (FIXTURES / "prom" / PROM_NAME).read_text().replace('gpu="GPU1"', 'gpu="GPU5"')
    (tmp_path / "prom" / "older-inspector.prom").write_text(unnamed)  # no UUID, and no GPU 5 here
    collection = collector(node).collect()
    reg = registry_of(collection.families)

    assert 7 == reg.get_sample_value("trainmon_nccl_inspector_records_skipped_total", {"reason": "unattributed"})
    assert reg.get_sample_value("trainmon_nccl_inspector_operations_total", DP_BIG) is None
    assert any("pid 77 is no hook rank" in s for s in collection.skipped)  # waits for its hook


def test_a_dump_written_before_the_hooks_first_report_waits_for_it(node: Node, tmp_path: Path) -> None:
    dump_path(tmp_path).write_text(json_dump(os.getpid()))
    c = collector(node)
    assert value(c, "trainmon_nccl_inspector_operations_total", DP_BIG) is None

    node.report(rank=9)
    assert 4 == value(c, "trainmon_nccl_inspector_operations_total", DP_BIG)


def test_label_sets_beyond_the_budget_are_refused_and_counted(node: Node, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nccl_inspector, "MAX_LABEL_SETS", 2)
    monkeypatch.setattr(nccl_inspector, "MAX_COMM_NAMES", 1)
    node.report(rank=9)
    dump_path(tmp_path).write_text(json_dump(os.getpid()))
    collection = collector(node).collect()
    reg = registry_of(collection.families)

    assert 2 == collection.details["label_sets"]
    assert 3 == reg.get_sample_value("trainmon_nccl_inspector_records_skipped_total", {"reason": "comm_names"})
    assert 3 == reg.get_sample_value("trainmon_nccl_inspector_operations_total",
                                     {**DP_BIG, "comm_name": "other", "collective": "all_gather",
                                      "size_class": "<256MiB"})
    assert 1 == reg.get_sample_value("trainmon_nccl_inspector_records_skipped_total", {"reason": "series_budget"})


def test_an_oversized_textfile_is_not_read(node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nccl_inspector, "MAX_TEXTFILE_BYTES", 1000)
    node.report(rank=9)
    shutil.copy(FIXTURES / "prom" / PROM_NAME, tmp_path / "prom" / PROM_NAME)
    collection = collector(node).collect()
    reg = registry_of(collection.families)

    assert 1 == reg.get_sample_value("trainmon_nccl_inspector_records_skipped_total", {"reason": "oversized"})
    assert reg.get_sample_value(f"{BANDWIDTH}_count", DP_BIG) is None
    assert any("over the 1000-byte cap" in s for s in collection.skipped)


def test_without_either_directory_there_is_nothing_to_read(tmp_path: Path) -> None:
    n = Node(tmp_path)
    try:
        with pytest.raises(NoData, match="--nccl-inspector-dir"):
            collector(n).collect()
    finally:
        n.close()


def test_a_dump_larger_than_a_cycle_reads_is_caught_up_over_cycles(node: Node, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nccl_inspector, "MAX_CYCLE_BYTES", 1000)  # two records a cycle
    node.report(rank=9)
    dump_path(tmp_path).write_text(json_dump(os.getpid()))
    c = collector(node)

    reg = registry_of(c.collect().families)
    assert 2 == reg.get_sample_value("trainmon_nccl_inspector_operations_total", DP_BIG)
    assert 0 < (reg.get_sample_value("trainmon_nccl_inspector_backlog_bytes") or 0)
    for _ in range(3):
        reg = registry_of(c.collect().families)
    assert 4 == reg.get_sample_value("trainmon_nccl_inspector_operations_total", DP_BIG)
    assert 0 == reg.get_sample_value("trainmon_nccl_inspector_backlog_bytes")


def test_dumps_written_on_other_nodes_of_a_shared_directory_are_not_read_nor_counted_against_the_cap(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nccl_inspector, "MAX_FILES", 2)
    node.report(rank=9)
    for other in ("gpu-node-01", "gpu-node-02", "gpu-node-03"):  # sorted before this node's dump
        (tmp_path / "json" / f"{other}-pid{os.getpid()}.log").write_text(json_dump(os.getpid()))
    dump_path(tmp_path).write_text(json_dump(os.getpid()).splitlines(keepends=True)[0])
    collection = collector(node).collect()

    assert 1 == registry_of(collection.families).get_sample_value("trainmon_nccl_inspector_operations_total",
                                                                  DP_BIG)
    assert [] == [s for s in collection.skipped if "gpu-node-0" in s]  # another node's business, not a problem
