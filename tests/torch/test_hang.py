"""Hang localisation on real gloo ranks: sequence numbers, in-flight age that grows live, exit reasons."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.daemon import Daemon, start_daemon
from tests.torch.jobs import metrics_when, per_rank, samples, start_job

pytestmark = pytest.mark.slow  # several real processes: torch.distributed ranks


def test_the_waiting_rank_shows_a_growing_inflight_age_and_the_stuck_rank_lags(
        tmp_path: Path, daemons: list[Daemon]) -> None:
    """Rank 1 stops before its collectives at step 3; rank 0 blocks in all_reduce: its reporter keeps
    reporting, so its oldest in-flight collective ages while it is blocked, and it has issued more."""
    daemon = start_daemon(tmp_path, ["--collectors", "training", "--interval", "0.2"])
    daemons.append(daemon)
    procs = start_job("manual", 100, tmp_path / "job", rank_env={1: {"JOB_HANG_AT": "3"}},
                      env={"TRAINMON_INGEST_SOCKET": str(tmp_path / "ingest.sock"), "JOB_ID": "hang"})
    try:
        def age(text: str) -> float:
            return per_rank(text, "trainmon_nccl_inflight_oldest_seconds", "hang", op="all_reduce").get(0, 0.0)

        first = metrics_when(daemon, lambda t: age(t) > 0.5)
        later = metrics_when(daemon, lambda t: age(t) > age(first) + 1.5)
        issued = per_rank(later, "trainmon_nccl_issued_total", "hang", group="default_pg")
        completed = per_rank(later, "trainmon_nccl_completed_total", "hang", group="default_pg")

        # 4 all_reduce per step: rank 0 issued the async one and the first blocking one of step 3
        assert {0: 3 * 4 + 2, 1: 3 * 4} == issued
        assert {0: 3 * 4, 1: 3 * 4} == completed
        assert 1 not in per_rank(later, "trainmon_nccl_inflight_oldest_seconds", "hang")
        assert procs[0].poll() is None and procs[1].poll() is None
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_a_rank_that_dies_of_an_uncaught_exception_exits_with_error(tmp_path: Path, daemons: list[Daemon]) -> None:
    """atexit still runs after an uncaught exception: the goodbye says `error`, not `clean`."""
    daemon = start_daemon(tmp_path, ["--collectors", "training", "--interval", "0.2"])
    daemons.append(daemon)
    procs = start_job("solo", 5, tmp_path / "job", ranks=2, rank_env={1: {"JOB_RAISE_AT": "2"}},
                      env={"TRAINMON_INGEST_SOCKET": str(tmp_path / "ingest.sock"), "JOB_ID": "exits"})
    codes = [proc.wait(timeout=120) for proc in procs]

    def exits(text: str) -> dict[str, float]:
        found = samples(text, "trainmon_train_rank_exits_total", job_id="exits")
        return {dict(labels)["reason"]: value for labels, value in found.items()}

    seen = metrics_when(daemon, lambda t: sum(exits(t).values()) == 2)

    assert [0, 1] == codes
    assert "planted failure at step 2" in (tmp_path / "job" / "rank-1.log").read_text()
    assert {"clean": 1.0, "error": 1.0} == exits(seen)
