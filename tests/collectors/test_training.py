"""The training collector on its own registry, fed through a real Unix datagram socket."""

from __future__ import annotations

import dataclasses
import grp
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.catalog import assert_declared
from tests.helpers.daemon import start_daemon
from tests.helpers.metrics import registry_of, samples_of
from tests.helpers.net import wait_until
from tests.torch.jobs import metrics_when, per_rank
from trainmon import wire
from trainmon.catalog import training
from trainmon.collectors.base import Collection, NodeResources
from trainmon.collectors.training import (
    JOB_GAUGES,
    TrainingCollector,
    ingest_families,
    rank_families,
    rank_series,
)
from trainmon.daemon import build_ingest, maintain_resources
from trainmon.errors import CollectorError, NoData
from trainmon.ingest.ranks import RankSlot, TableView
from trainmon.ingest.server import IngestServer
from trainmon.ingest.stacks import signature
from trainmon.settings import Settings

REPORT = wire.Report(
    job_id="llama", rank=1, start_time=1_767_000_000.0, seq=1, world_size=2, uuid="GPU-1",
    loss_scaler="torch_amp", loss_scale=1024.0, steps=5, step_buckets=(0, 0, 5, *(5,) * 11), step_seconds_sum=1.0,
    collectives=(wire.Collective(op="all_reduce", group="default_pg", seconds=0.5, calls=10, bytes=4096),),
    group_sizes={"default_pg": 2}, phase="eval", pid=os.getpid(),
)


class Collector(TrainingCollector):
    """The training collector with an ingest server of its own, which it maintains as the daemon does."""

    def __init__(self, settings: Settings) -> None:
        self.ingest: IngestServer = build_ingest(settings)
        self.resources = NodeResources(ingest=self.ingest)
        super().__init__(settings, self.resources)

    def collect(self) -> Collection:
        """One daemon cycle: the daemon maintains the ingest server, then the collector reads it."""
        maintain_resources(self.resources)
        return super().collect()

    def close(self) -> None:
        self.ingest.close()


def send(path: Path, report: wire.Report) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(wire.encode(report), str(path))


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[Collector]:
    (tmp_path / "run").mkdir()
    c = Collector(Settings(ingest_socket=str(tmp_path / "run" / "ingest.sock"), ingest_socket_mode=0o600))
    yield c
    c.close()


def collected_after(collector: Collector, path: Path, report: wire.Report) -> Collection:
    collector.collect()
    send(path, report)
    return wait_until(lambda: (c := collector.collect()).details["ranks"] and c)  # type: ignore[return-value]


def test_a_report_becomes_per_rank_series(collector: Collector, tmp_path: Path) -> None:
    path = tmp_path / "run" / "ingest.sock"
    collection = collected_after(collector, path, REPORT)
    reg = registry_of(collection.families)
    rank = {"job_id": "llama", "rank": "1"}

    assert 5 == reg.get_sample_value("trainmon_train_steps_total", rank)
    assert 1024 == reg.get_sample_value("trainmon_train_loss_scale", rank)
    assert 5 == reg.get_sample_value("trainmon_train_step_duration_seconds_bucket", {**rank, "le": "0.25"})
    assert 0.5 == reg.get_sample_value("trainmon_nccl_time_seconds_total",
                                       {**rank, "op": "all_reduce", "group": "default_pg"})
    assert 1 == reg.get_sample_value("trainmon_train_phase", {**rank, "phase": "eval"})
    assert 1 == reg.get_sample_value("trainmon_ingest_ranks")
    assert 0o600 == path.stat().st_mode & 0o777
    assert_declared(collection.families, "training")


def test_loss_scale_is_absent_without_a_scaler(collector: Collector, tmp_path: Path) -> None:
    bf16 = dataclasses.replace(REPORT, loss_scaler="none", loss_scale=1.0)
    reg = registry_of(collected_after(collector, tmp_path / "run" / "ingest.sock", bf16).families)

    assert reg.get_sample_value("trainmon_train_loss_scale", {"job_id": "llama", "rank": "1"}) is None


def test_status_details_list_live_ranks(collector: Collector, tmp_path: Path) -> None:
    collection = collected_after(collector, tmp_path / "run" / "ingest.sock", REPORT)

    assert [("llama", 1, 5, "eval")] == [(r["job_id"], r["rank"], r["steps"], r["phase"])
                                         for r in collection.details["ranks"]]  # type: ignore[union-attr,attr-defined]


