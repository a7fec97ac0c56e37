"""The demo's simulated NCCL Inspector textfiles and NCCL RAS port, read by trainmon's real parser and poller."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.helpers.clock import Clock
from trainmon.collectors.nccl_ras import poll
from trainmon.parsers.nccl_inspector import parse_textfile
from trainmon.parsers.nccl_ras import MissingRank
from trainmon.settings import Address
from trainmon.simulation.incidents import HUNG_RANK, Plan
from trainmon.simulation.nccl import INSPECTOR_WINDOW_S, InspectorFiles, SimulatedRas

UUIDS = [f"GPU-5e1a7ed0-{i:04x}-4c0d-8e5a-0000d0e0{i:04x}" for i in range(4)]
GB = 1_000_000_000


def ticks(files: InspectorFiles, clock: Clock, n: int, seconds: list[float]) -> None:
    for _ in range(n):
        clock.now += 1
        files.advance([2 * GB] * len(seconds), seconds)


def windows(directory: Path) -> dict[str, float | None]:
    """GPU -> the bus bandwidth of its textfile's one window, as the nccl_inspector collector parses it."""
    out = {}
    for path in sorted(directory.glob("nccl_inspector_metrics_*.prom")):
        [window] = parse_textfile(path.read_text()).windows
        assert ("DP Group 0", "all_reduce", "<256MiB") == (window.comm_name, window.collective, window.size_class)
        out[window.gpu] = window.bus_bandwidth
    return out


def test_each_gpu_gets_its_window_of_bus_bandwidth_and_the_slow_member_shows(tmp_path: Path) -> None:
    clock = Clock()
    files = InspectorFiles(tmp_path, UUIDS, ranks=4, bucket_bytes=40 * 10**6, clock=clock)
    ticks(files, clock, int(INSPECTOR_WINDOW_S) - 1, [0.2, 0.2, 0.2, 0.5])
    assert [] == list(tmp_path.glob("*.prom"))  # Inspector writes a window at its end

    ticks(files, clock, 1, [0.2, 0.2, 0.2, 0.5])

    assert {"GPU0": 10 * GB, "GPU1": 10 * GB, "GPU2": 10 * GB, "GPU3": 4 * GB} == windows(tmp_path)
    assert {f"nccl_inspector_metrics_{u.removeprefix('GPU-')}.prom" for u in UUIDS} == {
        p.name for p in tmp_path.iterdir()}


def test_a_window_without_all_reduces_rewrites_nothing(tmp_path: Path) -> None:
    clock = Clock()
    files = InspectorFiles(tmp_path, UUIDS, ranks=4, bucket_bytes=40 * 10**6, clock=clock)
    ticks(files, clock, int(INSPECTOR_WINDOW_S), [0.2] * 4)
    before = {p.name: p.stat().st_ino for p in tmp_path.iterdir()}

    ticks(files, clock, int(INSPECTOR_WINDOW_S), [0.0] * 4)  # a checkpoint, a stall, a hang

    assert before == {p.name: p.stat().st_ino for p in tmp_path.iterdir()}


def test_ras_answers_the_pollers_status_for_the_job() -> None:
    ras = SimulatedRas(8, Plan())
    try:
        ras.advance([1] * 8)
        outcome = poll(Address("127.0.0.1", ras.port), "STATUS", 5.0, 1 << 20)
    finally:
        ras.stop()

    assert "ok" == outcome.result, outcome.detail
    assert outcome.summary is not None
    assert (1, 0, frozenset({os.getpid()})) == (outcome.summary.communicators, outcome.summary.mismatched,
                                               outcome.summary.pids)
    assert {"unresponsive": 0, "dead": 0, "absent": 0} == outcome.summary.missing


def test_in_the_hang_the_hung_rank_stops_answering_ras() -> None:
    ras = SimulatedRas(8, Plan("hang", after=0))
    try:
        outcome = poll(Address("127.0.0.1", ras.port), "VERBOSE STATUS", 5.0, 1 << 20)
    finally:
        ras.stop()

    assert outcome.summary is not None, outcome.detail
    assert {"unresponsive": 1, "dead": 0, "absent": 0} == outcome.summary.missing
    # Named, but unresponsive, not dead: TrainmonJobHung's class stays the hook's (`host`, rank 2), never `gone`.
    assert (MissingRank(HUNG_RANK, "unresponsive", "127.0.0.1"),) == outcome.summary.named
    assert f'"rank": {HUNG_RANK},' in json.dumps(ras.answer()["communicators"]).split('"missing_ranks"')[1]
