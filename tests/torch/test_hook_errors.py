"""What the hook swallowed reaches the daemon: `trainmon_train_hook_errors_total{kind}`."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from tests.helpers.daemon import Daemon, start_daemon
from tests.torch.jobs import metrics_when, samples, start_job


def test_reports_dropped_while_the_daemon_is_stopped_are_counted_as_send_dropped(
        tmp_path: Path, daemons: list[Daemon]) -> None:
    """A stopped daemon's full socket queue makes the rank's sends fail with EAGAIN; the next reports say so."""
    daemon = start_daemon(tmp_path, ["--collectors", "training", "--interval", "0.2"])
    daemons.append(daemon)
    procs = start_job("solo", 100_000, tmp_path / "job", ranks=1,
                      env={"TRAINMON_INGEST_SOCKET": str(tmp_path / "ingest.sock"), "JOB_ID": "drops",
                           "TRAINMON_REPORT_INTERVAL": "0.01", "JOB_STEP_SLEEP": "0.01"})
    try:
        metrics_when(daemon, lambda t: bool(samples(t, "trainmon_train_steps_total", job_id="drops")))
        os.kill(daemon.process.pid, signal.SIGSTOP)  # the queue holds net.unix.max_dgram_qlen datagrams
        time.sleep(1.0)
        os.kill(daemon.process.pid, signal.SIGCONT)
        text = metrics_when(daemon, lambda t: bool(samples(t, "trainmon_train_hook_errors_total", job_id="drops")))

        counts = {dict(labels)["kind"]: value
                  for labels, value in samples(text, "trainmon_train_hook_errors_total", job_id="drops").items()}
        assert counts.keys() == {"send_dropped"}
        assert counts["send_dropped"] >= 1
    finally:
        os.kill(daemon.process.pid, signal.SIGCONT)
        procs[0].kill()
        procs[0].wait()
