"""The demo's simulated job reaches a real training collector through the real socket and sender."""

from __future__ import annotations

import os
from pathlib import Path
from typing import cast

import pytest

from tests.helpers.net import wait_until
from trainmon.collectors.base import NodeResources
from trainmon.collectors.training import TrainingCollector
from trainmon.daemon import build_ingest
from trainmon.demo.job import (
    FLOPS_PER_TOKEN,
    JOB_ID,
    RANKS,
    SAMPLES_PER_STEP,
    SEQUENCE_TOKENS,
    SMOKE_TEST_SUFFIX,
    STRAGGLER,
    TICK_SECONDS,
    start_simulated_job,
)
from trainmon.nvml.peaks import peak_flops
from trainmon.settings import Settings
from trainmon.simulation.incidents import HANGS, HUNG_RANK, Plan
from trainmon.simulation.node import NAME
from trainmon.wire import Report


def test_simulated_ranks_report_and_say_goodbye(tmp_path: Path) -> None:
    settings = Settings(ingest_socket=str(tmp_path / "ingest.sock"))
    ingest = build_ingest(settings)
    collector = TrainingCollector(settings, NodeResources(ingest=ingest))
    ingest.maintain()  # as the daemon does before each cycle
    job = start_simulated_job(settings)
    try:
        wait_until(lambda: all(r["steps"] >= 2 for r in collector.collect().details["ranks"]  # type: ignore[union-attr,attr-defined]
                               if not r["exited"])  # the one-step smoke test's rank, exited, is still served
                   and len(ingest.table.view().running) == RANKS, timeout=30)
        reports = {s.report.rank: s.report for s in ingest.table.view().running}
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
    for report in reports.values():  # between steps every collective issued has completed
        assert [(g.group, g.issued) for g in report.group_seqs] == [("default_pg", g.completed)
                                                                     for g in report.group_seqs]
        assert report.group_seqs[0].completed == sum(c.calls for c in report.collectives) > 0
        assert () == report.inflight
        assert report.model_flops == report.tokens * FLOPS_PER_TOKEN
        assert report.first_step is not None and report.first_step <= (report.last_step or 0)
        assert {"send_drops": 1} == report.hook_errors


def test_the_model_flops_put_mfu_on_the_simulated_h100s_near_half() -> None:
    flops_per_second = SAMPLES_PER_STEP * SEQUENCE_TOKENS * FLOPS_PER_TOKEN / TICK_SECONDS

    assert 0.40 < flops_per_second / peak_flops(NAME)["bf16"] < 0.55


def test_in_a_hang_one_rank_stops_issuing_while_its_peers_wait_in_a_collective(tmp_path: Path) -> None:
    settings = Settings(ingest_socket=str(tmp_path / "ingest.sock"))
    ingest = build_ingest(settings)
    collector = TrainingCollector(settings, NodeResources(ingest=ingest))
    ingest.maintain()  # as the daemon does before each cycle
    job = start_simulated_job(settings, plan=Plan("hang", after=3.0))

    def hung() -> dict[int, Report] | None:
        collector.collect()
        reports = {s.report.rank: s.report for s in ingest.table.view().running if s.report.job_id == f"{JOB_ID}-hang"}
        return reports if sum(1 for r in reports.values() if r.inflight) == RANKS - 1 else None

    try:
        first: dict[int, Report] = wait_until(hung, timeout=30)  # type: ignore[assignment]
        wait_until(lambda: collector.collect() and min(s.report.seq for s in ingest.table.view().running)
                   > max(r.seq for r in first.values()) + 2, timeout=30)
        later = {s.report.rank: s.report for s in ingest.table.view().running}
    finally:
        job.stop()
        ingest.close()

    issued = {rank: r.group_seqs[0].issued for rank, r in later.items()}
    peers = {rank: n for rank, n in issued.items() if rank != HUNG_RANK}
    assert {max(peers.values())} == set(peers.values())
    assert issued[HUNG_RANK] == max(peers.values()) - 1
    assert () == later[HUNG_RANK].inflight
    # the same collective, ageing: its `since` is the same number in every report
    assert {rank: first[rank].inflight[0].since for rank in peers} == {rank: later[rank].inflight[0].since
                                                                      for rank in peers}
    assert {r.steps for r in later.values()} == {r.steps for r in first.values()}


def test_the_loss_spike_incident_plays_blooms_spike_on_every_rank(tmp_path: Path) -> None:
    """3 grad-norm spikes, then 1 loss spike, on each rank, played after the 20 steps the hook's statistics need
    even when the incident starts before them (as on a machine too loaded to step once a second)."""
    settings = Settings(ingest_socket=str(tmp_path / "ingest.sock"))
    ingest = build_ingest(settings)
    collector = TrainingCollector(settings, NodeResources(ingest=ingest))
    ingest.maintain()  # as the daemon does before each cycle
    job = start_simulated_job(settings, plan=Plan("loss-spike", after=TICK_SECONDS))

    def spikes() -> dict[int, tuple[int, int]]:
        collector.collect()
        return {s.report.rank: (s.report.grad_norm_spikes, s.report.loss_spikes) for s in ingest.table.view().running}

    try:
        wait_until(lambda: len(spikes()) == RANKS and all(g >= 3 and n >= 1 for g, n in spikes().values()), timeout=90)
        seen = spikes()
    finally:
        job.stop()
        ingest.close()

    assert set(seen.values()) == {(3, 1)}


@pytest.mark.parametrize("hang", sorted(HANGS))
def test_past_the_hang_threshold_each_hang_shows_its_culprit_where_it_is_stuck(tmp_path: Path, hang: str) -> None:
    """Each hang shows as TrainmonJobHung sees it: every rank suspected, the peers inside the all-reduce, rank 2 in
    its model code (`hang`: class host, by its sequence numbers), its data loader, alone at its place in the
    all-reduce (`hang-collective`: the stack no peer shares), or gone through an error."""
    settings = Settings(ingest_socket=str(tmp_path / "ingest.sock"))
    ingest = build_ingest(settings)
    collector = TrainingCollector(settings, NodeResources(ingest=ingest))
    ingest.maintain()
    job = start_simulated_job(settings, plan=Plan(hang, after=3.0), hang_threshold_s=1.0)  # every rank reported

    def samples(name: str) -> dict[int, dict[str, str]]:
        families = collector.collect().families
        return {int(s.labels["rank"]): s.labels for f in families for s in f.samples
                if s.name == name and s.labels["job_id"] == f"{JOB_ID}-{hang}"}

    def stuck() -> tuple[dict[int, str], dict[int, str]] | None:
        places = {rank: labels["location"] for rank, labels in samples("trainmon_train_hang_location").items()}
        stacks = {rank: labels["signature"] for rank, labels in samples("trainmon_train_stack_info").items()}
        return (places, stacks) if len(places) == RANKS and len(stacks) == RANKS - (hang == "hang-gone") else None

    try:
        found = wait_until(stuck, timeout=30)
    finally:
        job.stop()
        ingest.close()

    places, stacks = cast(tuple[dict[int, str], dict[int, str]], found)
    culprit = {"hang": "other", "hang-data": "data", "hang-collective": "collective", "hang-gone": "gone"}[hang]
    assert dict.fromkeys(range(RANKS), "collective") | {HUNG_RANK: culprit} == places
    peers = {stacks[rank] for rank in range(RANKS) if rank != HUNG_RANK}
    assert 1 == len(peers) and stacks.get(HUNG_RANK) not in peers