def test_a_missing_socket_directory_fails_naming_the_flag_is_not_made_and_is_retried(tmp_path: Path) -> None:
    directory = tmp_path / "run"
    collector = Collector(Settings(ingest_socket=str(directory / "ingest.sock")))
    try:
        with pytest.raises(CollectorError, match=r"--ingest-socket=.*the directory .* cannot be used"):
            collector.collect()
        assert not directory.exists()  # a typo in the flag does not become a directory made as root
        directory.mkdir()

        collector.collect()
        assert (directory / "ingest.sock").is_socket()
    finally:
        collector.close()


def test_empty_socket_path_and_no_udp_means_no_ingest() -> None:
    collector = Collector(Settings(ingest_socket=""))
    try:
        with pytest.raises(NoData):
            collector.collect()
    finally:
        collector.close()


def test_a_stale_socket_file_is_replaced_but_a_live_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ingest.sock"
    live = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    live.bind(str(path))
    collector = Collector(Settings(ingest_socket=str(path)))
    try:
        with pytest.raises(CollectorError, match="another process is listening"):
            collector.collect()
        live.close()  # the file stays behind, as after a crash
        collector.collect()
    finally:
        collector.close()


def test_the_collector_only_reads_the_ingest_server_it_never_binds_it(tmp_path: Path) -> None:
    settings = Settings(ingest_socket=str(tmp_path / "ingest.sock"))
    ingest = build_ingest(settings)
    try:
        collection = TrainingCollector(settings, NodeResources(ingest=ingest)).collect()

        assert not (tmp_path / "ingest.sock").exists()  # binding is the daemon's job (`maintain_resources`)
        assert 0 == registry_of(collection.families).get_sample_value("trainmon_ingest_ranks")
    finally:
        ingest.close()


def foreign_group() -> grp.struct_group:
    """A group this process is not in, so the socket can only have it if the server chowned it."""
    mine = {os.getgid(), *os.getgroups()}
    return next(g for g in grp.getgrall() if g.gr_gid not in mine)


def test_socket_group_is_applied_and_an_unknown_group_is_reported(tmp_path: Path) -> None:
    group = foreign_group()
    good = Collector(Settings(ingest_socket=str(tmp_path / "a.sock"), ingest_socket_group=group.gr_name))
    bad = Collector(Settings(ingest_socket=str(tmp_path / "b.sock"), ingest_socket_group="no-such-group-x"))
    try:
        good.collect()
        with pytest.raises(CollectorError, match="no-such-group-x"):
            bad.collect()

        assert group.gr_gid == (tmp_path / "a.sock").stat().st_gid
    finally:
        good.close()
        bad.close()


NEW_FIELDS = dataclasses.replace(
    REPORT, pod="trainer-0", namespace="ml", first_step=1_767_000_010.0, model_flops=3e15,
    group_seqs=(wire.GroupSeq("default_pg", 12, 11),), inflight=(wire.Inflight("default_pg", "all_reduce", 100.0),),
    phase_seconds={"checkpoint": 4.5}, hook_errors={"send_drops": 2}, pg_timeouts={"default_pg": 120.0},
    collectives_captured=3, collectives_untimed=(wire.UntimedCalls("all_reduce", "default_pg", 4),),
)
STUCK_STACK = ("/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py:2810:all_reduce",
               "<trainmon wrapper of all_reduce>:12:all_reduce", "/job/train.py:88:train_step",
               "/job/train.py:120:main")
HUNG = dataclasses.replace(NEW_FIELDS, phase=None, hang_suspected=1, stack=STUCK_STACK,
                           group_ranks={"default_pg": "0-1"})


