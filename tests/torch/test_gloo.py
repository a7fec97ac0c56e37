"""Real 2-process gloo jobs reporting to a real daemon through the Unix ingest socket."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.daemon import Daemon, start_daemon
from tests.torch.jobs import finish, metrics_when, per_rank, run_job, samples, start_job

pytestmark = pytest.mark.slow  # several real processes: torch.distributed ranks

STEPS = 4


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    tmp = tmp_path_factory.mktemp("daemon")
    started = start_daemon(tmp, ["--collectors", "training", "--interval", "0.2"])
    yield started
    started.stop()


def socket_env(daemon: Daemon, job_id: str) -> dict[str, str]:
    return {"TRAINMON_INGEST_SOCKET": str(daemon.log_path.parent / "ingest.sock"), "JOB_ID": job_id,
            "JOB_HOLD": "1", "TRAINMON_GPU_UUID": "GPU-test"}


def held_job(daemon: Daemon, tmp_path: Path, mode: str, job_id: str,
             rank_env: dict[int, dict[str, str]] | None = None) -> str:
    """Run a job whose ranks stay open after the last step; return the metrics seen then."""
    procs = start_job(mode, STEPS, tmp_path, env=socket_env(daemon, job_id), rank_env=rank_env)
    try:
        text = metrics_when(daemon, lambda t: per_rank(t, "trainmon_train_steps_total", job_id) == {0: STEPS, 1: STEPS})
    finally:
        (tmp_path / "release").touch()
        finish(procs, tmp_path)
    return str(text)


def test_ddp_job_reports_every_rank(daemon: Daemon, tmp_path: Path) -> None:
    """Each rank of a DDP job shows its steps, samples, histogram and DDP all-reduces; a clean exit says goodbye."""
    text = held_job(daemon, tmp_path, "ddp", "ddp-job")

    assert {0: STEPS * 8, 1: STEPS * 8} == per_rank(text, "trainmon_train_samples_total", "ddp-job")
    assert {0: STEPS, 1: STEPS} == per_rank(text, "trainmon_train_step_duration_seconds_count", "ddp-job")
    calls = per_rank(text, "trainmon_nccl_calls_total", "ddp-job", op="all_reduce", group="default_pg")
    assert calls[0] >= STEPS and calls[0] == calls[1]  # one DDP bucket (at least) per step
    info = samples(text, "trainmon_train_rank_info", job_id="ddp-job", rank="1")
    assert [("backend", "gloo"), ("framework", "ddp"), ("uuid", "GPU-test"), ("world_size", "2")] == [
        kv for kv in next(iter(info)) if kv[0] in {"backend", "framework", "uuid", "world_size"}]
    assert {0: 2, 1: 2} == per_rank(text, "trainmon_nccl_group_size", "ddp-job")
    gone = metrics_when(daemon, lambda t: not per_rank(t, "trainmon_train_steps_total", "ddp-job"))
    assert {(("job_id", "ddp-job"), ("reason", "clean")): 2.0} == samples(
        str(gone), "trainmon_train_rank_exits_total", job_id="ddp-job")


@pytest.fixture(scope="module")
def straggler_metrics(daemon: Daemon, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A hand-written loop (one async and three blocking all_reduce per step); rank 1 sleeps before them."""
    return held_job(daemon, tmp_path_factory.mktemp("manual"), "manual", "manual-job",
                    rank_env={1: {"JOB_SLEEP_BEFORE_COMM": "0.2"}})


def test_direct_collectives_are_counted(straggler_metrics: str) -> None:
    """Every `dist.all_reduce` the loop issues is one call, with its bytes, and it blocked the loop."""
    calls = per_rank(straggler_metrics, "trainmon_nccl_calls_total", "manual-job", op="all_reduce")
    sent = per_rank(straggler_metrics, "trainmon_nccl_bytes_total", "manual-job", op="all_reduce")
    waited = per_rank(straggler_metrics, "trainmon_train_comm_wait_seconds_total", "manual-job")

    assert {0: STEPS * 4, 1: STEPS * 4} == calls
    assert {0: STEPS * (16 * 32 + 32 + 32 + 1) * 4, 1: STEPS * (16 * 32 + 32 + 32 + 1) * 4} == sent
    assert waited[0] > 0 and waited[1] > 0


@pytest.mark.serial
def test_straggler_shows_as_more_collective_time_on_its_peer(straggler_metrics: str) -> None:
    """Rank 0 waits inside its collectives for the sleeping rank 1, so rank 0 shows more collective time."""
    seconds = per_rank(straggler_metrics, "trainmon_nccl_time_seconds_total", "manual-job")
    waited = per_rank(straggler_metrics, "trainmon_train_comm_wait_seconds_total", "manual-job")

    assert seconds[0] > seconds[1]
    assert waited[0] > waited[1]


def test_training_without_a_daemon_matches_a_disabled_hook(tmp_path: Path) -> None:
    """With no daemon listening, training finishes with the same parameters, bit for bit, as with TRAINMON_DISABLE=1."""
    absent, disabled = tmp_path / "absent", tmp_path / "disabled"
    run_job("ddp", STEPS, absent, env={"TRAINMON_INGEST_SOCKET": str(tmp_path / "nobody.sock")})
    run_job("ddp", STEPS, disabled, env={"TRAINMON_DISABLE": "1"})

    for rank in (0, 1):
        assert (disabled / f"params-{rank}.bin").read_bytes() == (absent / f"params-{rank}.bin").read_bytes()


def test_a_comm_hook_registered_after_watch_runs_and_is_timed(tmp_path: Path) -> None:
    """DDP accepts one comm hook: the user's, registered after watch(), runs inside ours and is timed."""
    run_job("ddp", STEPS, tmp_path, env={"TRAINMON_INGEST_SOCKET": str(tmp_path / "nobody.sock"),
                                         "JOB_USER_HOOK": "1"})
    report = json.loads((tmp_path / "report-0.json").read_text())
    (all_reduce,) = report["collectives"]

    assert report["user_hook_calls"] >= STEPS
    assert (report["user_hook_calls"], "all_reduce") == (all_reduce["calls"], all_reduce["op"])
    assert all_reduce["seconds"] > 0
