"""The demo's simulated job reaches a real training collector through the real socket and sender."""

from __future__ import annotations

import os
from pathlib import Path

from tests.helpers.net import wait_until
from trainmon.collectors.training import TrainingCollector
from trainmon.daemon import build_ingest
from trainmon.demo.job import JOB_ID, RANKS, SMOKE_TEST_SUFFIX, STRAGGLER, start_simulated_job
from trainmon.settings import Settings


def test_simulated_ranks_report_and_say_goodbye(tmp_path: Path) -> None:
    settings = Settings(ingest_socket=str(tmp_path / "ingest.sock"))
    ingest = build_ingest(settings)
    collector = TrainingCollector(settings, ingest)
    collector.collect()
    job = start_simulated_job(settings)
    try:
        wait_until(lambda: all(r["steps"] >= 2 for r in collector.collect().details["ranks"])  # type: ignore[union-attr]
                   and len(ingest.table.view().ranks) == RANKS, timeout=30)
        reports = {s.report.rank: s.report for s in ingest.table.view().ranks}
    finally:
        job.stop()
    wait_until(lambda: ingest.table.view().exits.get((JOB_ID, "clean")) == RANKS)
    wait_until(lambda: ingest.table.view().exits.get((JOB_ID + SMOKE_TEST_SUFFIX, "clean")) == 1)
    exits = ingest.table.view().exits
    ingest.close()

    others = [sum(c.seconds for c in r.collectives) for rank, r in reports.items() if rank != STRAGGLER]
    assert min(others) > sum(c.seconds for c in reports[STRAGGLER].collectives)
    assert {r.loss_scaler for r in reports.values()} == {"torch_amp"}
    assert {(JOB_ID, "clean"): RANKS, (JOB_ID + SMOKE_TEST_SUFFIX, "clean"): 1} == exits
    assert {os.getpid()} == {r.pid for r in reports.values()}  # the daemon checks pids against the sender's