@pytest.mark.parametrize("step", [7200, -7200], ids=["forward", "back"])
def test_a_step_of_the_daemons_wall_clock_does_not_move_an_in_flight_age(tmp_path: Path, step: int) -> None:
    """Issue 31: the age was the daemon's Unix time minus the hook's `since`, so a step of the wall clock (NTP)
    moved it by the step: +2 h paged TrainmonCollectiveHang, -2 h hid a hang. Rank 0 reports as the hook does
    now; rank 1 as a hook older than `inflight_age`, which is still aged wall minus wall: it shows the step."""
    step_file = tmp_path / "wall-clock-step"
    began = time.monotonic()
    daemon = start_daemon(tmp_path, ["--collectors", "training", "--interval", "0.2"], env={
        "PYTHONPATH": os.pathsep.join([str(WALL_CLOCK), os.environ.get("PYTHONPATH", "")]),
        "WALL_CLOCK_STEP_FILE": str(step_file)})
    try:
        since = time.time() - 5.0
        for rank, ages in ((0, {"default_pg": 5.0}), (1, {})):
            send(tmp_path / "ingest.sock", dataclasses.replace(
                NEW_FIELDS, rank=rank, inflight=(wire.Inflight("default_pg", "all_reduce", since),),
                inflight_age=ages))
        first = per_rank(metrics_when(daemon, lambda text: len(ages_of(text)) == 2), INFLIGHT, "llama")
        step_file.write_text(f"{step}\n")

        later = per_rank(metrics_when(daemon, lambda text: stepped(ages_of(text).get(1), step)), INFLIGHT, "llama")
        elapsed = time.monotonic() - began
    finally:
        daemon.stop()

    assert 5.0 <= first[0] <= later[0] <= 5.0 + elapsed


INFLIGHT = "trainmon_nccl_inflight_oldest_seconds"
WALL_CLOCK = Path(__file__).resolve().parents[1] / "helpers" / "wall_clock"  # its sitecustomize steps time.time()


def ages_of(text: str) -> dict[int, float]:
    return per_rank(text, INFLIGHT, "llama")


def stepped(wall_minus_wall: float | None, step: int) -> bool:
    """Whether an age taken wall minus wall shows the daemon's clock stepped by `step` (back: clamped to 0)."""
    return wall_minus_wall is not None and (wall_minus_wall > step / 2 if step > 0 else wall_minus_wall == 0)


def test_the_new_wire_fields_become_their_families() -> None:
    """From a hook older than `inflight_age`, an in-flight collective is aged by Unix time."""
    state = RankSlot(NEW_FIELDS, received_at=0.0, received_wall=0.0, process=1, verified=True, series=0)
    reg = registry_of(rank_families([state], now=160.0, clock=0.0))
    rank = {"job_id": "llama", "rank": "1"}

    assert 12 == reg.get_sample_value("trainmon_nccl_issued_total", {**rank, "group": "default_pg"})
    assert 11 == reg.get_sample_value("trainmon_nccl_completed_total", {**rank, "group": "default_pg"})
    assert 60 == reg.get_sample_value("trainmon_nccl_inflight_oldest_seconds",
                                      {**rank, "group": "default_pg", "op": "all_reduce"})
    assert 4.5 == reg.get_sample_value("trainmon_train_phase_seconds_total", {**rank, "phase": "checkpoint"})
    assert 2 == reg.get_sample_value("trainmon_train_hook_errors_total", {**rank, "kind": "send_drops"})
    assert 3e15 == reg.get_sample_value("trainmon_train_model_flops_total", rank)
    assert REPORT.start_time == reg.get_sample_value("trainmon_train_process_start_timestamp_seconds", rank)
    assert 1_767_000_010.0 == reg.get_sample_value("trainmon_train_first_step_timestamp_seconds", rank)
    info = next(s for f in reg.collect() for s in f.samples if s.name == "trainmon_train_rank_info")
    assert ("trainer-0", "ml") == (info.labels["pod"], info.labels["namespace"])
    assert 120 == reg.get_sample_value("trainmon_train_pg_timeout_seconds", {**rank, "group": "default_pg"})
    assert 3 == reg.get_sample_value("trainmon_train_collectives_captured_total", rank)
    assert 4 == reg.get_sample_value("trainmon_nccl_untimed_calls_total", {**rank, "op": "all_reduce",
                                                                           "group": "default_pg"})


WORK = dataclasses.replace(REPORT, tokens=8192, microbatches=16, pipeline_stage=2)


def test_the_work_a_rank_did_and_its_pipeline_stage_are_served_where_the_hook_knows_them() -> None:
    rank = {"job_id": "llama", "rank": "1"}
    known, unknown = (registry_of(rank_families([RankSlot(r, received_at=0.0, received_wall=0.0, process=1,
                                                          verified=True, series=0)], now=0.0, clock=0.0))
                      for r in (WORK, REPORT))

    assert (8192, 16, 2) == tuple(known.get_sample_value(name, rank) for name in (
        "trainmon_train_tokens_total", "trainmon_train_microbatches_total", "trainmon_train_pipeline_stage"))
    assert (None, None) == (unknown.get_sample_value("trainmon_train_microbatches_total", rank),
                            unknown.get_sample_value("trainmon_train_pipeline_stage", rank))


