"""Ranks and daemons that come and go: restart, kill, hang (single-process jobs, no process group)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.helpers.daemon import Daemon, start_daemon
from tests.torch.jobs import finish, metrics_when, per_rank, samples, start_job


def solo_env(sock: Path, job_id: str) -> dict[str, str]:
    return {"TRAINMON_INGEST_SOCKET": str(sock), "JOB_ID": job_id}


def test_reporting_resumes_after_a_daemon_restart(tmp_path: Path, daemons: list[Daemon]) -> None:
    """A daemon restarted on the same socket path receives the running job's reports again."""
    first = start_daemon(tmp_path, ["--collectors", "training", "--interval", "0.2"])
    daemons.append(first)
    procs = start_job("solo", 10_000, tmp_path / "job", ranks=1,
                      env={**solo_env(tmp_path / "ingest.sock", "restart"), "JOB_STEP_SLEEP": "0.02"})
    try:
        before = per_rank(metrics_when(first, lambda t: bool(per_rank(t, "trainmon_train_steps_total", "restart"))),
                          "trainmon_train_steps_total", "restart")[0]
        first.stop()
        second = start_daemon(tmp_path, ["--collectors", "training", "--interval", "0.2"])
        daemons.append(second)
        after = metrics_when(second, lambda t: per_rank(t, "trainmon_train_steps_total", "restart").get(0, 0) > before)

        assert per_rank(after, "trainmon_train_steps_total", "restart")[0] > before
        assert procs[0].poll() is None
    finally:
        procs[0].kill()
        procs[0].wait()


def test_killed_rank_expires_and_hung_rank_keeps_its_heartbeat(tmp_path: Path, daemons: list[Daemon]) -> None:
    """After the TTL a killed rank's series are gone (exit `lost`); a hung rank stays, its last step frozen."""
    daemon = start_daemon(tmp_path, ["--collectors", "training", "--interval", "0.2", "--rank-ttl", "1.5"])
    daemons.append(daemon)
    procs = start_job("solo", 10_000, tmp_path / "job", env=solo_env(tmp_path / "ingest.sock", "faults"),
                      rank_env={0: {"JOB_HANG_AT": "3"}, 1: {"JOB_STEP_SLEEP": "0.05", "JOB_KILL_AT": "20"}})
    try:
        seen = metrics_when(daemon, lambda t: per_rank(t, "trainmon_train_steps_total", "faults").get(0) == 3
                            and 1 in per_rank(t, "trainmon_train_steps_total", "faults"))
        hung_at = per_rank(seen, "trainmon_train_last_step_timestamp_seconds", "faults")[0]
        assert procs[1].wait(timeout=60) == -signal.SIGKILL
        after = metrics_when(daemon, lambda t: samples(t, "trainmon_train_rank_exits_total", reason="lost") != {})

        assert {0: 3} == per_rank(after, "trainmon_train_steps_total", "faults")
        assert {0: hung_at} == per_rank(after, "trainmon_train_last_step_timestamp_seconds", "faults")
        assert {(("job_id", "faults"), ("reason", "lost")): 1.0} == samples(after, "trainmon_train_rank_exits_total")
        assert procs[0].poll() is None
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_a_rank_that_exits_cleanly_keeps_its_final_values_until_the_retention_ends(tmp_path: Path,
                                                                                   daemons: list[Daemon]) -> None:
    """Issue 38: on a clean exit a rank's series went at the next cycle, so Prometheus never scraped the last
    steps (140 of 200). The first snapshot that counts the goodbye now serves the rank's final step count,
    loss and totals, marked exited; the rank goes when --exited-rank-retention has passed."""
    daemon = start_daemon(tmp_path, ["--collectors", "training", "--interval", "0.2", "--exited-rank-retention", "20"])
    daemons.append(daemon)
    finish(start_job("solo", 150, tmp_path / "job", ranks=1, env=solo_env(tmp_path / "ingest.sock", "final")),
           tmp_path / "job")
    final = json.loads((tmp_path / "job" / "report-0.json").read_text())

    exited = metrics_when(daemon, lambda t: bool(samples(t, "trainmon_train_rank_exits_total", job_id="final")))

    assert {0: 150.0} == per_rank(exited, "trainmon_train_steps_total", "final")
    assert {0: final["samples"]} == per_rank(exited, "trainmon_train_samples_total", "final")
    assert {0: pytest.approx(final["loss"])} == per_rank(exited, "trainmon_train_loss", "final")
    assert {0: 1.0} == per_rank(exited, "trainmon_train_rank_exited", "final")
    assert {0: 1.0} == per_rank(exited, "trainmon_train_rank_info", "final")
    assert 0 == sum(samples(exited, "trainmon_ingest_ranks").values())
    gone = metrics_when(daemon, lambda t: not per_rank(t, "trainmon_train_steps_total", "final"))
    assert {} == per_rank(gone, "trainmon_train_rank_exited", "final")
    assert {(("job_id", "final"), ("reason", "clean")): 1.0} == samples(gone, "trainmon_train_rank_exits_total")
