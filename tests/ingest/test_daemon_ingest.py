"""A real daemon fed hostile datagrams over its Unix socket and UDP: it rejects, counts and stays up."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.net import free_port
from tests.torch.jobs import metrics_when, samples
from trainmon import wire

VALID = wire.Report(job_id="ok", rank=0, pid=os.getpid(), start_time=1_767_000_000.0, seq=1, steps=7)


def total(text: str, name: str, **match: str) -> float:
    return sum(samples(text, name, **match).values())


def test_hostile_datagrams_are_rejected_counted_and_bounded(tmp_path: Path, daemons: list[Daemon]) -> None:
    udp_port = free_port()
    daemon = start_daemon(tmp_path, ["--collectors", "training", "--interval", "0.2", "--max-ranks", "16",
                                     "--ingest-udp", f"127.0.0.1:{udp_port}"])
    daemons.append(daemon)
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    unix.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 16)
    path = str(tmp_path / "ingest.sock")
    hostile = [b"{oops", wire.encode(VALID)[:50], b"\x00" * 100, json.dumps({"v": 1, "rank": "0"}).encode()]
    unix.sendto(wire.encode(VALID), path)
    for data in hostile:
        unix.sendto(data, path)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.sendto(b"z" * (wire.MAX_DATAGRAM + 100), ("127.0.0.1", udp_port))
    for i in range(200):  # a flood of distinct job ids
        udp.sendto(wire.encode(wire.Report(job_id=f"flood-{i}", rank=0, pid=1, start_time=1.0, seq=1)),
                   ("127.0.0.1", udp_port))
    text = metrics_when(daemon, lambda t: total(t, "trainmon_ingest_rejected_total") >= 4 + 1 + 200 - 15)

    assert 16 == total(text, "trainmon_ingest_ranks")
    assert 16 == len(samples(text, "trainmon_train_steps_total"))
    assert 3 == total(text, "trainmon_ingest_rejected_total", reason="malformed")
    assert 1 == total(text, "trainmon_ingest_rejected_total", reason="schema")
    assert 1 == total(text, "trainmon_ingest_rejected_total", reason="oversized")
    assert 200 - 15 == total(text, "trainmon_ingest_rejected_total", reason="max_ranks")
    assert {(("job_id", "ok"), ("rank", "0")): 7.0} == samples(text, "trainmon_train_steps_total", job_id="ok")
    assert 200 == daemon.get("/healthz").status_code