def test_an_in_flight_collective_issued_in_the_future_reads_zero_not_negative() -> None:
    state = RankSlot(NEW_FIELDS, received_at=0.0, received_wall=0.0, process=1, verified=True, series=0)
    reg = registry_of(rank_families([state], now=50.0, clock=0.0))

    assert 0 == reg.get_sample_value("trainmon_nccl_inflight_oldest_seconds",
                                     {"job_id": "llama", "rank": "1", "group": "default_pg", "op": "all_reduce"})


@pytest.mark.parametrize("report", [REPORT, NEW_FIELDS, WORK, HUNG,
                                    wire.Report(job_id="j", rank=0, pid=1, start_time=1.0, seq=1)])
def test_rank_series_counts_exactly_the_samples_served(report: wire.Report) -> None:
    state = RankSlot(report, received_at=0.0, received_wall=0.0, process=1, verified=True, series=0)

    assert rank_series(report) == len(samples_of(rank_families([state], now=0.0, clock=0.0)))


def test_exits_by_reason_and_socket_rebinds_are_served() -> None:
    view = TableView(ranks=(), messages=0, coalesced=0, rejected={}, evicted={}, series=0, taken_at=0.0,
                     exits={("j", "clean"): 3, ("j", "error"): 1, ("j", "lost"): 2})
    reg = registry_of(ingest_families(view, rebinds=2))

    assert [3, 1, 2] == [reg.get_sample_value("trainmon_train_rank_exits_total", {"job_id": "j", "reason": r})
                         for r in ("clean", "error", "lost")]
    assert 2 == reg.get_sample_value("trainmon_ingest_socket_rebinds_total")


def test_a_driver_report_serves_only_its_phase_seconds_and_the_job_gauges_this_daemon_knows() -> None:
    """A framework driver (verl's trainer) is no rank: no rank_info, steps or histogram, so no rule counts it."""
    report = wire.decode(wire.encode(wire.Report(
        job_id="rl", rank=wire.DRIVER_RANK, pid=1, start_time=1.0, seq=1, phase_seconds={"gen": 40.0},
        job_gauges={"rl_reward_mean": 0.5, "rl_from_a_newer_hook": 1.0})))
    state = RankSlot(report, received_at=0.0, received_wall=0.0, process=1, verified=True, series=0)
    served = samples_of(rank_families([state], now=0.0, clock=0.0))
    driver = {("job_id", "rl"), ("rank", "driver")}

    assert {("trainmon_train_phase_seconds_total", frozenset({*driver, ("phase", "gen")})): 40.0,
            ("trainmon_rl_reward_mean", frozenset(driver)): 0.5} == served
    assert rank_series(report) == len(served)



def test_a_suspected_rank_serves_where_it_is_stuck_and_its_stack_signature_never_the_stack(
        collector: Collector, tmp_path: Path) -> None:
    """The stack comes once per episode: the next report, without it, still serves its signature, and
    /api/v1/ranks' details carry the stack itself."""
    path = tmp_path / "run" / "ingest.sock"
    collected_after(collector, path, HUNG)
    send(path, dataclasses.replace(HUNG, seq=2, stack=None))
    wait_until(lambda: [s.report.seq for s in collector.ingest.table.view().ranks] == [2])
    collection = collector.collect()
    reg = registry_of(collection.families)
    rank = {"job_id": "llama", "rank": "1"}
    hangs: Any = collection.details["rank_hangs"]

    assert 1 == reg.get_sample_value("trainmon_train_hang_suspected", rank)
    assert 1 == reg.get_sample_value("trainmon_train_hang_location", {**rank, "location": "collective"})
    assert 1 == reg.get_sample_value("trainmon_train_stack_info", {**rank, "signature": signature(STUCK_STACK)})
    assert not [s for f in collection.families for s in f.samples if "/job/train.py" in str(s.labels)]
    assert [list(STUCK_STACK)] == [h["stack"] for h in hangs]
    assert {"default_pg": {"issued": 12, "completed": 11, "ranks": "0-1", "timeout_seconds": 120.0}} == \
        hangs[0]["groups"]


