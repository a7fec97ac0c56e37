"""IngestServer: a stopped receiver thread is restarted by the daemon's cycle and reported by the training collector."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.helpers.net import wait_until
from trainmon import wire
from trainmon.collectors.base import NodeResources
from trainmon.collectors.training import TrainingCollector, rank_series
from trainmon.ingest.ranks import Datagram, RankTable
from trainmon.ingest.server import IngestServer
from trainmon.scheduler import Scheduler
from trainmon.settings import Settings
from trainmon.snapshot import SnapshotStore


class StopsTheReceiverOnce(RankTable):
    """A table whose first burst raises what no `except Exception` catches, as a fatal bug would."""

    stopped = False

    def receive_burst(self, burst: Sequence[Datagram]) -> None:
        if not self.stopped:
            self.stopped = True
            raise SystemExit("the receiver thread ends here")
        super().receive_burst(burst)


def send(path: Path, seq: int) -> None:
    report = wire.Report(job_id="j", rank=0, pid=os.getpid(), start_time=1.0, seq=seq, steps=seq)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(wire.encode(report), str(path))


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_stopped_receiver_fails_the_training_collector_once_and_is_restarted(tmp_path: Path) -> None:
    path = tmp_path / "ingest.sock"
    table = StopsTheReceiverOnce(max_ranks=8, ttl=60, series_of=rank_series, max_series=8000, exit_retention=60)
    server = IngestServer(table, socket_path=str(path), mode=0o600, group=None, udp=None)
    scheduler = Scheduler([TrainingCollector(Settings(), NodeResources(ingest=server))], SnapshotStore(),
                          interval=1, timeout=10, before_cycle=server.maintain)

    def training_error() -> str | None:
        return next(s.error for s in scheduler.run_cycle().statuses if s.name == "training")

    try:
        assert training_error() is None
        send(path, 1)
        wait_until(lambda: table.stopped)

        wait_until(lambda: "receiver thread had stopped; it was restarted" in (training_error() or ""))
        send(path, 2)
        wait_until(lambda: [s.report.steps for s in table.view().ranks] == [2])
        assert training_error() is None  # healthy again
    finally:
        scheduler.stop()
        server.close()


def test_unix_datagrams_carry_the_kernels_sender_pid(tmp_path: Path) -> None:
    table = RankTable(max_ranks=8, ttl=60, series_of=rank_series, max_series=8000, exit_retention=60)
    server = IngestServer(table, socket_path=str(tmp_path / "ingest.sock"), mode=0o600, group=None, udp=None)
    try:
        server.maintain()
        send(tmp_path / "ingest.sock", 1)
        wait_until(lambda: table.view().ranks)

        assert [True] == [s.verified for s in table.view().ranks]
    finally:
        server.close()