def test_every_family_is_declared_in_the_catalogue_and_the_reports_fill_each() -> None:
    """A rank with every wire field, a hung one that exited, a driver with every job gauge, and every ingest count."""
    driver = wire.Report(job_id="rl", rank=wire.DRIVER_RANK, pid=1, start_time=1.0, seq=1,
                         job_gauges=dict.fromkeys(JOB_GAUGES, 0.5))
    ranks = [RankSlot(r, received_at=0.0, received_wall=0.0, process=1, verified=True, series=0, exited_at=exited)
             for r, exited in ((dataclasses.replace(NEW_FIELDS, tokens=1, microbatches=1, pipeline_stage=0, loss=2.0,
                                                    grad_norm=1.0, loss_max=2.0, grad_norm_max=1.0, cuda_ooms=0,
                                                    cuda_alloc_retries=0, nccl_env={"NCCL_ALGO": "Ring"},
                                                    parallel={"tp": 2}, last_step=1.0), None),
                               (dataclasses.replace(HUNG, rank=2), None), (dataclasses.replace(REPORT, rank=3), 1.0),
                               (driver, None))]
    view = TableView(ranks=(), messages=1, coalesced=1, rejected={"version": 1}, evicted={"ranks": 1}, series=0,
                     taken_at=0.0, exits={("llama", "lost"): 1})
    families = [*rank_families(ranks, now=160.0, clock=0.0), *ingest_families(view, rebinds=1)]

    assert {family.name for family in training.FAMILIES} == assert_declared(families, "training")


def test_a_rank_that_is_not_suspected_serves_0_and_no_stack_series() -> None:
    slot = RankSlot(REPORT, received_at=0.0, received_wall=0.0, process=1, verified=True, series=0,
                    stack=STUCK_STACK)
    reg = registry_of(rank_families([slot], now=0.0, clock=0.0))

    assert 0 == reg.get_sample_value("trainmon_train_hang_suspected", {"job_id": "llama", "rank": "1"})
    assert not [s for s in samples_of(rank_families([slot], now=0.0, clock=0.0))
                if s[0] in ("trainmon_train_stack_info", "trainmon_train_hang_location")]


@pytest.mark.parametrize("stack", [["x"] * 65, ["x" * 300], ["/a.py:1:f" * 25] * 20, [1, 2], "a.py:1:f", ["\x00"]],
                         ids=["frames", "frame-length", "bytes", "not-strings", "not-a-list", "unprintable"])
def test_a_garbage_or_oversized_stack_is_counted_and_dropped(collector: Collector, tmp_path: Path,
                                                             stack: object) -> None:
    path = tmp_path / "run" / "ingest.sock"
    message = json.loads(wire.encode(HUNG))
    message["stack"] = stack
    collector.collect()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(json.dumps(message).encode(), str(path))

    def rejected(collection: Collection) -> float:
        reg = registry_of(collection.families)
        return sum(reg.get_sample_value("trainmon_ingest_rejected_total", {"reason": r}) or 0
                   for r in ("range", "schema"))

    wait_until(lambda: rejected(collector.collect()) == 1)
    reg = registry_of(collected_after(collector, path, dataclasses.replace(HUNG, seq=2, stack=None)).families)

    assert 1 == reg.get_sample_value("trainmon_train_stack_info", {"job_id": "llama", "rank": "1",
                                                                   "signature": "unknown"})


def test_a_rank_whose_process_died_without_a_goodbye_is_gone_at_once_not_at_its_ttl(
        collector: Collector, tmp_path: Path) -> None:
    """SIGKILL: the kernel proved the sender's pid, and that pid is gone: `location="gone"` long before --rank-ttl."""
    path = tmp_path / "run" / "ingest.sock"
    collector.collect()
    code = ("import os, socket, sys, time; from trainmon import wire; "
            "r = wire.Report(job_id='llama', rank=0, pid=os.getpid(), start_time=time.time(), seq=1, steps=3); "
            "socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(wire.encode(r), sys.argv[1]); "
            "print('sent', flush=True); time.sleep(600)")
    child = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"sent"
        alive = wait_until(lambda: (c := collector.collect()).details["ranks"] and c)
    finally:
        child.kill()
        child.communicate()
    gone = registry_of(collector.collect().families)
    rank = {"job_id": "llama", "rank": "0"}

    assert 0 == registry_of(alive.families).get_sample_value(  # type: ignore[attr-defined]
        "trainmon_train_hang_suspected", rank)
    assert 1 == gone.get_sample_value("trainmon_train_hang_suspected", rank)
    assert 1 == gone.get_sample_value("trainmon_train_hang_location", {**rank, "location": "gone"})
